"""Rules where options meet: values each fine alone that together fail mid-run or do nothing.

Each option's own rule lives in its declaration (``mixft.options``: a float32 bound, a
probability...); these are the rules *between* options that need no data or model:
a schedule and the learning rate, the fp16 loss scale and the collapse floor, the
collapse options and ``--no-collapse-check``. ``RunConfig.validate`` runs them, so a
flag, a config file and a ``RunConfig`` from Python are refused alike, before any work.
Rules that need the precisions are in ``check_precision_combinations``; rules that need
the run's length are in ``mixft.runs.shape``.

Usage::

    check_option_combinations(RunConfig(lr_scheduler="polynomial", lr=1e-8))   # UsageError
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from mixft.amp.precision_names import GRADSCALER_INIT_SCALE
from mixft.errors import UsageError

#: transformers' polynomial schedule decays to ``lr_end=1e-7`` and refuses an initial lr not above it.
POLYNOMIAL_LR_END = 1e-7


def _default(cfg, name: str) -> Any:
    return next(f.default for f in fields(cfg) if f.name == name)


def _set(cfg, name: str) -> bool:
    """The option differs from its declared default (a command line, a config file or Python set it)."""
    return getattr(cfg, name) != _default(cfg, name)


def check_option_combinations(cfg) -> None:
    """Refuse option pairs that cannot run as asked (one line naming both)."""
    if cfg.lr_scheduler == "polynomial" and cfg.lr is not None and cfg.lr <= POLYNOMIAL_LR_END:
        raise UsageError(
            f"--lr-scheduler polynomial decays to {POLYNOMIAL_LR_END:g} (transformers' lr_end): --lr must "
            f"be above it, got {cfg.lr:g}"
        )
    if not cfg.detect_collapse:
        for name in ("min_loss_scale", "max_consecutive_skips"):
            if _set(cfg, name):
                flag = "--" + name.replace("_", "-")
                raise UsageError(
                    f"{flag} configures the collapse check that --no-collapse-check turns off: drop one of the two"
                )
        return
    trains_fp16 = "fp16" in cfg.precisions
    if cfg.init_loss_scale is not None or trains_fp16:
        start = (
            f"--init-loss-scale {cfg.init_loss_scale:g}"
            if cfg.init_loss_scale is not None
            else f"fp16's initial loss scale {GRADSCALER_INIT_SCALE:g} (the default)"
        )
        if (cfg.init_loss_scale or GRADSCALER_INIT_SCALE) < cfg.min_loss_scale:
            raise UsageError(
                f"{start} is below --min-loss-scale {cfg.min_loss_scale:g}: the collapse check would stop "
                "the run at its first step; raise the one or lower the other"
            )


def check_precision_combinations(cfg, precisions) -> None:
    """Options that do nothing, or cannot work, at the precisions this command trains (``Precision`` objects).

    Run twice: on the precisions as asked, before any file is read (``mixft.runs.options``;
    "amp" there is the device's mixed precision), and on the precisions ``--amp`` resolved
    to once the model is known (``mixft.runs.checks``).

    Usage: ``check_precision_combinations(cfg, [resolve_precision("fp32", device)])``
    """
    trained = ", ".join(p.name for p in precisions)
    pure = [p.name for p in precisions if p.param_dtype is not None]  # bf16 weights: no fp32 master copy
    if cfg.fp32_modules and pure:
        raise UsageError(
            f"--fp32-modules keeps modules in fp32 on fp32 master weights; {pure[0]} holds the weights "
            f"in bf16: drop --fp32-modules or train {pure[0]} in a command of its own"
        )
    if cfg.init_loss_scale is not None and not any(p.grad_scaler for p in precisions):
        raise UsageError(f"--init-loss-scale: only fp16 uses a loss scale; this command trains {trained}")
    if cfg.detect_collapse and _set(cfg, "min_loss_scale") and not any(p.grad_scaler for p in precisions):
        raise UsageError(f"--min-loss-scale: only fp16 uses a loss scale; this command trains {trained}")
    if cfg.fp32_modules and not any(p.autocast_enabled for p in precisions):
        raise UsageError(
            f"--fp32-modules: only autocast precisions (bf16, fp16) run modules in lower precision; this "
            f"command trains {trained}"
        )


def recipe_extra_options(recipe) -> frozenset[str]:
    """The ``extra`` keys a recipe reads: its ``EXTRA_OPTIONS`` (or the keys of its ``EXTRA_DEFAULTS``); none else."""
    declared = getattr(recipe, "EXTRA_OPTIONS", None)
    if declared is None:
        declared = getattr(recipe, "EXTRA_DEFAULTS", None) or ()
    return frozenset(declared)


def check_extra_options(cfg, recipe) -> None:
    """Refuse an ``extra`` key the recipe does not read (it would be ignored without a word).

    Usage: ``check_extra_options(RunConfig(recipe="text-classification", extra={"foo": 1}), recipe)  # UsageError``
    """
    known = recipe_extra_options(recipe)
    unknown = sorted(set(cfg.extra or {}) - known)
    if unknown:
        reads = f"it reads: {', '.join(sorted(known))}" if known else "it reads no extra options"
        raise UsageError(f"extra.{unknown[0]}: not an option of recipe {cfg.recipe} ({reads})")
