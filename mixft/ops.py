"""Custom autograd functions under autocast: an fp32 island with ``custom_fwd``/``custom_bwd``.

``torch.amp.custom_fwd(cast_inputs=torch.float32)`` runs the forward with autocast off
and fp32 inputs, and ``custom_bwd`` runs the backward in the same autocast state as the
forward. Use this pattern for ops whose maths breaks in half precision (large exponents,
small differences). ``device_type`` is fixed when the function is defined, hence one
class per device type.

Usage: ``y = stable_softplus(x)`` inside ``with trainer.autocast():``
"""

from __future__ import annotations

import torch


def _make_softplus(device_type: str):
    class StableSoftplus(torch.autograd.Function):
        """softplus(x) = log(1 + exp(x)), computed in fp32 (exp overflows fp16 above ~11)."""

        @staticmethod
        @torch.amp.custom_fwd(device_type=device_type, cast_inputs=torch.float32)
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return torch.nn.functional.softplus(x)

        @staticmethod
        @torch.amp.custom_bwd(device_type=device_type)
        def backward(ctx, grad_out):
            (x,) = ctx.saved_tensors
            return grad_out * torch.sigmoid(x)

    StableSoftplus.__name__ = f"StableSoftplus_{device_type}"
    return StableSoftplus


_FUNCTIONS = {"cpu": _make_softplus("cpu"), "cuda": _make_softplus("cuda")}


def stable_softplus(x: torch.Tensor) -> torch.Tensor:
    """Softplus in fp32 whatever the surrounding autocast dtype; gradients flow as usual."""
    return _FUNCTIONS[x.device.type].apply(x)
