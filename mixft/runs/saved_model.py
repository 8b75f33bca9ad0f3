"""``--save-model``: the fine-tuned model a finished run writes, in its recipe's format, from one process.

A run that trained saves its trainer's model (``save_trained_model``); under ``--fsdp`` the
shards are consolidated first into a fresh one-process model of the recipe, so what is saved
loads without a process group. A run ``--resume`` keeps as it finished without
``--save-model`` saves the weights its final checkpoint holds (``save_kept_model``: the best
evaluation's under ``--load-best``). A run that stopped early on a collapse is not a finished
model: the caller does not ask (early stopping on patience is).

Usage::

    save_trained_model(plan, planned_run, trainer)   # every process calls it under --fsdp
    save_kept_model(plan, planned_run)
"""

from __future__ import annotations

import torch

from mixft import distributed
from mixft.log import logger
from mixft.runs.identity import final_weights
from mixft.runs.plan import PlannedRun, RunPlan


def save_trained_model(plan: RunPlan, run: PlannedRun, trainer) -> None:
    """Save ``trainer``'s model to the run's ``saved_model`` directory (a collective under ``--fsdp``)."""
    model = _whole_model(plan, run, trainer) if trainer.fsdp else trainer.module
    if not distributed.is_main_process():
        return
    plan.recipe.save_model(model, plan.prepared, run.saved_model)
    logger.info(
        "saved the fine-tuned model to %s (evaluate it alone with --eval-only --model %s)",
        run.saved_model,
        run.saved_model,
    )


def save_kept_model(plan: RunPlan, run: PlannedRun) -> None:
    """A run finished earlier without ``--save-model``: save the weights its final checkpoint holds."""
    if not distributed.is_main_process():
        return
    model = _recipe_model(plan, run, final_weights(run.checkpoint), plan.device)
    plan.recipe.save_model(model, plan.prepared, run.saved_model)
    logger.info(
        "saved the fine-tuned model of the finished %s run to %s (from its final checkpoint)",
        run.precision.name,
        run.saved_model,
    )


def _whole_model(plan: RunPlan, run: PlannedRun, trainer):
    """A sharded run's model, consolidated into a fresh one-process model of the recipe in process 0 (None
    elsewhere). A collective: every process calls it."""
    from mixft.train.fsdp import full_state_dict

    weights = full_state_dict(trainer.module)  # the whole tensors on process 0's CPU, nothing elsewhere
    if not distributed.is_main_process():
        return None
    return _recipe_model(plan, run, weights, torch.device("cpu"))


def _recipe_model(plan: RunPlan, run: PlannedRun, weights, device):
    """A fresh model of the run's recipe on ``device``, holding ``weights``."""
    model = plan.recipe.build(plan.cfg, plan.prepared, run.precision, device, run.seed).model
    model.load_state_dict(weights)
    return model
