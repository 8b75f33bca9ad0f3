"""Optimizer helpers that recipes share.

Usage::

    opt = torch.optim.AdamW(groups, lr=cfg.lr, fused=fused_adamw_available(device))
"""

from __future__ import annotations

import torch


def fused_adamw_available(device: torch.device) -> bool:
    """Whether ``AdamW(fused=True)`` runs on ``device`` (CUDA; CPU in recent torch).

    Usage: ``torch.optim.AdamW(params, lr=1e-3, fused=fused_adamw_available(device))``
    """
    try:
        torch.optim.AdamW([torch.zeros(1, device=device, requires_grad=True)], fused=True)
        return True
    except (RuntimeError, ValueError):
        return False


def adamw_factory(lr: float, device: torch.device, weight_decay: float = 0.01):
    """``f(params) -> AdamW`` with BERT's groups: no weight decay on biases and LayerNorm weights.

    Those are exactly the 1-d parameters (as BERT and Hugging Face's Trainer treat them).
    Frozen parameters (``requires_grad=False``: a LoRA model's base weights) are left out:
    AdamW would keep two moment buffers per frozen weight, the memory LoRA exists to save.
    Fused where the device has it. A factory, because the trainer builds the optimizer
    only once the model is on its device.

    Usage: ``Trainer(model, adamw_factory(2e-5, device), loss_fn, loader)``
    """
    def build(params):
        params = [p for p in params if p.requires_grad]
        groups = [
            {"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
        ]
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
