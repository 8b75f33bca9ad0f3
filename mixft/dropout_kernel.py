"""Dropout masks from one random byte per element, exact to 2**-40: the op behind ``FastDropout``.

Why: on CPU, torch's dropout draws its mask with ``bernoulli_``: one or two Mersenne-Twister
outputs and a float comparison per element, serially (~5 ns an element measured on the
2-core development machines, 17-19% of a bf16 BERT step). This op draws 8 random bytes per
``random_()`` call instead and decides almost every element from its own byte:

    drop iff  U < T,   U = 40-bit uniform = (byte << 32) | low,   T = round(p * 2**40)

With ``h = T >> 32`` and ``l = T & (2**32 - 1)``: a byte above ``h`` keeps its element, one
below drops it, and only a byte equal to ``h`` (probability 1/256) needs ``low``: 32 more
random bits, drawn for those elements alone. The outcome is exactly ``U < T`` for a uniform
40-bit ``U``, so the drop probability is ``round(p * 2**40) / 2**40`` (within 2**-41 of p)
for every p, not a 1/256 or 1/65536 approximation, and elements are independent (each
decided by its own byte and, when needed, its own fresh 32 bits).

Quantisation, exactly: ``P(drop) = round(p * 2**40) / 2**40``; kept values are scaled by
``1 / (1 - p)`` with the p asked for, as torch's dropout scales them (its ``mask / (1 - p)``
computed in the tensor's dtype: bitwise torch's values wherever both keep an element, in
fp32, bf16 and fp16 alike; in bf16 that scale rounds to 1.109375 for p = 0.1, 0.16 % under
1/0.9, in torch and here). ``p = 0`` is the identity, ``p = 1`` gives zeros.

Bits come from torch's default CPU generator (``random_`` over the full 64-bit range), so
``torch.manual_seed`` and mixft's checkpointed RNG state (``mixft.rng``) decide every mask:
a resumed run draws the same masks. The stream differs from ``nn.Dropout``'s: same
distribution, different masks. The mask is kept as uint8 (1 byte an element, as torch's
bool mask) for the backward, which reuses it.

Usage::

    y = fast_dropout(x, p=0.1, training=model.training)
"""

from __future__ import annotations

import functools
import math

import torch

from mixft.errors import UsageError

LANE_BITS = 8  # random bits that decide an element in the common case
TIE_BITS = 32  # extra bits drawn for an element whose byte ties the threshold
RESOLUTION_BITS = LANE_BITS + TIE_BITS  # P(drop) is a multiple of 2**-40

_BYTES = 8  # bytes per int64 draw
_ONES = 0x0101010101010101  # 0x01 in every byte of a word
_FULL_64 = -(2**63)  # random_(from=INT64_MIN, to=None): every 64-bit pattern equally likely


def check_p(p: float) -> float:
    """``p`` as a float in [0, 1], or a one-line UsageError. Usage: ``p = check_p(p)``"""
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= float(p) <= 1.0 or math.isnan(p):
        raise UsageError(f"dropout probability must be a number in [0, 1], got {p!r}")
    return float(p)


def drop_threshold(p: float) -> int:
    """``T = round(p * 2**40)``: an element drops when its 40-bit uniform is below T."""
    return round(check_p(p) * 2**RESOLUTION_BITS)


def drop_probability(p: float) -> float:
    """The drop probability the masks really have: ``round(p * 2**40) / 2**40``."""
    return drop_threshold(p) / 2**RESOLUTION_BITS


def _random_words(n: int, generator: torch.Generator | None) -> torch.Tensor:
    # Full-range int64: plain random_() on int64 leaves the sign bit 0 (63 bits).
    return torch.empty(n, dtype=torch.int64).random_(_FULL_64, None, generator=generator)


