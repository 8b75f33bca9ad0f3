"""Is mixed precision faster on this machine? Measured in seconds, on the recipe's own shapes.

The answer depends on the machine, and its CPU flags do not settle it (two CPUs with
avx512_bf16 and no AMX measured a bf16 step 0.64x and ~1.7x fp32), so mixft measures it
instead of assuming it. For one recipe, ``probe``:

1. names the machine (``mixft.amp.hardware.describe_hardware``);
2. builds the recipe on one batch of data and times a few real training steps of mixft's
   loop (autocast, GradScaler, clipping, the recipe's optimizer) per precision, every
   precision on the SAME batch with the same initial weights: one warm-up step each, then
   rounds of one device-synchronised step per precision in a rotating order (so the load
   of a shared machine falls on all alike), 3-5 rounds as the time budget allows; the
   step time is the median. Each precision has an equal share of the budget (its warm-up
   included): one that spends it (bf16 emulated on a CPU without a hardware path, ~10-25x
   fp32) stops after its first timed step, which is enough to show the gap;
3. times the matmuls of the model's own ``nn.Linear`` layers (the shapes its first
   training forward fed them) per precision: GFLOP/s and the ratio to fp32;
4. recommends the fastest precision (fp32 when AMP measured slower), with its ratio.

Precisions: fp32, tf32 on an Ampere+ GPU, the device's AMP precisions, and on a CPU fp16
as well when its estimated cost (fp32 step time over its matmul ratio) fits the budget.

Results are cached per machine (``mixft.report.probe_result.cached_probe``), keyed by CPU model
and flags, torch's native bf16/fp16, GPU, torch version, recipe and model, so an ``--amp``
run can choose fp32 where AMP measured slower (``mixft.amp.precision.choose_precision``)
without measuring again. What a probe found, how it is kept and how it is told (table,
report section, header line) live in mixft/report/probe_result.py.

Usage::

    result = probe(RunConfig(recipe="bert-sst2"))   # ~25 s on a 2-core CPU
    print(render_probe_table(result))
    probe_line(result)   # 'probe: bf16 step 0.41x fp32, matmul 0.38x (this CPU has no AMX); fastest: fp32'
    run_probe(RunConfig(recipe="bert-sst2", probe=True))   # --probe: the above, probe.json and probe.md written
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import math
import os
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from mixft import distributed
from mixft.amp.hardware import describe_hardware, hardware_line
from mixft.amp.precision import (
    PRECISIONS,
    Precision,
    amp_precision_names,
    matmul_settings_kept,
    resolve_device,
    resolve_precision,
)
from mixft.config.run_config import RunConfig, replace_keeping_origin
from mixft.data.packing import is_packed, samples_in
from mixft.errors import UsageError
from mixft.log import logger
from mixft.recipe import get_recipe
from mixft.report.probe_result import PrecisionProbe, ProbeResult, check_cache_dir, keep_probe
from mixft.results import results_document, write_results
from mixft.runs.build import build_trainer
from mixft.runs.options import check_options
from mixft.runs.outdir import PROBE_REPORT_NAME, PROBE_RESULTS_NAME, OutputLock
from mixft.train.floor import LinearShapes, StepFloor, StepFlops, matmul_rate, measure_bandwidth, optimizer_clip_bytes
from mixft.train.hooks import Callback
from mixft.train.measure import synchronize

DEFAULT_BUDGET_S = 30.0
WARMUP_STEPS = 1  # the first step pays for kernel selection/JIT and optimizer state
MIN_TIMED_STEPS = 3  # a median needs at least three (where the precision's share of the budget allows)
MAX_TIMED_STEPS = 5
# Kept back from the budget when deciding whether another step still fits: what follows
# the last step (the remaining matmul timings, the result) takes about this long.
RESERVE_S = 1.0
NOISE_BAND = 0.05  # ratios within 5% of 1.0 are "about the same" on a shared machine
UNSTEADY = 0.25  # timed steps of one precision spread wider than this: the figures are rough
# What a probe found, how it is kept per machine and told: mixft/report/probe_result.py.


# ----------------------------------------------------------------------------- measuring
def probe(
    cfg: RunConfig,
    *,
    device=None,
    precisions: Sequence[str] | None = None,
    time_budget_s: float = DEFAULT_BUDGET_S,
    save: bool = True,
    cache_dir: str | os.PathLike | None = None,
    hardware: dict | None = None,
) -> ProbeResult:
    """Time a few training steps and the matmuls of ``cfg.recipe`` per precision; recommend one.

    ``device``: None takes ``cfg.device``. ``precisions``: names to time (fp32, the
    baseline, is always added); None: fp32, tf32 on Ampere+ and the device's AMP
    precisions, plus fp16 on a CPU if it fits the budget. Every precision but that optional
    fp16 gets a warm-up and at least one timed step, whatever the budget; each has an equal
    share of ``time_budget_s`` for its steps (warm-up included), and takes a second and
    third step only while they fit in it, so an emulated precision ~25x slower than fp32
    costs about two of its steps, not five. ``time_budget_s`` (counted from the call, data
    and model loading included) also decides whether the optional one runs and whether
    there is time for up to five steps.
    ``save`` writes the result to the per-machine cache (``cache_dir``, default
    ``default_cache_dir()``): checked before measuring; a write that still fails afterwards
    (a full disk) is a warning, and the result is returned all the same. The process's RNG
    and matmul settings are left as they were. ``hardware``: the machine's description
    (``describe_hardware``) when the caller has it (a run's plan); it keys the cache.

    Raises UsageError (before any work) for an unknown recipe, precision or device, a
    budget that is not a positive number, or (``save``) a cache folder that cannot be written.

    Usage: ``print(render_probe_table(probe(RunConfig(recipe="bert-sst2"))))``
    """
    start = time.perf_counter()
    _check_budget(time_budget_s)
    recipe = get_recipe(cfg.recipe)
    if hasattr(cfg, "check_recipe_options") and hasattr(recipe, "USES"):
        # With the recipe's defaults: a run's plan hands its options with them applied (mlp-synthetic's
        # model "mlp"), and a default is not an option the user gave (was: --amp's first
        # measurement and --probe refused mlp-synthetic).
        cfg.check_recipe_options(cfg.recipe, recipe.USES, recipe.DEFAULTS)
    cfg = _probe_config(cfg.with_defaults(recipe.DEFAULTS), recipe).validate()
    dev = resolve_device(cfg.device if device is None else device)
    required, optional = _plan_precisions(precisions, dev)
    if save:
        check_cache_dir(cache_dir)  # now, not after the measurement it would cost
    hw = hardware if hardware is not None else describe_hardware(dev)
    deadline = start + float(time_budget_s) - RESERVE_S
    share = float(time_budget_s) / len(required)  # each precision's steps, warm-up included

    rows, notices, matmul_shapes, batch, run_info = _measure(
        recipe, cfg, dev, required, optional, deadline, share, time_budget_s
    )
    ordered = [rows[p.name] for p in [*required, *optional]]
    _fill_ratios(ordered)
    recommended, reason = recommend(ordered)
    result = ProbeResult(
        recipe=cfg.recipe,
        model=str(run_info.get("model") or cfg.model or "unknown"),
        dataset=run_info.get("dataset"),
        device=str(dev),
        hardware=hw,
        # The run's --batch-size beside the batch it timed (fewer samples when the data is smaller): a run of
        # another batch size does not reuse this ratio (mixft.runs.plan._cached_probe).
        batch={**_describe_batch(batch), "batch_size": cfg.batch_size},
        matmul_shapes=matmul_shapes,
        rows=ordered,
        recommended=recommended,
        reason=reason,
        measured_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        wall_s=time.perf_counter() - start,
        time_budget_s=float(time_budget_s),
        notices=notices,
    )
    logger.info("probe of %s on %s took %.1f s: %s", cfg.recipe, hardware_line(hw), result.wall_s, reason)
    if save:
        keep_probe(result, cache_dir)  # a write that fails now warns: the measurement is returned all the same
    return result


def probe_in_fresh_process(
    cfg: RunConfig, *, device, precisions: Sequence[str], save: bool, hardware: dict
) -> ProbeResult:
    """``probe`` in a Python process of its own (``mixft.runs.child_process``), for a run about to start in
    this one: the models it builds and frees would stay in this process's resident set and raise the
    run's peak-RSS figure (by ~280 MiB on the main job, 2026-11-28). ``hardware``: the run's description of
    the machine, which keys the cache the run reads. Raises ChildFailed (one line).

    Usage: ``probe_in_fresh_process(cfg, device=cpu, precisions=["bf16"], save=True, hardware=describe_hardware(cpu))``
    """
    from mixft.runs.child_process import call_in_fresh_process

    return call_in_fresh_process(
        "mixft.runs.probe:probe", cfg, device=str(device), precisions=list(precisions), save=save, hardware=hardware
    )


# The steps of probe, in its order. -------------------------------------------------------------
def run_probe(cfg: RunConfig):
    """``--probe``: measure how fast each precision trains the recipe here; write probe.json and probe.md.

    Trains nothing, and leaves a run's results.json and report.md in the same directory alone. The
    result is cached for this machine, where later runs' headers and ``--amp`` notices find it: the
    cache folder is checked before measuring (UsageError), and a cache write that still fails once
    probe.json is written only warns. Returns the ``mixft.report.probe_result.ProbeResult``.

    Usage: ``print(render_probe_table(run_probe(RunConfig(recipe="bert-sst2", probe=True))))``
    """
    from mixft.report.markdown import write_report

    _, cfg, device, precisions = check_options(cfg)
    check_cache_dir()  # MIXFT_CACHE a file, unwritable: exit 2 now, not after the measurement
    asked = [p.name for p in precisions] if cfg.precisions != ["fp32"] else None  # None: fp32 + the device's AMP
    out = Path(cfg.output_dir)
    with OutputLock.for_this_process(out):
        result = probe(cfg, device=device, precisions=asked, save=False)
        if distributed.is_main_process():
            hardware = {**result.hardware, "probe": result.to_dict()}
            write_results(out / PROBE_RESULTS_NAME, [], hardware=hardware)
            write_report(results_document([], hardware=hardware), out, name=PROBE_REPORT_NAME)  # no runs: no charts
            keep_probe(result, kept_in=str(out / PROBE_RESULTS_NAME))  # after OUTPUT_DIR has it: a failure warns
    return result


def _measure(
    recipe, cfg: RunConfig, dev, required: list[Precision], optional: list[Precision], deadline, share, time_budget_s
):
    """Build the recipe once and time every precision on it: (rows by precision name, the recipe's
    notices, the matmul shapes, the batch, the run info). The process's RNG and matmul settings
    are restored afterwards."""
    with _isolated_global_state(dev):
        prepared = recipe.prepare(cfg)
        notices = list(getattr(prepared, "notices", ()))
        steppers, matmul_shapes = _warmed_up(recipe, cfg, prepared, required, dev)
        fp32, batch, run_info = steppers[0], steppers[0].batch, steppers[0].run_info
        rows = {
            p.name: PrecisionProbe(p.name, matmul_flops_per_s=matmul_rate(matmul_shapes, p, dev))
            for p in [*required, *optional]
        }
        # Timed steps in rounds, one step per precision per round in a rotating order, so
        # the load of a shared machine falls on every precision alike.
        _round(steppers, 0, deadline, share)
        steppers += _optional_steppers(recipe, cfg, prepared, optional, dev, fp32, rows, deadline, share, time_budget_s)
        r = 1
        while _round(steppers, r, deadline, share):
            r += 1
        _record_steps(steppers, rows, share)
        _log_floors(steppers[0], rows, dev)
    return rows, notices, matmul_shapes, batch, run_info


def _check_budget(time_budget_s) -> None:
    if (
        isinstance(time_budget_s, bool)
        or not isinstance(time_budget_s, (int, float))
        or not (math.isfinite(time_budget_s) and time_budget_s > 0)
    ):
        raise UsageError(f"the probe's time budget must be a positive number of seconds, got {time_budget_s!r}")


def _warmed_up(recipe, cfg: RunConfig, prepared, required: list[Precision], dev) -> tuple[list, list[dict]]:
    """A stepper per required precision, each past its warm-up; the Linear shapes fp32's warm-up saw.

    fp32 first: its loader gives the batch every precision trains on, and its warm-up step
    records the shapes the model's Linear layers see.
    """
    seed = cfg.seeds[0]
    shapes = LinearShapes()
    flops = StepFlops()  # the warm-up step's matmul FLOPs: the floor's (_log_floors)
    fp32 = _Stepper(recipe, cfg, prepared, required[0], dev, seed, None, [shapes, flops])
    fp32.flops = flops
    steppers = [fp32] + [_Stepper(recipe, cfg, prepared, p, dev, seed, fp32.batch) for p in required[1:]]
    try:
        for stepper in steppers:
            stepper.run(WARMUP_STEPS)
    finally:
        flops.close()  # a warm-up that fails must not leave the FLOP counter on
    return steppers, shapes.table()


def _optional_steppers(
    recipe,
    cfg: RunConfig,
    prepared,
    optional: list[Precision],
    dev,
    fp32,
    rows: dict,
    deadline: float,
    share: float,
    time_budget_s: float,
) -> list:
    """Steppers (warmed up) for the optional precisions whose warm-up and minimum of steps fit; the rest noted."""
    added = []
    for precision in optional:
        estimate = (WARMUP_STEPS + MIN_TIMED_STEPS) * _estimated_step_s(fp32, rows["fp32"], rows[precision.name])
        if time.perf_counter() + estimate > deadline or estimate > share:
            rows[precision.name].skipped = (
                f"about {estimate:.0f} s for a warm-up and {MIN_TIMED_STEPS} steps (fp32's step time over the "
                f"matmul ratio): over the {time_budget_s:g} s budget"
            )
            continue
        stepper = _Stepper(recipe, cfg, prepared, precision, dev, cfg.seeds[0], fp32.batch)
        stepper.run(WARMUP_STEPS)
        added.append(stepper)
    return added


def _log_floors(fp32, rows: dict, dev) -> None:
    """Each timed precision's step beside its floor (``mixft.train.floor``), one notice line each:
    the warm-up step's matmul FLOPs at the precision's measured matmul rate, plus the optimizer's
    and clip's passes over the parameters at a bandwidth measured now."""
    if not fp32.flops.flops:
        return
    trainer = fp32.trainer
    moved = optimizer_clip_bytes(trainer.params, clip=trainer.max_grad_norm is not None)
    bandwidth = measure_bandwidth(dev)
    for row in rows.values():
        if row.step_s and row.matmul_flops_per_s:
            floor = StepFloor(fp32.flops.flops, row.matmul_flops_per_s, moved, bandwidth)
            logger.info("probe floor: %s %s", row.precision, floor.line(row.step_s))


def _record_steps(steppers: list, rows: dict, share: float) -> None:
    """Each stepper's timed figures into its precision's row (with a note when it got fewer than the minimum)."""
    for stepper in steppers:
        logger.debug("probe %s step times (s): %s", stepper.precision.name, [round(t, 4) for t in stepper.times])
        figures = stepper.figures()
        if 0 < len(stepper.timed) < MIN_TIMED_STEPS:
            figures["note"] = (
                f"{len(stepper.timed)} timed step{'s' if len(stepper.timed) > 1 else ''}: its steps "
                f"took {sum(stepper.times):.0f} s of its {share:.0f} s share of the budget"
            )
        rows[stepper.precision.name] = replace(rows[stepper.precision.name], **figures)


def _probe_config(cfg: RunConfig, recipe) -> RunConfig:
    """The run's options on a budget: one batch of training data, one epoch, no checkpoints.

    A recipe whose data size is not set by ``max_train_samples`` may define
    ``probe_config(cfg) -> cfg`` to shrink its data the same way.
    """
    uses = getattr(recipe, "USES", None)
    changes: dict[str, Any] = {
        "epochs": 1,
        "max_steps": None,
        "grad_accum": 1,
        "seeds": [cfg.seeds[0]],
        "precisions": ["fp32"],
        "resume": False,
        "save_model": False,
        "eval_only": False,
    }
    if uses is None or "max_train_samples" in uses:
        changes["max_train_samples"] = min(cfg.max_train_samples or cfg.batch_size, cfg.batch_size)
    if uses is None or "max_eval_samples" in uses:
        changes["max_eval_samples"] = min(cfg.max_eval_samples or 8, 8)  # built by the recipe, never run
    cfg = replace_keeping_origin(cfg, **changes)  # messages still tell the recipe's defaults from the user's
    hook = getattr(recipe, "probe_config", None)
    return hook(cfg) if hook is not None else cfg


def _plan_precisions(names: Sequence[str] | None, device: torch.device) -> tuple[list[Precision], list[Precision]]:
    """(precisions that are always timed, fp32 first; those timed only if they fit the budget)."""
    if names is not None:
        if isinstance(names, str):
            names = [names]
        resolved = [resolve_precision(name, device, policy=False) for name in names]  # "amp": what is measured
        required = [PRECISIONS["fp32"], *[p for p in resolved if p.name != "fp32"]]
        unique = list({p.name: p for p in required}.values())
        return unique, []
    candidates = ["fp32"]
    if device.type == "cuda":
        candidates.append("tf32")
    candidates += amp_precision_names(device)
    required = []
    for name in candidates:
        try:
            required.append(resolve_precision(name, device))
        except UsageError:
            continue  # tf32 on a pre-Ampere GPU: simply not a choice here
    optional = []
    if device.type == "cpu" and "fp16" not in candidates:
        try:
            optional.append(resolve_precision("fp16", device))
        except UsageError:
            pass
    return required, optional


@contextlib.contextmanager
def _isolated_global_state(device: torch.device):
    """Run the probe without leaving a trace in the process: RNG and matmul settings restored.

    The matmul settings are the precision module's to read (``matmul_settings_kept``): torch's
    legacy getters raise in a process that set TF32 through its per-backend API.
    """
    devices = (
        [device.index if device.index is not None else torch.cuda.current_device()] if device.type == "cuda" else []
    )
    with matmul_settings_kept(), torch.random.fork_rng(devices=devices):
        yield


def _first_batch(loader, recipe_name: str):
    for batch in loader:
        return batch
    raise UsageError(f"probe: recipe {recipe_name} produced no training batch; give it some training data")


class _SameBatch:
    """The one batch, ``count`` times per pass; the clock starts as each one is handed out.

    No ``__len__``: the trainer then sizes its LR schedule from ``max_steps``.
    """

    def __init__(self, batch, clock: _StepClock):
        self.batch = batch
        self.clock = clock
        self.count = 0

    def __iter__(self):
        for _ in range(self.count):
            self.clock.start()
            yield self.batch


class _StepClock(Callback):
    """Device-synchronised wall time of each step: from its batch to the end of its optimizer step."""

    def __init__(self, device: torch.device):
        self.device = device
        self.times: list[float] = []
        self._t = 0.0

    def start(self) -> None:
        synchronize(self.device)
        self._t = time.perf_counter()

    def on_step_end(self, trainer, info) -> None:
        synchronize(self.device)
        self.times.append(time.perf_counter() - self._t)


class _Stepper:
    """One precision's trainer (mixft's loop, the recipe's parts) on the shared batch.

    ``run(n)`` trains ``n`` more steps: each ``fit()`` is one more epoch of a loader that
    holds ``n`` copies of the batch, so model, optimizer state and kernels stay warm.
    """

    def __init__(
        self,
        recipe,
        cfg: RunConfig,
        prepared,
        precision: Precision,
        device: torch.device,
        seed: int,
        batch=None,
        callbacks: Sequence[Callback] = (),
    ):
        parts = recipe.build(cfg, prepared, precision, device, seed)
        self.precision = precision
        self.run_info = dict(parts.run_info)
        self.batch = batch if batch is not None else _first_batch(parts.train_loader, cfg.recipe)
        self.clock = _StepClock(device)
        self.loader = _SameBatch(self.batch, self.clock)
        parts = replace(parts, train_loader=self.loader, eval_loader=None)
        # The run's own trainer: clipping, optimizer and speed switches as the run has
        # them; max_steps is every step the probe can take (it sizes the LR schedule).
        steps_cfg = replace(cfg, epochs=1, max_steps=WARMUP_STEPS + MAX_TIMED_STEPS)
        self.trainer = build_trainer(
            parts, steps_cfg, precision=precision, device=device, seed=seed, callbacks=[*callbacks, self.clock]
        )

    @property
    def times(self) -> list[float]:
        return self.clock.times

    @property
    def timed(self) -> list[float]:
        return self.clock.times[WARMUP_STEPS:]

    def run(self, steps: int) -> None:
        self.loader.count = steps
        self.trainer.epochs = self.trainer.state.epoch + 1
        self.trainer.fit()

    def figures(self) -> dict[str, Any]:
        """The PrecisionProbe fields this stepper measured."""
        return {
            "step_s": statistics.median(self.timed) if self.timed else None,
            "step_times_s": list(self.times),
            "warmup_steps": min(WARMUP_STEPS, len(self.times)),
        }


def _round(steppers: list[_Stepper], index: int, deadline: float, share: float) -> bool:
    """One timed step for each precision that has none yet, or that has room for one: below
    the maximum, another step like its last fits in its ``share`` of the budget, and (past
    the minimum) before ``deadline``. False when none stepped."""
    k = index % len(steppers)
    stepped = False
    for stepper in steppers[k:] + steppers[:k]:
        done = len(stepper.timed)
        if done >= MAX_TIMED_STEPS:
            continue
        if done and sum(stepper.times) + stepper.times[-1] > share:
            continue  # its share is spent (an emulated precision): the steps so far show the gap
        if done >= MIN_TIMED_STEPS and time.perf_counter() + stepper.times[-1] > deadline:
            continue
        stepper.run(1)
        stepped = True
    return stepped


def _estimated_step_s(fp32: _Stepper, fp32_row: PrecisionProbe, row: PrecisionProbe) -> float:
    """A step of ``row``'s precision, guessed from fp32's first timed step and the matmul
    ratio (a training step is mostly matmuls)."""
    step = fp32.timed[0] if fp32.timed else fp32.times[-1]
    if fp32_row.matmul_flops_per_s and row.matmul_flops_per_s:
        step *= fp32_row.matmul_flops_per_s / row.matmul_flops_per_s
    return step


def _fill_ratios(rows: list[PrecisionProbe]) -> None:
    base = next((r for r in rows if r.precision == "fp32"), None)
    for r in rows:
        if base is not None and base.step_s and r.step_s:
            r.speedup_vs_fp32 = base.step_s / r.step_s
        if base is not None and base.matmul_flops_per_s and r.matmul_flops_per_s:
            r.matmul_ratio_vs_fp32 = r.matmul_flops_per_s / base.matmul_flops_per_s


def recommend(rows: Sequence[PrecisionProbe]) -> tuple[str, str]:
    """(the fastest timed precision, a one-line reason with its measured ratio).

    fp32 wins when every other precision measured slower; then the reason names the best of
    them and its ratio. Ratios within ``NOISE_BAND`` of 1 are called about the same.

    Usage: ``name, why = recommend(result.rows)``
    """
    timed = [r for r in rows if r.step_s]
    if not timed:
        raise ValueError("no precision was timed")
    best = min(timed, key=lambda r: r.step_s)
    others = [r for r in timed if r.precision != "fp32" and r.speedup_vs_fp32]
    if best.precision == "fp32" or best.speedup_vs_fp32 is None:
        if not others:
            return best.precision, f"{best.precision}: no other precision was timed"
        runner_up = max(others, key=lambda r: r.speedup_vs_fp32)
        reason = (
            f"fp32: {runner_up.precision} measured {runner_up.speedup_vs_fp32:.2f}x fp32 per training step "
            "here, so mixed precision would slow training down"
        )
        ratio = runner_up.speedup_vs_fp32
    else:
        reason = f"{best.precision}: {best.speedup_vs_fp32:.2f}x fp32 per training step"
        ratio = best.speedup_vs_fp32
    if abs(ratio - 1.0) < NOISE_BAND:
        reason += f" (within {NOISE_BAND:.0%}: about the same)"
    spread = max((r.spread or 0.0) for r in timed)
    if spread > UNSTEADY:
        reason += f"; steps varied by up to {spread:.0%} of their median (a busy machine?): probe again when idle"
    return best.precision, reason


def _describe_batch(batch) -> dict[str, Any]:
    if isinstance(batch, Mapping):
        main = batch.get("input_ids")
        if main is None:
            main = next((v for k, v in batch.items() if k != "labels" and isinstance(v, torch.Tensor)), None)
        mask = batch.get("attention_mask")
    else:
        main, mask = batch[0], None
    shape = list(main.shape) if isinstance(main, torch.Tensor) else []
    return {
        "shape": shape,
        "samples": samples_in(batch)
        if is_packed(batch)
        else (shape[0] if shape else None),  # packed: rows hold several
        "tokens": int(mask.sum()) if isinstance(mask, torch.Tensor) else None,  # real, unpadded
    }
