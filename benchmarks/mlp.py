"""The seed notebook's MLP benchmark, run through mixft's Trainer: three modes side by side.

| mode            | CUDA                          | CPU                                     |
|-----------------|-------------------------------|-----------------------------------------|
| default         | fp32 (TF32 off)               | fp32                                    |
| autocast        | fp16 autocast, no GradScaler  | bf16 autocast (no scaler needed)        |
| autocast+scaler | fp16 autocast + GradScaler    | fp16 + scaler: skipped unless           |
|                 |                               | ``include_cpu_fp16`` (see below)        |

CPU fp16 is treated as emulated (mixft's precision policy says so); on CPUs with
AVX512-FP16 it is not, and ``include_cpu_fp16`` measures what it really costs.

Each mode is timed like the seed's ``start_timer``/``end_timer_and_print``: build the
model and optimizer, then ``gc.collect()``, empty the CUDA cache and reset its peak,
synchronise, time the *whole* training (every epoch, no evaluation), synchronise, read
the peak memory. Like the seed there is no warm-up run per mode; the matmul-peak
measurement that precedes each mode warms up the BLAS library for its dtype. ``rounds`` > 1
repeats all modes in a rotated order and reports each mode's median round (a shared,
noisy machine then weighs on every mode alike).

FLOP counting: ``6 * W * samples`` for forward + backward, where ``W`` is the number of
Linear weights (biases excluded): 2 FLOPs per weight per sample forward, 2 for the
weight gradient, 2 for the input gradient. Autograd skips the first layer's input
gradient (the data needs none), so with 3 equal layers the matmuls really do 16/18 of
that; the convention (as in "model FLOPs utilisation") makes figures comparable
across tools. The time also covers the optimizer, the loss and the loop.
The fraction of peak divides by the device's matmul rate *measured in this run*, right
before the mode trains: the median of ``peak_repeats`` square ``n x n`` matmuls in the
mode's compute dtype. Because of the convention above (and because a 2048^2 matmul is
not the fastest shape), the fraction can exceed 100% on a CPU.

Usage::

    report = run_mlp_benchmark(MLPSizes(width=1024, batches=10), device="cpu")
    print(mlp_table(report))
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from mixft.amp.precision import PRECISIONS, Precision, resolve_device, resolve_precision
from mixft.config.run_config import RunConfig
from mixft.recipe import get_recipe
from mixft.runs.build import build_trainer
from mixft.train.measure import device_name

from .timing import MatmulPeak, TimedRegion, flops, fmt, markdown_table, matmul_peak, mib, ratio, rotated

RECIPE = "mlp-synthetic"
MODES = ("default", "autocast", "autocast+scaler")
CPU_FP16_SKIP = "skipped: fp16 on CPU is slow or emulated on most CPUs (pass --include-cpu-fp16 to run it anyway)"
FLOP_RULE = (
    "achieved FLOP/s = 6 x Linear weights x samples / wall time (fwd 2 + weight-grad 2 + input-grad 2 per "
    "weight per sample; biases excluded; the first layer's input gradient, which autograd skips, is counted)"
)
# fp16 without a scaler: the seed's "autocast only" mode on CUDA. Gradients may underflow;
# that is the point of showing it beside the scaled mode.
FP16_NO_SCALER = Precision("fp16-noscaler", torch.float16, grad_scaler=False)


@dataclass
class MLPSizes:
    """The workload; the defaults are the seed notebook's."""

    width: int = 4096
    layers: int = 3
    batch_size: int = 512
    batches: int = 50
    epochs: int = 3

    def run_config(self, device: str) -> RunConfig:
        return RunConfig(
            recipe=RECIPE,
            device=device,
            batch_size=self.batch_size,
            epochs=self.epochs,
            extra={"width": self.width, "layers": self.layers, "batches": self.batches, "eval_batches": 0},
        )

    def scale_note(self) -> str | None:
        """None at the seed's sizes (this class's defaults), else what differs, in one line."""
        seed = MLPSizes()
        if self == seed:
            return None
        work = self.width**2 * self.layers * self.batch_size * self.batches * self.epochs
        smaller = work < seed.width**2 * seed.layers * seed.batch_size * seed.batches * seed.epochs
        changed = ", ".join(
            f"{k} {v} (seed {getattr(seed, k)})" for k, v in asdict(self).items() if v != getattr(seed, k)
        )
        return f"sizes {'scaled down' if smaller else 'changed'} from the seed's: {changed}"


