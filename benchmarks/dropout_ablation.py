"""Whole-step ablation of fast CPU dropout: {fp32, bf16} x {torch dropout, fast dropout}, rotated rounds.

``python benchmarks/dropout_ablation.py [--rounds 3] [--steps 10] [--warmup 2] [--batch-size 32]
[--max-length 128] [--json FILE]``

Builds the ``bert-sst2`` recipe's model, optimizer and loss through its protocol
(``prepare`` / ``build``, the shipped MiniLM offline) and trains it on one fixed batch of
the recipe's own loader, so every variant computes the same shapes. A step is the
trainer's: autocast forward + loss, backward, total gradient norm
(``get_total_norm``) with its finite check (one host sync), clip
(``clip_grads_with_norm_``), optimizer step, ``zero_grad``. The fast variants run the
same step inside ``mixft.dropout.use_fast_dropout`` (hidden-state and sdpa attention
dropout). Each round runs every variant (``warmup`` untimed steps, then ``steps`` timed
ones) in a rotated order, so load drifting on a shared machine falls on all alike.

Printed: per variant the median step time over all timed steps, the spread (25th-75th
percentile and min), and the fast-vs-torch speedup per precision with the range of the
per-round speedups (a range that straddles 1.0 is noise). Then an isolated gradient-norm
comparison on one set of real gradients: per-parameter ``linalg.vector_norm`` calls,
``torch._foreach_norm`` (what ``get_total_norm`` uses by default on CPU in torch 2.13),
and one norm over the concatenated gradients (a copy; its last column shows how far its
fp32 reduction over millions of elements lands from the per-parameter value); clipping
with and without foreach. The
CPU model and its flags (amx_bf16, avx512_bf16, avx512_fp16) head the output: an
ablation from one CPU says nothing about another.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repo root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from benchmarks.bert import BertSetup, make_optimizer, prepare_bert  # noqa: E402
from benchmarks.timing import markdown_table, rotated  # noqa: E402
from mixft.dropout import use_fast_dropout  # noqa: E402
from mixft.hardware import describe_hardware, hardware_line  # noqa: E402
from mixft.measure import synchronize  # noqa: E402
from mixft.precision import resolve_device, resolve_precision  # noqa: E402

PRECISIONS = ("fp32", "bf16")
DROPOUTS = ("torch", "fast")


class Workload:
    """One precision's model, optimizer, loss and fixed batch, built by the recipe."""

    def __init__(self, bert, precision_name: str, device: torch.device, max_grad_norm: float | None):
        self.precision = resolve_precision(precision_name, device)
        parts = bert.recipe.build(bert.cfg, bert.prepared, self.precision, device, seed=0)
        self.model = parts.model.to(device).train()
        self.optimizer = make_optimizer(parts, self.model)
        self.loss_fn = parts.loss_fn
        batch = {k: v.to(device) for k, v in next(iter(parts.train_loader)).items()}
        self.labels = batch.pop("labels")
        self.inputs = batch
        self.params = [p for group in self.optimizer.param_groups for p in group["params"]]
        self.device = device
        self.max_grad_norm = max_grad_norm

    def step(self) -> None:
        dtype = self.precision.autocast_dtype or torch.float32
        with torch.autocast(self.device.type, dtype=dtype, enabled=self.precision.autocast_enabled):
            loss = self.loss_fn(self.model(**self.inputs), self.labels)
        loss.backward()
        grads = [p.grad for p in self.params if p.grad is not None]
        norm = torch.nn.utils.get_total_norm(grads)
        if bool(torch.isfinite(norm)):  # the trainer's finite check: one host sync a step
            if self.max_grad_norm is not None:
                torch.nn.utils.clip_grads_with_norm_(self.params, self.max_grad_norm, norm)
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def timed_steps(self, fast: bool, warmup: int, steps: int) -> list[float]:
        swap = use_fast_dropout(self.model) if fast else contextlib.nullcontext()
        with swap:
            for _ in range(warmup):
                self.step()
            times = []
            for _ in range(steps):
                synchronize(self.device)
                t0 = time.perf_counter()
                self.step()
                synchronize(self.device)
                times.append(time.perf_counter() - t0)
        return times


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run_ablation(workloads: dict[str, Workload], rounds: int, warmup: int, steps: int) -> dict:
    """Step times per variant ``"<precision>/<dropout>"``: ``{"all": [...], "rounds": [[...], ...]}``."""
    variants = [(p, d) for p in workloads for d in DROPOUTS]
    times = {f"{p}/{d}": {"all": [], "rounds": []} for p, d in variants}
    for r in range(rounds):
        for precision, dropout in rotated(variants, r):
            t = workloads[precision].timed_steps(dropout == "fast", warmup, steps)
            times[f"{precision}/{dropout}"]["all"] += t
            times[f"{precision}/{dropout}"]["rounds"].append(t)
    return times


