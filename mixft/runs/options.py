"""The cheap checks of a run's options: recipe, options, device and precisions, before any file is read.

``check_options`` is the first step of ``make_plan`` (``mixft.runs.plan``) and of ``--probe``:
a bad option ends the command here (UsageError, exit 2) before data, models or the output
directory are touched. Under torchrun it joins the process group (each rank's GPU).

Usage::

    recipe, cfg, device, precisions = check_options(RunConfig(recipe="bert-sst2", precisions=["fp32", "bf16"]))
"""

from __future__ import annotations

from typing import Any

import torch

from mixft import distributed
from mixft.amp.precision import Precision, precision_row, resolve_device, resolve_precision
from mixft.config.option_rules import check_precision_combinations
from mixft.config.run_config import RunConfig
from mixft.errors import UsageError
from mixft.recipe import get_recipe


def check_options(cfg: RunConfig) -> tuple[Any, RunConfig, torch.device, list[Precision]]:
    """Recipe, options (the recipe's defaults applied), device and each precision as asked, valid on the device.

    "amp" stands for the device's mixed precision here (what ``--probe`` measures); what an
    ``--amp`` run trains in is decided by ``make_plan`` once the model is known.
    """
    recipe = get_recipe(cfg.recipe)
    if (cfg.save_model or cfg.eval_only) and not hasattr(recipe, "save_model"):
        raise UsageError(f"recipe {cfg.recipe} has no saved-model format: --save-model and --eval-only need one")
    if cfg.eval_only and cfg.model is None:
        raise UsageError("--eval-only needs --model: the directory a --save-model run wrote")
    cfg = cfg.for_recipe(recipe)
    if cfg.fsdp:
        _check_fsdp(cfg)  # before joining a process group: the launcher is what it checks
    device = resolve_device(cfg.device)
    if distributed.init_from_env(device.type) and device.type == "cuda":
        device = torch.device(distributed.local_device("cuda"))  # one GPU per rank
    precisions = [resolve_precision(name, device, policy=False) for name in cfg.precisions]
    names = [p.name for p in precisions]
    if len(set(names)) != len(names):
        raise UsageError(f"--compare resolves to the same precision twice: {','.join(names)}")
    check_precision_combinations(cfg, precisions)  # as asked; again once --amp is resolved (runs.checks)
    return recipe, cfg, device, precisions


def _check_fsdp(cfg: RunConfig) -> None:
    """``--fsdp``'s launcher and combinations, before any work (its blocks: ``check_before_training``).

    The refusals read the flags of each precision's row in the table (no device work before the group).
    """
    from ..train.fsdp import check_launch

    check_launch()  # --resume's checkpoint (a sharded directory, its world size) is make_plan's to check
    # Each precision's row ("amp": the device's mixed precision), named in the messages as it was asked.
    device_type = resolve_device(cfg.device).type
    asked = [(name, precision_row(name, device_type)) for name in cfg.precisions]
    pure = [name for name, row in asked if row.param_dtype is not None]
    if pure:
        # FSDP2's policy already keeps fp32 shards and gathers bf16: bf16 weights to shard is another design.
        raise UsageError(
            f"--fsdp with {', '.join(pure)}: the sharded run keeps fp32 shards and gathers them in "
            "bf16 (FSDP2's mixed-precision policy); use --precision bf16 with --fsdp"
        )
    half = [name for name, row in asked if row.autocast_dtype is not None]  # the pure ones refused above
    if cfg.fp32_modules and half:
        # FSDP gathers every block's weights in the half dtype: an fp32 island would compute in
        # fp32 on rounded weights, which is not what --fp32-modules promises.
        raise UsageError(
            f"--fp32-modules with --fsdp at {', '.join(half)}: the sharded blocks gather their weights "
            "in that dtype, so those modules would not run on fp32 weights; drop one of the two"
        )
