"""bert-sst2 step time: fp32 against the device's AMP precision, side by side in one process.

Each precision trains a fresh model (same seed: same initial weights, same batches) in
mixft's Trainer (``mixft.runs.build.build_trainer``) for ``warmup + steps`` optimizer steps; a ``StepTimer`` reads the
synchronised clock after every step. With ``rounds > 1`` this repeats, the precisions
in a rotated order each round, so load from other processes on a shared machine falls
on both alike. Reported per precision: the median (and the minimum) step time over every
timed step of every round, samples/s and real (unpadded) tokens/s over those steps, and
the ratio of the medians to fp32's. Batches are padded as the recipe's loaders pad them;
tokens/s counts real (unpadded) tokens only.

Efficiency (MFU-style): the timed steps' matmul FLOPs (``bert_matmul_flops``: every
Linear and attention product on the padded batches, forward and backward) over their
time, divided by the device's matmul peak in the precision's dtype, measured in the same
run right after the steps (an n x n matmul: 2048 on CPU, 8192 on CUDA; TF32 settings
applied as the run had them).

Usage::

    report = run_step_benchmark(BertSetup(train_samples=512), steps=20, warmup=3)
    print(steps_table(report))
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from mixft.amp.precision import amp_precision_names, configure_matmul, resolve_device, resolve_precision
from mixft.runs.build import build_trainer
from mixft.train.measure import device_name

from .bert import BertSetup, bert_matmul_flops, encoder_config, prepare_bert
from .stream import step_work
from .timing import StepTimer, TimedRegion, flops, markdown_table, matmul_peak, mib, ratio, rotated


@dataclass
class StepRow:
    precision: str
    measured_steps: int
    warmup_steps: int
    median_step_s: float
    min_step_s: float
    rounds: int
    samples_per_s: float
    tokens_per_s: float | None
    peak_memory_bytes: int | None
    peak_memory_kind: str
    step_times_s: list[float]
    speedup_vs_fp32: float | None = None  # fp32 median step time / this one
    matmul_flops_per_s: float | None = None  # achieved over the timed steps
    matmul_peak_flops_per_s: float | None = None  # measured n x n matmul in this precision
    fraction_of_peak: float | None = None


@dataclass
class StepReport:
    device: str
    device_name: str
    model: str
    dataset: str
    batch_size: int
    max_length: int
    rows: list[StepRow] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_step_benchmark(
    setup: BertSetup,
    *,
    steps: int = 20,
    warmup: int = 3,
    precisions: list[str] | None = None,
    rounds: int = 1,
    peak_n: int | None = None,
) -> StepReport:
    """Median step time of bert-sst2 per precision (default: fp32 and the device's AMP).

    ``peak_n``: the size of the square matmul that measures each precision's peak rate
    (default 8192 on CUDA, 2048 on CPU; a CPU that emulates bf16 takes minutes at 2048).
    """
    if steps < 1 or warmup < 0 or rounds < 1:
        raise ValueError(f"need steps >= 1, warmup >= 0, rounds >= 1; got {steps}, {warmup}, {rounds}")
    dev = resolve_device(setup.device)
    names = precisions or ["fp32", amp_precision_names(dev)[0]]
    # Enough examples for every step in one epoch: no epoch boundary inside the timing.
    need = setup.batch_size * (steps + warmup)
    bert = prepare_bert(
        setup,
        max_train_samples=need,
        max_eval_samples=min(setup.eval_samples, 8),
        device=str(dev),
        epochs=1,
        max_steps=steps + warmup,
    )
    report = StepReport(
        device=str(dev),
        device_name=device_name(dev),
        model="",
        dataset="",
        batch_size=setup.batch_size,
        max_length=bert.cfg.max_length,
    )
    timers: dict[str, list[StepTimer]] = {name: [] for name in names}
    peaks: dict[str, list] = {name: [] for name in names}
    kind = "n/a"
    config = None
    for rnd in range(rounds):
        for name in rotated(names, rnd):
            precision = resolve_precision(name, dev)
            parts = bert.recipe.build(bert.cfg, bert.prepared, precision, dev, setup.seed)
            report.model, report.dataset = parts.run_info.get("model", ""), parts.run_info.get("dataset", "")
            config = encoder_config(parts.model)
            timer = StepTimer()
            trainer = build_trainer(
                dataclasses.replace(parts, eval_loader=None),
                bert.cfg,
                precision=precision,
                device=dev,
                seed=setup.seed,
                callbacks=[timer],
            )
            with TimedRegion(dev) as region:
                trainer.fit()
            timers[name].append(timer)
            peaks[name].append(region.peak_bytes)
            kind = region.memory_kind
            del trainer, parts
    for name in names:
        merged = StepTimer()
        for t in timers[name]:  # every round's timed steps, warm-up dropped per round
            merged.step_times_s += t.step_times_s[warmup:]
            merged.step_samples += t.step_samples[warmup:]
            merged.step_tokens += t.step_tokens[warmup:]
            merged.step_shapes += t.step_shapes[warmup:]
        s = merged.summary(0)
        known = [b for b in peaks[name] if b is not None]
        precision = resolve_precision(name, dev)
        work = step_work(merged.step_shapes, merged.step_samples)  # packed rows: [CLS] work per sentence
        achieved = sum(bert_matmul_flops(config, shapes) for shapes in work) / sum(merged.step_times_s)
        with configure_matmul(precision, dev):  # TF32 on or off, as the run had it
            peak = matmul_peak(
                dev, precision.autocast_dtype or torch.float32, peak_n or (8192 if dev.type == "cuda" else 2048)
            )
        report.rows.append(
            StepRow(
                precision=precision.name,
                warmup_steps=warmup,
                rounds=rounds,
                min_step_s=min(merged.step_times_s),
                peak_memory_bytes=max(known) if known else None,
                peak_memory_kind=kind,
                step_times_s=[x for t in timers[name] for x in t.step_times_s],
                **s,
                matmul_flops_per_s=achieved,
                matmul_peak_flops_per_s=peak.flops_per_s,
                fraction_of_peak=achieved / peak.flops_per_s,
            )
        )
    base = next((r for r in report.rows if r.precision == "fp32"), None)
    for r in report.rows:
        r.speedup_vs_fp32 = ratio(base.median_step_s, r.median_step_s) if base else None
    return report


def steps_table(report: StepReport) -> str:
    headers = [
        "precision",
        "median step (ms)",
        "min step (ms)",
        "samples/s",
        "tokens/s (real)",
        "speedup vs fp32",
        "matmul FLOP/s",
        "of measured peak",
        "peak memory",
        "steps timed",
    ]
    rows = [
        [
            r.precision,
            f"{r.median_step_s * 1e3:.1f}",
            f"{r.min_step_s * 1e3:.1f}",
            f"{r.samples_per_s:.1f}",
            f"{r.tokens_per_s:.0f}" if r.tokens_per_s else "n/a",
            f"{r.speedup_vs_fp32:.2f}x" if r.speedup_vs_fp32 else "n/a",
            flops(r.matmul_flops_per_s),
            f"{r.fraction_of_peak:.0%} of {flops(r.matmul_peak_flops_per_s)}",
            f"{mib(r.peak_memory_bytes)} ({r.peak_memory_kind})",
            f"{r.measured_steps} ({r.rounds} round(s) x {r.measured_steps // r.rounds}, +{r.warmup_steps} warm-up each)",
        ]
        for r in report.rows
    ]
    head = (
        f"bert-sst2 step time on {report.device_name} [{report.device}]: {report.model}, {report.dataset}, "
        f"batch {report.batch_size}, max length {report.max_length}"
    )
    return head + "\n\n" + markdown_table(headers, rows)