def ablation_table(times: dict, precisions: list[str]) -> str:
    rows = []
    for precision in precisions:
        base = times[f"{precision}/torch"]
        for dropout in DROPOUTS:
            t = times[f"{precision}/{dropout}"]
            ms = [x * 1000 for x in t["all"]]
            if dropout == "torch":
                speedup = "1.00 (reference)"
            else:
                per_round = [statistics.median(b) / statistics.median(f) for b, f in zip(base["rounds"], t["rounds"])]
                speedup = (f"{statistics.median(base['all']) / statistics.median(t['all']):.2f} "
                           f"(rounds {min(per_round):.2f}-{max(per_round):.2f})")
            rows.append([precision, dropout, f"{statistics.median(ms):.1f}",
                         f"{quantile(ms, 0.25):.1f}-{quantile(ms, 0.75):.1f}", f"{min(ms):.1f}", len(ms), speedup])
    headers = ["precision", "dropout", "median ms/step", "p25-p75 ms", "min ms", "steps", "speedup vs torch"]
    return markdown_table(headers, rows)


def grad_norm_ablation(workload: Workload, repeats: int) -> tuple[str, dict]:
    """Isolated: the same real gradients, normed and clipped per parameter vs with foreach."""
    workload.optimizer.zero_grad(set_to_none=True)
    dtype = workload.precision.autocast_dtype or torch.float32
    with torch.autocast(workload.device.type, dtype=dtype, enabled=workload.precision.autocast_enabled):
        workload.loss_fn(workload.model(**workload.inputs), workload.labels).backward()
    grads = [p.grad for p in workload.params if p.grad is not None]
    saved = [g.clone() for g in grads]
    max_norm = workload.max_grad_norm or 1.0

    def per_parameter():
        return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))

    def foreach():
        return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))

    def concatenated():
        return torch.linalg.vector_norm(torch.cat([g.reshape(-1) for g in grads]))

    def restore():
        torch._foreach_copy_(grads, saved)

    norms = {"per-parameter norm": per_parameter, "torch._foreach_norm": foreach, "one norm of torch.cat": concatenated}
    clips = {"clip, foreach=False": False, "clip, foreach=True": True}
    values = {name: fn().item() for name, fn in norms.items()}
    times: dict[str, list[float]] = {name: [] for name in [*norms, *clips]}
    total = torch.tensor(values["per-parameter norm"])
    for r in range(repeats):
        for name in rotated(list(times), r):
            if name in clips:
                restore()
            t0 = time.perf_counter()
            if name in norms:
                norms[name]()
            else:
                torch.nn.utils.clip_grads_with_norm_(workload.params, max_norm, total, foreach=clips[name])
            times[name].append(time.perf_counter() - t0)
    restore()
    reference = values["per-parameter norm"]
    rows = [[name, f"{statistics.median(t) * 1000:.2f}", f"{min(t) * 1000:.2f}",
             f"{abs(values[name] - reference) / reference:.1e}" if name in values else "n/a"]
            for name, t in times.items()]
    table = markdown_table(["over the same gradients", "median ms", "min ms", "norm rel. diff vs per-parameter"], rows)
    return (f"Gradient norm and clip, isolated ({len(grads)} gradient tensors, {workload.precision.name} step, "
            f"{repeats} repeats):\n\n{table}"), {"grad_tensors": len(grads), "norms": values, "times_s": times}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=10, help="timed steps per variant per round")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per variant per round")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--precisions", default=",".join(PRECISIONS))
    p.add_argument("--grad-norm-repeats", type=int, default=20, help="0 skips the isolated gradient-norm table")
    p.add_argument("--json", help="also write the raw step times here")
    args = p.parse_args(argv)
    if min(args.rounds, args.steps, args.batch_size, args.max_length) < 1 or args.warmup < 0:
        p.error("--rounds, --steps, --batch-size and --max-length must be >= 1, --warmup >= 0")
    device = resolve_device("cpu")  # fast dropout is a CPU change: on CUDA the swap is a no-op
    precisions = [name.strip() for name in args.precisions.split(",") if name.strip()]
    bert = prepare_bert(BertSetup(train_samples=args.batch_size, eval_samples=8, batch_size=args.batch_size,
                                  max_length=args.max_length, device="cpu"))
    workloads = {name: Workload(bert, name, device, bert.cfg.clip_norm) for name in precisions}
    shape = tuple(next(iter(workloads.values())).inputs["input_ids"].shape)
    hw = describe_hardware(device)
    print(f"Dropout ablation, {bert.cfg.recipe} ({bert.cfg.model}), batch {shape[0]} x {shape[1]} tokens, "
          f"{args.rounds} rounds x ({args.warmup} warm-up + {args.steps} timed steps) per variant")
    print(f"{hardware_line(hw)}; flags {json.dumps(hw['cpu']['flags'])}; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads\n")
    times = run_ablation(workloads, args.rounds, args.warmup, args.steps)
    print(ablation_table(times, precisions))
    result = {"hardware": hw, "batch_shape": shape, "args": vars(args), "step_times_s": times}
    if args.grad_norm_repeats > 0:
        text, result["grad_norm"] = grad_norm_ablation(workloads[precisions[-1]], args.grad_norm_repeats)
        print("\n" + text)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