@dataclass
class ModeResult:
    mode: str
    precision: str
    status: str  # "ran" | "skipped"
    reason: str | None = None
    time_s: float | None = None  # the whole training, seed-style
    speedup: float | None = None  # default time / this time
    samples: int | None = None
    steps: int | None = None
    skipped_steps: int | None = None
    final_loss: float | None = None
    peak_memory_bytes: int | None = None
    peak_memory_kind: str | None = None
    peak_above_start_bytes: int | None = None  # peak minus memory held before training (CPU: RSS)
    memory_ratio: float | None = None  # this peak / default's peak
    achieved_flops_per_s: float | None = None
    matmul_peak: dict[str, Any] | None = None
    fraction_of_peak: float | None = None
    rounds_time_s: list[float] = field(default_factory=list)  # every round's time (the row is the median round)


@dataclass
class MLPReport:
    device: str
    device_name: str
    sizes: dict[str, int]
    scaled: str | None  # None at the seed's sizes
    linear_weights: int
    flop_rule: str
    modes: list[ModeResult] = field(default_factory=list)

    def mode(self, name: str) -> ModeResult:
        return next(m for m in self.modes if m.mode == name)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def mode_precisions(device: torch.device) -> dict[str, Precision]:
    """What each seed mode means on ``device`` (see the module table)."""
    autocast = FP16_NO_SCALER if device.type == "cuda" else PRECISIONS["bf16"]
    return {"default": PRECISIONS["fp32"], "autocast": autocast, "autocast+scaler": PRECISIONS["fp16"]}


