"""The run's shape (optimizer steps, evaluations, warm-up) and the options it makes impossible or idle.

Some options are only wrong against the run they are given to: a warm-up longer than
the run, a polynomial decay with no step after its warm-up (transformers divides by
zero at the last step), an ``--eval-steps`` that adds no evaluation to those at the epoch
ends, an early-stopping patience the run's evaluations can never use up, ``--load-best``
when the run evaluates once, a ``--metric-for-best`` the evaluation will not hold. The facts (batches per epoch, whether there is an evaluation set, the
task's metrics) exist once the recipe has built a run's parts; ``check_run_shape`` builds
the first run's once, before the output directory is touched, when one of those options
was given, checks them, and gives everything back (RNG state included: the runs draw
the same weights as without it).

Usage::

    check_run_shape(recipe, cfg, prepared, device, precisions)   # UsageError (exit 2) or None
    shape = run_shape(cfg, n_batches=8, has_eval=True)            # RunShape(steps=24, ...)
"""

from __future__ import annotations

import gc
import math
from dataclasses import dataclass

from mixft.config.run_config import RunConfig
from mixft.errors import UsageError
from mixft.rng import capture_rng_state, restore_rng_state
from mixft.runs.watch import check_metric_for_best, main_metric
from mixft.train.optim import planned_steps
from mixft.train.schedules import DEFAULT_WARMUP_RATIO


@dataclass(frozen=True)
class RunShape:
    """What one run will do, known before it trains (None where a loader without a length cannot say)."""

    steps: int | None  # optimizer steps
    steps_per_epoch: int | None
    evaluations: int | None  # distinct evaluations during training (epoch ends and --eval-steps)
    warmup_steps: int | None  # the schedule's warm-up, in optimizer steps
    added_by_eval_steps: int | None = None  # evaluations --eval-steps adds to those at the epoch ends


