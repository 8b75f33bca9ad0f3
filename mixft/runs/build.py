"""A Trainer from a recipe's parts and a run's options: the one place the run layer meets the loop.

The loop (``mixft.train.trainer``) knows nothing of ``RunConfig`` or recipes; the runner, the
probe, the benchmarks and the examples build their trainer here. What a run records of its options
(results.json's ``config``, the trackers' hyper-parameters) is the plan's ``recorded_config``, attached
by the runner: the loop does not carry it.

Usage::

    parts = recipe.build(cfg, prepared, precision, device, seed)
    result = build_trainer(parts, cfg, precision=precision, device=device, seed=seed).fit()
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from mixft.amp.precision import PRECISIONS, Precision
from mixft.config.run_config import RunConfig
from mixft.recipe import TrainerParts
from mixft.train.hooks import Callback
from mixft.train.trainer import Trainer


def build_trainer(
    parts: TrainerParts,
    cfg: RunConfig,
    *,
    precision: str | Precision,
    device: str | torch.device,
    seed: int,
    callbacks: Sequence[Callback] = (),
) -> Trainer:
    """The trainer for a recipe's parts under a run's options (``cfg`` with the recipe defaults applied).

    The model, optimizer, loss, loaders, scheduler, predict_fn and metric come from
    ``parts``; accumulation, clipping, the budget, ``eval_steps`` and fp16's initial loss scale from ``cfg``.
    ``precision``: a resolved ``Precision`` is taken as it is (a name is resolved by the ``Trainer``).

    Usage: ``build_trainer(recipe.build(cfg, prepared, precision, device, seed), cfg,
    precision=precision, device=device, seed=seed).fit()``
    """
    row = precision if isinstance(precision, Precision) else PRECISIONS.get(precision)
    # --init-loss-scale is fp16's; the other runs of the same --compare have no GradScaler to start ("amp" may
    # still become fp16: the Trainer resolves it and keeps the scale for a scaler that is on).
    scale = cfg.init_loss_scale if row is None or row.grad_scaler else None
    return Trainer(
        parts.model,
        parts.optimizer,
        parts.loss_fn,
        parts.train_loader,
        eval_loader=parts.eval_loader,
        precision=precision,
        device=device,
        lr_scheduler=parts.lr_scheduler,
        grad_accum=cfg.grad_accum,
        max_grad_norm=cfg.clip_norm,
        epochs=cfg.epochs,
        max_steps=cfg.max_steps,
        eval_steps=cfg.eval_steps,
        predict_fn=parts.predict_fn,
        metric=parts.metric,
        seed=seed,
        callbacks=callbacks,
        fsdp=cfg.fsdp,
        # --init-loss-scale: where fp16's GradScaler starts (a scaler that is off ignores it).
        scaler_kwargs={"init_scale": scale} if scale is not None else None,
        run_info=parts.run_info,
    )