def run_mlp_benchmark(
    sizes: MLPSizes | None = None,
    *,
    device: str | torch.device = "auto",
    include_cpu_fp16: bool = False,
    peak_n: int | None = None,
    peak_repeats: int = 5,
    seed: int = 0,
    rounds: int = 1,
) -> MLPReport:
    """Train the MLP in each mode back to back in this process; return the measured report.

    With ``rounds > 1`` every mode trains ``rounds`` times, the modes in a rotated order
    each round; each mode reports its median-time round and keeps every round's time.
    """
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    sizes = sizes or MLPSizes()
    dev = resolve_device(device)
    recipe = get_recipe(RECIPE)
    cfg = sizes.run_config(str(dev)).with_defaults(recipe.DEFAULTS).validate()
    prepared = recipe.prepare(cfg)
    precisions = {name: resolve_precision(p, dev) for name, p in mode_precisions(dev).items()}
    to_run = [m for m in MODES if not (m == "autocast+scaler" and dev.type == "cpu" and not include_cpu_fp16)]

    # The device's matmul peak in the mode's dtype, measured right before each of its
    # rounds (a shared machine's load drifts; the fraction compares like with like).
    n = peak_n or (8192 if dev.type == "cuda" else 2048)

    weights = linear_weight_count(recipe.build(cfg, prepared, precisions["default"], dev, seed).model)
    report = MLPReport(
        device=str(dev),
        device_name=device_name(dev),
        sizes=asdict(sizes),
        scaled=sizes.scale_note(),
        linear_weights=weights,
        flop_rule=FLOP_RULE,
    )
    runs: dict[str, list[ModeResult]] = {m: [] for m in to_run}
    for rnd in range(rounds):
        for m in rotated(to_run, rnd):
            peak = matmul_peak(dev, precisions[m].autocast_dtype or torch.float32, n, repeats=peak_repeats)
            runs[m].append(_train_mode(recipe, cfg, prepared, m, precisions[m], dev, seed, weights, peak))
    for m in MODES:
        if m not in to_run:
            report.modes.append(ModeResult(m, precisions[m].name, "skipped", reason=CPU_FP16_SKIP))
            continue
        ordered = sorted(runs[m], key=lambda r: r.time_s)
        chosen = ordered[(len(ordered) - 1) // 2]  # the median round (lower middle for an even count)
        chosen.rounds_time_s = [r.time_s for r in runs[m]]
        report.modes.append(chosen)

    base = report.mode("default")
    for m in report.modes:
        if m.status == "ran":
            m.speedup = ratio(base.time_s, m.time_s)
            m.memory_ratio = ratio(m.peak_memory_bytes, base.peak_memory_bytes)
    return report


def _train_mode(
    recipe, cfg, prepared, mode: str, precision: Precision, dev, seed: int, weights: int, peak: MatmulPeak
) -> ModeResult:
    parts = recipe.build(cfg, prepared, precision, dev, seed)
    # The seed times training alone: no evaluation inside the timed fit().
    trainer = build_trainer(
        dataclasses.replace(parts, eval_loader=None), cfg, precision=precision, device=dev, seed=seed
    )
    with TimedRegion(dev) as region:  # the seed's start_timer() ... end_timer_and_print()
        result = trainer.fit()
    achieved = 6 * weights * trainer.state.samples / region.elapsed_s
    losses = result.history.get("loss") or [None]
    return ModeResult(
        mode=mode,
        precision=precision.name,
        status="ran",
        time_s=region.elapsed_s,
        samples=trainer.state.samples,
        steps=result.steps,
        skipped_steps=result.skipped_steps,
        final_loss=losses[-1],
        peak_memory_bytes=region.peak_bytes,
        peak_memory_kind=region.memory_kind,
        peak_above_start_bytes=region.peak_above_start_bytes,
        achieved_flops_per_s=achieved,
        matmul_peak=asdict(peak),
        fraction_of_peak=achieved / peak.flops_per_s,
    )


def linear_weight_count(model: nn.Module) -> int:
    """Weights of every ``nn.Linear`` (biases excluded): what the matmuls multiply by."""
    return sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))


def mlp_table(report: MLPReport) -> str:
    """The three modes as a markdown table (skipped modes keep their row, with the reason)."""
    headers = [
        "mode",
        "precision",
        "time (s)",
        "speedup vs default",
        "peak memory",
        "memory ratio",
        "peak above start",
        "achieved FLOP/s",
        "measured matmul peak",
        "fraction of peak",
        "skipped steps",
        "final loss",
    ]
    rows = []
    for m in report.modes:
        if m.status != "ran":
            rows.append([m.mode, m.precision, m.reason] + [""] * (len(headers) - 3))
            continue
        pk = m.matmul_peak or {}
        rounds = f" (rounds: {', '.join(f'{t:.2f}' for t in m.rounds_time_s)})" if len(m.rounds_time_s) > 1 else ""
        rows.append(
            [
                m.mode,
                m.precision,
                f"{m.time_s:.2f}{rounds}",
                f"{m.speedup:.2f}x",
                f"{mib(m.peak_memory_bytes)} ({m.peak_memory_kind})",
                f"{m.memory_ratio:.2f}" if m.memory_ratio is not None else "n/a",
                mib(m.peak_above_start_bytes),
                flops(m.achieved_flops_per_s),
                f"{flops(pk.get('flops_per_s'))} ({pk.get('dtype')} {pk.get('n')}^2, median of {pk.get('repeats')})",
                f"{m.fraction_of_peak:.1%}",
                m.skipped_steps,
                fmt(m.final_loss, ".4g"),
            ]
        )
    s = report.sizes
    head = (
        f"MLP benchmark on {report.device_name} [{report.device}]: {s['layers']} x Linear({s['width']}, {s['width']}), "
        f"batch {s['batch_size']}, {s['batches']} batches, {s['epochs']} epochs"
    )
    if report.scaled:
        head += f"\n{report.scaled}"
    return head + "\n\n" + markdown_table(headers, rows) + f"\n\n{report.flop_rule}"
