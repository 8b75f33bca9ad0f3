"""What each of the loop's speed switches buys, measured side by side in one process.

Variants of ``mixft.speed.SpeedOptions`` train the bert-sst2 model from the same initial
weights on the same batches (same seed, same loader order): ``reference`` (every switch
off: torch's kernels, the textbook loop), each switch alone on top of the reference, and
``all switches`` (every switch but compile). ``compile`` joins only when asked: it costs
a compilation per variant per round. Each round runs every variant once, in a rotated
order (load from other processes falls on all alike); warm-up steps are dropped per round.
Every variant trains on the same batches in the same order, so step i of round r is the
same work in every variant: ``speedup`` is the median over all (round, step) pairs of
reference time / variant time for that step. Pairing removes the spread that batch
lengths add to step times; ``median step`` is shown for scale.

Usage::

    report = run_ablation(BertSetup(), steps=12, warmup=3, rounds=3)
    print(ablation_table(report))
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from mixft.measure import device_name
from mixft.precision import amp_precision_names, resolve_device, resolve_precision
from mixft.speed import SpeedOptions
from mixft.trainer import Trainer

from .bert import BertSetup, prepare_bert
from .timing import StepTimer, markdown_table, rotated

REFERENCE = "reference (torch kernels)"
ALL = "all switches"


def ablation_variants(with_compile: bool = False) -> dict[str, SpeedOptions]:
    """Name -> options: the reference, each switch alone, and all of them together."""
    ref = SpeedOptions.reference()
    switches = ("fast_cpu_dropout", "keep_freed_memory", "clip_in_optimizer")
    variants = {REFERENCE: ref}
    for switch in switches:
        variants[f"+ {switch}"] = replace(ref, **{switch: True})
    every = replace(ref, **{switch: True for switch in switches})
    variants[ALL] = every
    if with_compile:
        variants["+ compile"] = replace(ref, compile=True)
        variants[f"{ALL} + compile"] = replace(every, compile=True)
    return variants


@dataclass
class AblationRow:
    precision: str
    variant: str
    options: dict[str, bool]
    median_step_s: float
    samples_per_s: float
    first_step_s: list[float]  # per round: the first step (compilation lands here)
    step_times_s: list[float]  # every timed step of every round, in (round, step) order
    speedup_vs_reference: float | None = None  # median of paired per-step ratios


@dataclass
class AblationReport:
    device: str
    device_name: str
    model: str
    dataset: str
    batch_size: int
    steps: int
    warmup: int
    rounds: int
    rows: list[AblationRow] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_ablation(setup: BertSetup, *, steps: int = 12, warmup: int = 3, rounds: int = 3,
                 precisions: list[str] | None = None, with_compile: bool = False) -> AblationReport:
    if steps < 1 or warmup < 0 or rounds < 1:
        raise ValueError(f"need steps >= 1, warmup >= 0, rounds >= 1; got {steps}, {warmup}, {rounds}")
    dev = resolve_device(setup.device)
    names = precisions or ["fp32", amp_precision_names(dev)[0]]
    need = setup.batch_size * (steps + warmup)  # one epoch holds every step: no epoch boundary timed
    bert = prepare_bert(setup, max_train_samples=need, max_eval_samples=min(setup.eval_samples, 8), device=str(dev))
    variants = ablation_variants(with_compile)
    report = AblationReport(
        device=str(dev), device_name=device_name(dev), model=bert.prepared.model_description,
        dataset=bert.prepared.dataset_description, batch_size=setup.batch_size, steps=steps, warmup=warmup,
        rounds=rounds,
    )
    for name in names:
        precision = resolve_precision(name, dev)
        timed: dict[str, list[float]] = {v: [] for v in variants}
        samples: dict[str, int] = {v: 0 for v in variants}
        first: dict[str, list[float]] = {v: [] for v in variants}
        order = list(variants)
        for rnd in range(rounds):
            for variant in rotated(order, rnd):
                parts = bert.recipe.build(bert.cfg, bert.prepared, precision, dev, setup.seed)
                timer = StepTimer()
                Trainer(
                    parts.model, parts.optimizer, parts.loss_fn, parts.train_loader, eval_loader=None,
                    precision=precision, device=dev, lr_scheduler=parts.lr_scheduler,
                    max_grad_norm=bert.cfg.clip_norm, epochs=1, max_steps=steps + warmup, seed=setup.seed,
                    callbacks=[timer], speed=variants[variant],
                ).fit()
                timed[variant] += timer.step_times_s[warmup:]
                samples[variant] += sum(timer.step_samples[warmup:])
                first[variant].append(timer.step_times_s[0])
                del parts
        for variant, options in variants.items():
            times = timed[variant]
            report.rows.append(AblationRow(
                precision=precision.name, variant=variant, options=options.to_dict(),
                median_step_s=statistics.median(times), samples_per_s=samples[variant] / sum(times),
                first_step_s=first[variant], step_times_s=times,
            ))
        base = next(r for r in report.rows if r.precision == precision.name and r.variant == REFERENCE)
        for r in report.rows:
            if r.precision == precision.name:
                r.speedup_vs_reference = paired_speedup(base.step_times_s, r.step_times_s)
    return report


def paired_speedup(reference: list[float], variant: list[float]) -> float:
    """Median over pairs of reference / variant: the same step (same batch) in both."""
    if len(reference) != len(variant) or not reference:
        raise ValueError(f"need the same, non-zero number of steps; got {len(reference)} and {len(variant)}")
    return statistics.median(r / v for r, v in zip(reference, variant))


def ablation_table(report: AblationReport) -> str:
    headers = ["precision", "variant", "median step (ms)", "samples/s", "speedup vs reference (paired)",
               "first step (ms)"]
    rows = [[
        r.precision, r.variant, f"{r.median_step_s * 1e3:.1f}", f"{r.samples_per_s:.1f}",
        f"{r.speedup_vs_reference:.2f}x" if r.speedup_vs_reference else "n/a",
        ", ".join(f"{t * 1e3:.0f}" for t in r.first_step_s),
    ] for r in report.rows]
    head = (f"speed switches on {report.device_name} [{report.device}]: {report.model}, {report.dataset}, "
            f"batch {report.batch_size}, {report.rounds} round(s) x {report.steps} steps (+{report.warmup} warm-up)")
    return head + "\n\n" + markdown_table(headers, rows)
