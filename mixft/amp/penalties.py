"""Gradient penalties under a GradScaler, done the way PyTorch's AMP notes prescribe.

A penalty on the gradient norm needs the gradients *inside* the graph. Under fp16 those
must come from the **scaled** loss (small gradients underflow otherwise), then be
unscaled by hand before the penalty is formed — ``scaler.unscale_`` only works on
``.grad`` after backward, not on ``autograd.grad`` results. The combined loss is then
scaled as usual by the trainer.

Usage::

    trainer = Trainer(model, opt, loss_fn, loader, precision="fp16",
                      loss_hook=lambda t, loss, out, x: gradient_penalty(t, loss, weight=0.1))
"""

from __future__ import annotations

import torch


def gradient_penalty(trainer, loss: torch.Tensor, weight: float = 1.0, params=None) -> torch.Tensor:
    """``loss + weight * ||d loss / d params||_2``, correct with or without a GradScaler."""
    params = [p for p in (params if params is not None else trainer.params) if p.requires_grad]
    scaler = trainer.scaler
    scaled_grads = torch.autograd.grad(scaler.scale(loss), params, create_graph=True)
    # get_scale() is 1.0 when the scaler is disabled, so fp32/bf16 take the same path.
    inv_scale = 1.0 / scaler.get_scale()
    grads = [g * inv_scale for g in scaled_grads]
    with trainer.autocast():
        norm = torch.sqrt(sum(g.pow(2).sum() for g in grads))
    return loss + weight * norm