def keep_mask(numel: int, p: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """A flat uint8 tensor of ``numel`` 0/1: 1 (keep) with probability exactly 1 - round(p*2**40)/2**40.

    Usage: ``keep = keep_mask(x.numel(), 0.1).view(x.shape)``
    """
    threshold = drop_threshold(p)
    if threshold >= 2**RESOLUTION_BITS:  # p == 1 (or within 2**-41 of it): everything drops
        return torch.zeros(numel, dtype=torch.uint8)
    high, low = threshold >> TIE_BITS, threshold & (2**TIE_BITS - 1)  # high in [0, 255]
    words = _random_words(-(-numel // _BYTES), generator)
    lanes = words.view(torch.uint8)  # 8 independent uniform bytes per word
    # byte > high -> 1, else 0; clamp-and-subtract on uint8 is vectorised, where a
    # comparison (bool output) costs ~15x more here.
    keep = lanes.clamp(high, high + 1).sub_(high) if high < 255 else torch.zeros_like(lanes)
    # Ties (byte == high) are rare: find the words holding one (a zero byte after
    # subtracting `high` from every byte, mod 256), then the bytes inside those words.
    shifted = lanes.sub(high).clamp_(max=1)  # 0 exactly at a tie, 1 elsewhere
    tie_words = (shifted.view(torch.int64) != _ONES).nonzero().squeeze(1)
    if tie_words.numel():
        row, col = (lanes.view(-1, _BYTES)[tie_words] == high).nonzero(as_tuple=True)
        positions = tie_words[row] * _BYTES + col
        k = positions.numel()
        # The tie's next 32 bits (signed int32 lanes of fresh draws): keep iff low bits >= l.
        extra = _random_words(-(-k // 2), generator).view(torch.int32)[:k]
        keep[positions] = (extra >= low - 2**31).to(torch.uint8)
    return keep[:numel]


class _FastDropoutFunction(torch.autograd.Function):
    """y = x * keep / (1 - p); dy/dx uses the same keep (saved as uint8, 1 byte an element)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, p: float) -> torch.Tensor:
        keep = keep_mask(x.numel(), p).view(x.shape)
        scale = torch_scale(p, x.dtype)
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return _apply(x, keep, scale)

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        (keep,) = ctx.saved_tensors
        return _apply(grad_out, keep, ctx.scale), None


@functools.lru_cache(maxsize=64)
def torch_scale(p: float, dtype: torch.dtype) -> float:
    """What torch's dropout multiplies a kept element by: ``1 / (1 - p)`` computed (and rounded) in ``dtype``.

    (``aten::dropout`` on the CPU: ``noise = bernoulli(1 - p).div_(1 - p)`` in the input's dtype,
    then ``input * noise``.) Usage: ``torch_scale(0.1, torch.bfloat16)  # 1.109375``
    """
    return torch.ones((), dtype=dtype).div_(1.0 - p).item()


def _apply(x: torch.Tensor, keep: torch.Tensor, scale: float) -> torch.Tensor:
    # Convert the 0/1 bytes to x's dtype first: a mixed-dtype multiply (uint8 or bool by
    # bf16) runs a non-vectorised casting loop, ~4x slower than convert + multiply.
    # x * keep is exact; times torch's own scale (a value of x's dtype) it rounds once, as
    # torch's input * noise does: the same bits.
    return torch.mul(x, keep.to(x.dtype)).mul_(scale)


def fast_dropout(x: torch.Tensor, p: float = 0.5, training: bool = True) -> torch.Tensor:
    """Dropout with ``keep_mask``'s masks on CPU tensors; torch's dropout anywhere else.

    Identity when not ``training`` or ``p == 0``; zeros (same dtype, still differentiable)
    when ``p == 1``. Dtype and shape are kept.

    Usage: ``y = fast_dropout(x, 0.1, training=self.training)``
    """
    p = check_p(p)
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or not x.is_floating_point():
        # CUDA's dropout is already one fused kernel; other devices keep torch's semantics.
        return torch.nn.functional.dropout(x, p, training)
    if p == 1.0:
        return x * 0.0
    return _FastDropoutFunction.apply(x, p)
