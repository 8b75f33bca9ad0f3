"""Where a training step's time goes, per precision: torch.profiler's per-operator table, side by side.

``python benchmarks/profile_step.py [--recipe bert-sst2] [--precisions fp32,bf16] [--steps 5]
[--stream [--train-samples 2000]] [--data-dir DIR] [--model M] [--batch-size N] [--no-floor] [--out FILE.md]
[--json FILE]``

Builds the recipe through its protocol (``prepare`` / ``build``), trains its real model
with mixft's Trainer on one fixed batch (so every precision sees the same shapes), and
profiles ``--steps`` optimizer steps after a warm-up. Prints the whole-step time per
precision and one markdown table: self CPU (or CUDA) milliseconds per operator for each
precision, sorted by the last precision's cost, with that precision's share. On a CPU
with AMX the matmuls shrink and what does not shrink (dropout masks, casts, the
optimizer, elementwise kernels) takes over: this is the tool for finding it. The
machine's CPU flags are printed with the table: a profile from one CPU says nothing
about another.

``--stream``: the recipe's real train loader instead, in its order (seed 0), so the shapes change
as in a run: ``--warmup`` steps, ``--steps`` timed one at a time (their median is the steady
state), the next ``--steps`` profiled; the epoch's distinct (rows x row length) and padding
efficiency are printed first (``benchmarks.stream``).

Beside each step, from an untimed pass over the timed steps' batches again: what autocast cast
per step (``benchmarks.casts``: calls and bytes, weights apart from activations by shape), the
step's matmul FLOPs (``torch.utils.flop_counter``) and, unless ``--no-floor``, the step's floor
(``mixft.train.floor``: those FLOPs at the probe's matmul rate plus fused AdamW's and the clip's
bytes at a measured bandwidth).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

from benchmarks.casts import CastCounter
from benchmarks.floors import gauges_line, measure_gauges
from benchmarks.stream import Batches, epoch_shapes
from benchmarks.timing import SameBatch
from mixft.amp.hardware import describe_hardware, hardware_line
from mixft.amp.precision import resolve_device, resolve_precision
from mixft.config.run_config import RunConfig
from mixft.errors import UsageError
from mixft.recipe import get_recipe
from mixft.runs.build import build_trainer
from mixft.train.floor import optimizer_clip_bytes
from mixft.train.measure import synchronize


def profile_precision(
    recipe, cfg: RunConfig, prepared, name: str, device, steps: int, warmup: int, stream: bool = False
) -> dict:
    """One precision's figures: ``step_s`` (median), ``ops`` ({op: self ms per step}), ``casts``
    (per step), ``matmul_flops`` (per timed step), ``parameter_bytes`` (optimizer and clip)."""
    from torch.profiler import ProfilerActivity, profile
    from torch.utils.flop_counter import FlopCounterMode

    precision = resolve_precision(name, device)
    parts = recipe.build(cfg, prepared, precision, device, seed=0)
    # The stream: the loader's own batches in order; else its first batch, again and again.
    batches = iter(parts.train_loader) if stream else itertools.repeat(next(iter(parts.train_loader)))
    parts.eval_loader = None
    parts.train_loader = Batches(batches, warmup)
    # One epoch per fit(): each fit() trains exactly the batches it is handed.
    trainer = build_trainer(parts, replace(cfg, epochs=1), precision=precision, device=device, seed=0)
    trainer.fit()  # warm-up: allocator, kernels, optimizer state
    times, timed = [], []
    for _ in range(steps):
        timed.append(next(batches))
        trainer.train_loader, trainer.epochs, trainer.state.epoch = SameBatch(timed[-1], 1), 1, 0
        synchronize(device)
        t0 = time.perf_counter()
        trainer.fit()
        synchronize(device)
        times.append(time.perf_counter() - t0)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    trainer.train_loader, trainer.state.epoch = Batches(batches, steps), 0
    with profile(activities=activities) as prof:
        trainer.fit()
    attr = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    ops = {e.key: getattr(e, attr) / 1000 / steps for e in prof.key_averages()}
    # Untimed: the timed steps' batches once more (one, when they are all the same batch),
    # counting casts and matmul FLOPs; both slow what they watch.
    counted = timed if stream else timed[:1]
    flops = []
    with CastCounter(trainer.module) as casts:
        for batch in counted:
            trainer.train_loader, trainer.state.epoch = SameBatch(batch, 1), 0
            with FlopCounterMode(display=False) as counter:
                trainer.fit()
            flops.append(counter.get_total_flops())
    return {
        "step_s": statistics.median(times),
        "step_times_s": times,
        "ops": ops,
        "casts": casts.per_step(len(counted)),
        "casts_line": casts.line(len(counted)),
        "matmul_flops": flops,
        "parameter_bytes": optimizer_clip_bytes(trainer.params, clip=trainer.max_grad_norm is not None),
    }


def render(results: dict, hw: dict, cfg: RunConfig, rows: int, stream: bool = False) -> str:
    names = list(results)
    last = names[-1]
    ops = results[last]["ops"]
    total = {n: sum(results[n]["ops"].values()) for n in names}
    top = sorted(ops, key=ops.get, reverse=True)[:rows]
    what = "the recipe's train loader in its order" if stream else "one batch, repeated"
    lines = [f"Profile of a {cfg.recipe} step ({what}) on {hardware_line(hw)}; torch {torch.__version__}", ""]
    lines += [
        "Whole step (median): "
        + ", ".join(f"{n} {results[n]['step_s'] * 1000:.1f} ms" for n in names)
        + (
            f" ({results[names[0]]['step_s'] / results[last]['step_s']:.2f}x {last} vs {names[0]})"
            if len(names) > 1
            else ""
        ),
        "",
    ]
    for n in names:
        lines.append(f"{n}: {results[n]['casts_line']}")
        if results[n].get("floor_line"):
            lines.append(f"{n}: {results[n]['floor_line']}")
    lines.append("")
    lines.append("| op | " + " | ".join(f"{n} ms/step" for n in names) + f" | {last} share |")
    lines.append("|---|" + "---:|" * (len(names) + 1))
    for op in top:
        cells = [f"{results[n]['ops'].get(op, 0.0):.1f}" for n in names]
        lines.append(f"| {op} | " + " | ".join(cells) + f" | {ops[op] / total[last] * 100:.1f}% |")
    lines.append("| total self time | " + " | ".join(f"{total[n]:.1f}" for n in names) + " | |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--recipe", default="bert-sst2")
    p.add_argument("--precisions", default="fp32,bf16")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--rows", type=int, default=14)
    p.add_argument("--device", default="auto")
    p.add_argument("--stream", action="store_true", help="the recipe's train loader in its order, not one batch")
    p.add_argument(
        "--train-samples", type=int, default=2000, help="--stream: sentences in the epoch whose shapes are counted"
    )
    p.add_argument("--data-dir", help="a GLUE-layout directory for the recipe's data (default: the recipe's)")
    p.add_argument("--model", help="the recipe's --model (default: the recipe's)")
    p.add_argument("--batch-size", type=int, help="the recipe's --batch-size (default: the recipe's)")
    p.add_argument("--no-floor", action="store_true", help="skip the floor line (and the probe it runs)")
    p.add_argument("--out", help="also write the markdown table here")
    p.add_argument("--json", help="also write every figure here")
    args = p.parse_args(argv)
    if min(args.steps, args.warmup, args.train_samples, args.rows, args.batch_size or 1) < 1:
        p.error("--steps, --warmup, --train-samples, --rows and --batch-size must be >= 1")
    precisions = [n.strip() for n in args.precisions.split(",") if n.strip()]
    try:
        device = resolve_device(args.device)
        for name in precisions:
            resolve_precision(name, device)
        recipe = get_recipe(args.recipe)
        # One batch of the recipe's data is all the fixed-batch profile needs; the stream takes an epoch.
        cfg = RunConfig(
            recipe=args.recipe,
            max_train_samples=args.train_samples if args.stream else 64,
            max_eval_samples=8,
            device=args.device,
            **({"data_dir": args.data_dir} if args.data_dir else {}),
            **({"model": args.model} if args.model else {}),
            **({"batch_size": args.batch_size} if args.batch_size else {}),
        )
        cfg = cfg.with_defaults(recipe.DEFAULTS).validate()
        prepared = recipe.prepare(cfg)
    except UsageError as e:
        p.error(str(e))
    hw = describe_hardware(device)
    epoch = None
    if args.stream:
        epoch = epoch_shapes(recipe.build(cfg, prepared, resolve_precision("fp32", device), device, 0).train_loader)
        if epoch.batches < args.warmup + 2 * args.steps:
            p.error(
                f"--stream: the epoch has {epoch.batches} batches, fewer than --warmup + 2 x --steps = "
                f"{args.warmup + 2 * args.steps}; give more --train-samples (or data)"
            )
        print(f"epoch of the stream, {epoch.describe()}\n", flush=True)
    gauges = None if args.no_floor else measure_gauges(cfg, precisions, device)
    results = {
        name: profile_precision(recipe, cfg, prepared, name, device, args.steps, args.warmup, args.stream)
        for name in precisions
    }
    if gauges is not None:
        for name, r in results.items():
            floor = gauges.floor(name, statistics.median(r["matmul_flops"]), r["parameter_bytes"])
            r["floor"] = floor.to_dict(r["step_s"])
            r["floor_line"] = floor.line(r["step_s"])
    table = render(results, hw, cfg, args.rows, args.stream)
    if gauges is not None:
        table += "\n\n" + gauges_line(gauges)
    print(table)
    if args.out:
        Path(args.out).write_text(table + "\n", encoding="utf-8")
    if args.json:
        doc = {
            "hardware": hw,
            "args": vars(args),
            "epoch": epoch.to_dict() if epoch else None,
            "floor_gauges": gauges.to_dict() if gauges else None,
            "results": results,
        }
        Path(args.json).write_text(json.dumps(doc, indent=1, default=str) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
