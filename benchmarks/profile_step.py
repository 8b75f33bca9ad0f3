"""Where a training step's time goes, per precision: torch.profiler's per-operator table, side by side.

``python benchmarks/profile_step.py [--recipe bert-sst2] [--precisions fp32,bf16] [--steps 5] [--out FILE.md]``

Builds the recipe through its protocol (``prepare`` / ``build``), trains its real model
with mixft's Trainer on one fixed batch (so every precision sees the same shapes), and
profiles ``--steps`` optimizer steps after a warm-up. Prints the whole-step time per
precision and one markdown table: self CPU (or CUDA) milliseconds per operator for each
precision, sorted by the last precision's cost, with that precision's share. On a CPU
with AMX the matmuls shrink and what does not shrink (dropout masks, casts, the
optimizer, elementwise kernels) takes over: this is the tool for finding it. The
machine's CPU flags are printed with the table: a profile from one CPU says nothing
about another.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from benchmarks.timing import SameBatch
from mixft.amp.hardware import describe_hardware, hardware_line
from mixft.amp.precision import resolve_device, resolve_precision
from mixft.config.run_config import RunConfig
from mixft.recipe import get_recipe
from mixft.runs.build import build_trainer
from mixft.train.measure import synchronize


def profile_precision(recipe, cfg: RunConfig, prepared, name: str, device, steps: int, warmup: int):
    """(median step seconds, {op: self ms per step}) for one precision."""
    from torch.profiler import ProfilerActivity, profile

    precision = resolve_precision(name, device)
    parts = recipe.build(cfg, prepared, precision, device, seed=0)
    batch = next(iter(parts.train_loader))
    parts.eval_loader = None
    parts.train_loader = SameBatch(batch, warmup)
    trainer = build_trainer(parts, cfg, precision=precision, device=device, seed=0)
    trainer.fit()  # warm-up: allocator, kernels, optimizer state
    times = []
    for _ in range(steps):
        trainer.train_loader, trainer.epochs, trainer.state.epoch = SameBatch(batch, 1), 1, 0
        synchronize(device)
        t0 = time.perf_counter()
        trainer.fit()
        synchronize(device)
        times.append(time.perf_counter() - t0)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    trainer.train_loader, trainer.state.epoch = SameBatch(batch, steps), 0
    with profile(activities=activities) as prof:
        trainer.fit()
    attr = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    ops = {e.key: getattr(e, attr) / 1000 / steps for e in prof.key_averages()}
    return statistics.median(times), ops


def render(results: dict, hw: dict, cfg: RunConfig, rows: int) -> str:
    names = list(results)
    last = names[-1]
    ops = results[last][1]
    total = {n: sum(results[n][1].values()) for n in names}
    top = sorted(ops, key=ops.get, reverse=True)[:rows]
    lines = [f"Profile of one {cfg.recipe} step on {hardware_line(hw)}; torch {torch.__version__}", ""]
    lines += [
        "Whole step (median): "
        + ", ".join(f"{n} {results[n][0] * 1000:.1f} ms" for n in names)
        + (f" ({results[names[0]][0] / results[last][0]:.2f}x {last} vs {names[0]})" if len(names) > 1 else ""),
        "",
    ]
    lines.append("| op | " + " | ".join(f"{n} ms/step" for n in names) + f" | {last} share |")
    lines.append("|---|" + "---:|" * (len(names) + 1))
    for op in top:
        cells = [f"{results[n][1].get(op, 0.0):.1f}" for n in names]
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
    p.add_argument("--out", help="also write the markdown table here")
    args = p.parse_args(argv)
    device = resolve_device(args.device)
    recipe = get_recipe(args.recipe)
    # One batch of the recipe's data is all the profile needs.
    cfg = RunConfig(recipe=args.recipe, max_train_samples=64, max_eval_samples=8, device=args.device)
    cfg = cfg.with_defaults(recipe.DEFAULTS).validate()
    prepared = recipe.prepare(cfg)
    results = {
        name: profile_precision(recipe, cfg, prepared, name, device, args.steps, args.warmup)
        for name in args.precisions.split(",")
    }
    table = render(results, describe_hardware(device), cfg, args.rows)
    print(table)
    if args.out:
        Path(args.out).write_text(table + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