def run_shape(cfg: RunConfig, n_batches: int | None, has_eval: bool = True) -> RunShape:
    """The shape of a run of ``cfg`` (recipe defaults applied) over ``n_batches`` micro-batches per epoch.

    Usage: ``run_shape(RunConfig(epochs=2, batch_size=8, grad_accum=1), n_batches=8).evaluations  # 2``
    """
    epochs = cfg.epochs or 1
    steps = planned_steps(n_batches, cfg.grad_accum or 1, epochs, cfg.max_steps)
    per_epoch = None if n_batches is None else math.ceil(n_batches / (cfg.grad_accum or 1))
    evaluations = added = None
    if steps is not None and per_epoch:
        # The same steps the trainer evaluates at: every --eval-steps, and each epoch's end (the
        # last one cut short by --max-steps included); one step evaluated twice counts once.
        at = {k * cfg.eval_steps for k in range(1, steps // cfg.eval_steps + 1)} if cfg.eval_steps else set()
        ends = {min(e * per_epoch, steps) for e in range(1, min(epochs, math.ceil(steps / per_epoch)) + 1)}
        evaluations = len(at | ends) if has_eval else 0
        added = len(at - ends) if has_eval else 0
    warmup = None
    if steps is not None:
        if cfg.warmup_steps is not None:
            warmup = cfg.warmup_steps
        else:
            ratio = (
                cfg.warmup_ratio
                if cfg.warmup_ratio is not None
                else (0.0 if cfg.lr_scheduler == "constant" else DEFAULT_WARMUP_RATIO)
            )
            warmup = int(ratio * steps)  # as mixft.train.schedules.build_scheduler_factory rounds it
    return RunShape(steps, per_epoch, evaluations, warmup, added)


def shape_matters(cfg: RunConfig) -> bool:
    """Whether an option of ``cfg`` is one the run's shape can refuse (only then are its parts built early)."""
    if cfg.eval_only:
        return False
    return bool(
        cfg.warmup_steps is not None
        or cfg.eval_steps
        or cfg.lr_scheduler == "polynomial"
        or cfg.early_stopping_patience
        or cfg.load_best
        or cfg.metric_for_best
    )


def check_shape(cfg: RunConfig, shape: RunShape) -> None:
    """The rules between the options and the run's shape; UsageError names both.

    Usage: ``check_shape(cfg, run_shape(cfg, n_batches=len(parts.train_loader)))``
    """
    steps = shape.steps
    if steps is not None and cfg.warmup_steps is not None and cfg.warmup_steps > steps:
        raise UsageError(
            f"--warmup-steps {cfg.warmup_steps} is longer than the run ({steps} optimizer steps): the "
            f"learning rate would never reach --lr {cfg.lr:g}; give a shorter warm-up (or "
            "--warmup-ratio F: a fraction of the run)"
        )
    if (
        cfg.lr_scheduler == "polynomial"
        and steps is not None
        and shape.warmup_steps is not None
        and shape.warmup_steps >= steps
    ):
        given = (
            f"--warmup-steps {cfg.warmup_steps}"
            if cfg.warmup_steps is not None
            else f"--warmup-ratio {cfg.warmup_ratio:g}"
        )
        raise UsageError(
            f"--lr-scheduler polynomial needs at least one optimizer step after the warm-up: {given} "
            f"covers all {steps} steps"
        )
    evaluations = shape.evaluations
    if evaluations is None:
        return
    if cfg.eval_steps and evaluations and shape.added_by_eval_steps == 0:
        # Was: --max-steps 4 --eval-steps 100, exit 0, one evaluation (the epoch end's) and no word.
        raise UsageError(
            f"--eval-steps {cfg.eval_steps} adds no evaluation to this run: it has {steps} optimizer steps "
            f"({shape.steps_per_epoch} per epoch) and evaluates at each epoch's end already; give a smaller N "
            "or drop --eval-steps"
        )
    patience = cfg.early_stopping_patience
    if patience and evaluations < patience + 1:
        raise UsageError(
            f"--early-stopping-patience {patience} can never stop this run: it evaluates {evaluations} "
            f"time{'s' if evaluations != 1 else ''} (early stopping needs at least {patience + 1} "
            "evaluations; evaluate more often with --eval-steps N)"
        )
    if cfg.load_best and evaluations <= 1:
        raise UsageError(
            "--load-best: this run evaluates "
            + (
                "once, so its best evaluation is its last"
                if evaluations == 1
                else "never (no evaluation data), so it has no best evaluation"
            )
            + "; evaluate more often with --eval-steps N, or drop --load-best"
        )


#: Metrics that need the labels to vary (a correlation of constant labels has no value).
CORRELATIONS = ("pearsonr", "spearmanr")


def check_metric_defined(cfg: RunConfig, prepared) -> None:
    """Refuse an explicit correlation ``--metric-for-best`` that the evaluation data leaves undefined, when the
    run would rank by it (early stopping or ``--load-best``); the evaluations' own rule keeps any other case
    from ranking an undefined value (``mixft.callbacks.best``)."""
    metric = cfg.metric_for_best
    if metric not in CORRELATIONS or not (cfg.early_stopping_patience or cfg.load_best):
        return
    data = getattr(prepared, "data", None)
    task = getattr(data, "task", None)
    ds = getattr(data, "eval", None)
    column = getattr(task, "label_column", None)
    if ds is None or column is None or column not in getattr(ds, "column_names", ()):
        return  # the recipe cannot say: the run-time rule applies
    values = set(ds[column])
    if len(values) == 1:
        (value,) = values
        raise UsageError(
            f"--metric-for-best {metric} is undefined on this data: the validation labels are constant "
            f"(all {value:g}); use --metric-for-best loss"
            if isinstance(value, (int, float))
            else f"--metric-for-best {metric} is undefined on this data: the validation labels are constant "
            f"(all {value}); use --metric-for-best loss"
        )


def check_run_shape(recipe, cfg: RunConfig, prepared, device, precisions) -> RunShape | None:
    """Build the first run's parts (when an option depends on them), check the options against them, free them.

    Returns the shape checked, or None when no option needed it. Every RNG is restored:
    the runs draw exactly what they would have drawn without this check.

    Usage: ``check_run_shape(recipe, cfg, prepared, device, precisions)`` before ``OutputLock``
    """
    if not shape_matters(cfg):
        return None
    rng = capture_rng_state()  # building draws initial weights: the runs must draw the same ones
    parts = None
    try:
        parts = recipe.build(cfg, prepared, precisions[0], device, cfg.seeds[0])
        check_metric_for_best(cfg.metric_for_best or main_metric(parts.metric, parts.predict_fn), parts)
        check_metric_defined(cfg, prepared)
        try:
            n_batches = len(parts.train_loader)
        except TypeError:  # an iterable without a length: only --max-steps says how long the run is
            n_batches = None
        shape = run_shape(cfg, n_batches, has_eval=parts.eval_loader is not None)
        check_shape(cfg, shape)
        return shape
    finally:
        restore_rng_state(rng)
        parts = None
        gc.collect()  # the model built here is not kept: give its memory back before the first run
