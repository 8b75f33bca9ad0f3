"""Optimizer helpers that recipes share.

Usage::

    opt = torch.optim.AdamW(groups, lr=cfg.lr, fused=fused_adamw_available(device))
    total = planned_steps(len(train_loader), grad_accum=2, epochs=3, max_steps=None)
"""

from __future__ import annotations

import math

import torch


def planned_steps(n_batches: int | None, grad_accum: int, epochs: int, max_steps: int | None) -> int | None:
    """Optimizer steps a run will take: the length a schedule is built for.

    Each epoch's last window may be shorter than ``grad_accum`` micro-batches and is a step
    of its own; ``max_steps`` caps the total. Without ``n_batches`` (a loader without
    ``len()``) only ``max_steps`` can say, and it may be None.

    Usage: ``planned_steps(10, grad_accum=4, epochs=2, max_steps=None) == 6``
    """
    if n_batches is None:
        return max_steps
    total = math.ceil(n_batches / grad_accum) * epochs
    return min(total, max_steps) if max_steps is not None else total


def build_schedulers(lr_scheduler, optimizers: list[torch.optim.Optimizer], total_steps: int | None) -> list:
    """The trainer's LR schedulers from what it was given: none, one, a list, or a factory.

    A factory ``f(optimizer, total_steps) -> scheduler`` is called once per optimizer and
    needs ``total_steps`` (``planned_steps``).

    Usage: ``build_schedulers(linear_warmup_factory(0.1), [opt], total_steps=100)``
    """
    if lr_scheduler is None:
        return []
    if isinstance(lr_scheduler, (list, tuple)):
        return list(lr_scheduler)
    if callable(lr_scheduler) and not hasattr(lr_scheduler, "step"):
        if total_steps is None:
            raise ValueError("a scheduler factory needs a sized train_loader or max_steps")
        return [lr_scheduler(opt, total_steps) for opt in optimizers]
    return [lr_scheduler]


def fused_adamw_available(device: torch.device) -> bool:
    """Whether ``AdamW(fused=True)`` runs on ``device`` (CUDA; CPU in recent torch).

    Usage: ``torch.optim.AdamW(params, lr=1e-3, fused=fused_adamw_available(device))``
    """
    try:
        torch.optim.AdamW([torch.zeros(1, device=device, requires_grad=True)], fused=True)
        return True
    except (RuntimeError, ValueError):
        return False


def adamw_factory(lr: float, device: torch.device, weight_decay: float = 0.01, precision=None):
    """``f(params) -> AdamW`` with BERT's groups: no weight decay on biases and LayerNorm weights.

    Those are exactly the 1-d parameters (as BERT and Hugging Face's Trainer treat them).
    Frozen parameters (``requires_grad=False``: a LoRA model's base weights) are left out:
    AdamW would keep two moment buffers per frozen weight, the memory LoRA exists to save.
    Fused where the device has it. A factory, because the trainer builds the optimizer
    only once the model is on its device (and, for a pure precision, cast to bf16).

    ``precision`` (a ``mixft.precision.Precision`` or None): under bf16-pure / bf16-true the
    optimizer is torch-optimi's AdamW with the same betas, eps and groups, Kahan-compensated
    for bf16-pure (``mixft.train.pure_bf16``).

    Usage: ``Trainer(model, adamw_factory(2e-5, device, precision=PRECISIONS["bf16-pure"]), loss_fn, loader)``
    """

    def build(params):
        params = [p for p in params if p.requires_grad]
        groups = [
            {"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
        ]
        # With no parameter to train (``--eval-only`` of a saved LoRA model: every weight frozen) the optimizer
        # holds nothing and never steps: torch's AdamW takes empty groups, optimi's refuses them.
        if getattr(precision, "param_dtype", None) is not None and params:
            from mixft.train.pure_bf16 import compensated_adamw

            return compensated_adamw(groups, lr, compensated=precision.compensated)
        return torch.optim.AdamW(groups, lr=lr, fused=fused_adamw_available(device))

    return build


def linear_warmup_factory(warmup_fraction: float = 0.1):
    """``f(optimizer, total_steps) -> scheduler``: linear warm-up over the fraction, then linear decay to 0.

    Usage: ``Trainer(..., lr_scheduler=linear_warmup_factory(0.1))``
    """

    def build(optimizer, total_steps: int):
        from transformers import get_linear_schedule_with_warmup

        return get_linear_schedule_with_warmup(optimizer, int(warmup_fraction * total_steps), total_steps)

    return build
