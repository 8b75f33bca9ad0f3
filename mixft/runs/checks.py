"""Before the first run: check ``--fp32-modules``' names, and run the fp16 preflight when it is due.

``--preflight`` (``RunConfig.preflight``) runs ``mixft.amp.preflight`` once, before any
training: a few training batches forward and backward in fp32 with hooks, naming the
modules whose values fp16 cannot hold and what to do about it. ``None`` (the default)
runs it before any fp16 run; ``--no-preflight`` never. It only checks: training follows
either way, and its result goes into results.json (``preflight``) and report.md.

``--fp32-modules NAME,...`` (``mixft.amp.fp32``) is applied to each run's model
before its trainer is built; its names are checked here against the first built model,
so a typo ends the command (exit 2) before any training.

Neither changes a run's trajectory: the model checked here is a separate build, and
every RNG is restored afterwards.

Usage::

    checked = check_before_training(recipe, cfg, prepared, device, precisions)  # dict or None
    write_results(path, results, hardware=hardware, preflight=checked)
    keep_in_fp32(parts.model, cfg.fp32_modules)  # in each run (the runner), between recipe.build and build_trainer
"""

from __future__ import annotations

import gc
from typing import Any

import torch

from mixft.amp.fp32 import keep_in_fp32
from mixft.amp.precision import Precision, resolve_precision
from mixft.amp.precision_names import GRADSCALER_INIT_SCALE
from mixft.amp.preflight import PreflightResult, preflight
from mixft.config.option_rules import check_precision_combinations
from mixft.config.run_config import RunConfig
from mixft.errors import UsageError
from mixft.log import logger
from mixft.rng import capture_rng_state, restore_rng_state


def preflight_due(cfg: RunConfig, precisions: list[Precision]) -> bool:
    """Whether this command runs the preflight: asked for, or (by default) before a run that computes in fp16.

    Usage: ``preflight_due(cfg, [resolve_precision("fp16", device)])``
    """
    if cfg.eval_only:  # nothing trains: nothing to warn about
        return False
    if cfg.preflight is None:
        # --fsdp: the check runs the whole model in each process, which a sharded run may not fit.
        return any(_in_fp16(p) for p in precisions) and not cfg.fsdp
    return cfg.preflight


def check_before_training(
    recipe, cfg: RunConfig, prepared, device, precisions: list[Precision], *, trains: bool = True
) -> dict[str, Any] | None:
    """Validate ``--fp32-modules`` and ``--init-loss-scale``; run the preflight when due.

    Returns results.json's ``preflight`` record, or None when no preflight ran. Raises
    UsageError (one line) for a module name the model does not have. ``trains``: False when
    every run is already finished (``--resume``): no preflight for a command that trains nothing.

    Usage: ``checked = check_before_training(recipe, cfg, prepared, device, precisions)``
    """
    check_precision_combinations(cfg, precisions)  # again, on what --amp resolved to (first: check_options)
    due = preflight_due(cfg, precisions) and trains
    if not (due or cfg.fp32_modules or cfg.fsdp):
        return None
    # The run the check is about: fp16 when the command trains it, else the first precision.
    precision = next((p for p in precisions if _in_fp16(p)), precisions[0])
    rng = capture_rng_state()  # building draws initial weights: the runs must draw the same ones
    try:
        parts = recipe.build(cfg, prepared, precision, device, cfg.seeds[0])
        model = parts.model
        if cfg.fp32_modules:
            keep_in_fp32(model, cfg.fp32_modules).remove()  # unknown name: UsageError with the closest ones
            check_not_whole_model(model, cfg.fp32_modules, precision.name)
        if cfg.fsdp:
            from ..train.fsdp import check_shardable

            check_shardable(model)  # no transformer blocks: one line now, not at the first run's start
        if not due:
            return None
        torch.manual_seed(cfg.seeds[0])  # the same dropout masks every time: a reproducible check
        result = preflight(
            model.to(device),
            _per_micro_batch(parts.loss_fn, cfg.grad_accum),
            parts.train_loader,
            device=device,
            init_scale=cfg.init_loss_scale or GRADSCALER_INIT_SCALE,
            bf16_supported=_bf16_supported(device),
        )
    finally:
        restore_rng_state(rng)
        parts = model = None
        gc.collect()  # the checked model is not kept: give its memory back before the first run
    return _record(result, cfg)


def check_not_whole_model(model, names: list[str], precision: str) -> None:
    """Refuse ``--fp32-modules`` that hold every parameter of ``model``: the run would be fp32 under another name.

    Usage: ``check_not_whole_model(parts.model, ["model"], "bf16")  # UsageError``
    """
    kept = [name for name, _ in model.named_parameters() if any(_within(name, k) or k == "" for k in names)]
    total = sum(1 for _ in model.named_parameters())
    if total and len(kept) == total:
        raise UsageError(
            f"--fp32-modules {','.join(names)} covers the whole model: the {precision} run would be an "
            "fp32 run; name the modules at risk (the preflight lists them), or use --precision fp32"
        )


def _per_micro_batch(loss_fn, grad_accum: int):
    # The trainer backpropagates loss / grad_accum: the gradients fp16 must hold are that size.
    if grad_accum == 1:
        return loss_fn
    return lambda outputs, labels: loss_fn(outputs, labels) / grad_accum


def _bf16_supported(device) -> bool:
    try:
        resolve_precision("bf16", device)
    except UsageError:
        return False
    return True


def _in_fp16(precision: Precision) -> bool:
    # The values the preflight looks for are the ones fp16's narrow range cannot hold.
    return precision.autocast_dtype == torch.float16


def _record(result: PreflightResult, cfg: RunConfig) -> dict[str, Any]:
    """Log the result (stderr through the logger) and return its results.json record."""
    kept = list(cfg.fp32_modules or [])
    handled = [r.name for r in result.modules_at_risk if any(_within(r.name, k) for k in kept)]
    log = logger.warning if result.at_risk and len(handled) < len(result.modules_at_risk) else logger.info
    for line in result.render():
        log(line)
    if handled:
        logger.info(
            "preflight: --fp32-modules %s runs %d of these module(s) in fp32: %s",
            ",".join(kept),
            len(handled),
            ", ".join(handled),
        )
    if result.at_risk:
        logger.info("preflight: this only checks; training goes on as asked (results.json: preflight)")
    return {**result.to_dict(), "kept_in_fp32": kept, "handled_by_fp32_modules": handled}


def _within(name: str, kept: str) -> bool:
    return name == kept or name.startswith(kept + ".")
