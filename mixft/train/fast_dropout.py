"""Faster CPU dropout for training: a drop-in ``nn.Dropout`` and a reversible swap into a model.

The masks come from :mod:`mixft.train.fast_dropout`: one random byte per element, resolved
exactly to a drop probability of ``round(p * 2**40) / 2**40`` (see its docstring), drawn
from torch's default generator so seeds and checkpointed RNG state decide them. Kept values
are scaled by ``1 / (1 - p)``, the backward reuses the forward's mask, eval mode is the
identity and dtypes (fp32, bf16, fp16) are kept.

What ``use_fast_dropout`` covers in a Hugging Face model:
  * every exact ``nn.Dropout`` module (embeddings, hidden states, the recipes' heads):
    its class becomes :class:`FastDropout` (same object, same ``p``, hooks kept);
  * attention-probability dropout where the config's attention is ``"sdpa"`` (the
    default): on CPU with dropout, torch's SDPA runs its math kernel and draws the mask
    with ``bernoulli_`` inside, where it cannot be reached, so the config is pointed at
    :mod:`mixft.train.fast_dropout`'s equivalent of sdpa with the fast mask.
What it leaves to torch: ``"eager"`` attention (the model's own function calls
``nn.functional.dropout``), dropout called as a function with a float ``p`` in model code,
``nn.Dropout`` subclasses, in-place dropout, and anything on CUDA (torch's CUDA dropout is
already one fused kernel: the model is returned untouched).

Usage::

    with use_fast_dropout(model):       # or: handle = use_fast_dropout(model); ...; handle.remove()
        loss = loss_fn(model(**batch), labels)
        loss.backward()

One concept, one module, in three parts (read top to bottom): the mask op (``fast_dropout``:
one random byte per element, exact to 2**-40), the sdpa attention function that uses it on
the attention probabilities (``FAST_SDPA``), and the module swap (``FastDropout``,
``use_fast_dropout``). Each part's own notes head its section below.
"""

from __future__ import annotations

import functools
import math
import sys

import torch
from torch import nn

from mixft.errors import UsageError
from mixft.log import logger

__all__ = [
    "FAST_SDPA",
    "FastDropout",
    "FastDropoutHandle",
    "drop_probability",
    "fast_dropout",
    "keep_mask",
    "register_fast_sdpa",
    "use_fast_dropout",
]


# ==========================================================================================
# The mask op: fast_dropout
#
# Dropout masks from one random byte per element, exact to 2**-40: the op behind ``FastDropout``.
#
# Why: on CPU, torch's dropout draws its mask with ``bernoulli_``: one or two Mersenne-Twister
# outputs and a float comparison per element, serially (~5 ns an element measured on the
# 2-core development machines, 17-19% of a bf16 BERT step). This op draws 8 random bytes per
# ``random_()`` call instead and decides almost every element from its own byte:
#
#     drop iff  U < T,   U = 40-bit uniform = (byte << 32) | low,   T = round(p * 2**40)
#
# With ``h = T >> 32`` and ``l = T & (2**32 - 1)``: a byte above ``h`` keeps its element, one
# below drops it, and only a byte equal to ``h`` (probability 1/256) needs ``low``: 32 more
# random bits, drawn for those elements alone. The outcome is exactly ``U < T`` for a uniform
# 40-bit ``U``, so the drop probability is ``round(p * 2**40) / 2**40`` (within 2**-41 of p)
# for every p, not a 1/256 or 1/65536 approximation, and elements are independent (each
# decided by its own byte and, when needed, its own fresh 32 bits).
#
# Quantisation, exactly: ``P(drop) = round(p * 2**40) / 2**40``; kept values are scaled by
# ``1 / (1 - p)`` with the p asked for, as torch's dropout scales them (its ``mask / (1 - p)``
# computed in the tensor's dtype: bitwise torch's values wherever both keep an element, in
# fp32, bf16 and fp16 alike; in bf16 that scale rounds to 1.109375 for p = 0.1, 0.16 % under
# 1/0.9, in torch and here). ``p = 0`` is the identity, ``p = 1`` gives zeros.
#
# Bits come from torch's default CPU generator (``random_`` over the full 64-bit range), so
# ``torch.manual_seed`` and mixft's checkpointed RNG state (``mixft.rng``) decide every mask:
# a resumed run draws the same masks. The stream differs from ``nn.Dropout``'s: same
# distribution, different masks. The mask is kept as uint8 (1 byte an element, as torch's
# bool mask) for the backward, which reuses it.
#
# Usage::
#
#     y = fast_dropout(x, p=0.1, training=model.training)
# ==========================================================================================

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


# ==========================================================================================
# Attention: sdpa with fast_dropout on the probabilities (FAST_SDPA)
#
# Hugging Face "sdpa" attention with ``fast_dropout`` on the attention probabilities (CPU training).
#
# Why a separate attention function: in transformers 5.x BERT-style models do not call their
# ``attention.self.dropout`` module; they pass its ``p`` to the attention function. With
# ``attn_implementation="sdpa"`` (the default) that is ``torch.nn.functional.
# scaled_dot_product_attention(dropout_p=p)``, and on CPU with ``dropout_p > 0`` torch runs
# its *math* kernel (``aten::_scaled_dot_product_attention_math``: matmul, softmax,
# ``aten::dropout`` -> ``bernoulli_``, matmul), not a fused one. The mask inside SDPA cannot
# be replaced from outside, so this function computes the same math itself with
# ``fast_dropout`` in place of ``aten::dropout``; with ``"eager"`` attention the model calls
# ``nn.functional.dropout`` inside its own function, which is left as it is.
#
# It is registered under :data:`FAST_SDPA` with sdpa's mask builder, so the model receives
# exactly the mask sdpa would (bool, True = attend, or None), and it hands the call to
# transformers' own ``sdpa_attention_forward`` unchanged whenever its shortcut does not
# apply: no dropout (eval mode passes 0), a non-CPU tensor, or anything beyond plain
# attention (a cache, position bias, softcap, grouped key/value heads, attention outputs).
#
# Usage::
#
#     register_fast_sdpa()
#     config._attn_implementation_internal = FAST_SDPA   # what mixft.train.fast_dropout.use_fast_dropout does
# ==========================================================================================

FAST_SDPA = "mixft_fast_dropout_sdpa"

# Arguments of sdpa_attention_forward that mean "more than plain attention": hand those over.
_DELEGATED = ("position_bias", "cache", "softcap")


def attention_math(
    query, key, value, attention_mask, dropout: float, scaling: float | None, is_causal: bool, training: bool = True
) -> torch.Tensor:
    """softmax(q k^T * scaling + mask) -> fast_dropout -> @ v, in (batch, heads, q_len, head_dim).

    Computed as torch's CPU math kernel (``aten::_scaled_dot_product_attention_math``)
    computes it, op for op, with :func:`fast_dropout` in place of ``aten::dropout``:

    * under autocast the inputs are first cast to autocast's dtype (what autocast does to
      sdpa's arguments), and the kernel's own ops then run outside autocast;
    * bf16/fp16 inputs are computed in float32 (the kernel "keeps query, key, value in high
      precision for accuracy") and the result cast back, so the probabilities, their
      dropout and both matmuls are fp32, as in torch; computed in bf16 instead, the output's
      error against float64 was several times torch's own (docs/benchmarks.md);
    * the scale goes half on the query and half on the keys (``q * sqrt(s) @ (k^T * sqrt(s))``)
      and a bool mask becomes an additive 0/-inf mask: the same roundings as torch's.

    With torch's dropout in place of ``fast_dropout`` the result (and its gradients) are
    bitwise torch's sdpa (tests/test_dropout.py). ``attention_mask``: bool (True = attend, as
    sdpa takes it), additive float, or None; ``is_causal`` (with no mask) applies the
    upper-left causal mask sdpa uses. Rows with no key to attend come out 0 (``_safe_softmax``).

    Usage: ``out = attention_math(q, k, v, None, 0.1, None, is_causal=False)``
    """
    if torch.is_autocast_enabled("cpu") and query.device.type == "cpu":
        low = torch.get_autocast_dtype("cpu")
        query, key, value = (t.to(low) if t.is_floating_point() else t for t in (query, key, value))
        if attention_mask is not None and attention_mask.is_floating_point():
            attention_mask = attention_mask.to(low)
    origin = query.dtype
    with torch.autocast(query.device.type, enabled=False):
        if origin in (torch.float16, torch.bfloat16):
            query, key, value = query.float(), key.float(), value.float()
        scale = scaling if scaling is not None else query.shape[-1] ** -0.5
        root = math.sqrt(abs(scale))
        scores = torch.matmul(query * (root if scale >= 0 else -root), key.transpose(-2, -1) * root)
        if is_causal:  # sdpa's rule: only without a mask
            attention_mask = torch.ones(query.shape[-2], key.shape[-2], dtype=torch.bool, device=query.device).tril()
        if attention_mask is not None:
            if attention_mask.dtype == torch.bool:  # sdpa's conversion: 0 where attended, -inf elsewhere
                attention_mask = torch.zeros(attention_mask.shape, dtype=query.dtype, device=query.device).masked_fill_(
                    ~attention_mask, float("-inf")
                )
            scores = scores + attention_mask
        probs = torch._safe_softmax(scores, -1)  # what sdpa's math kernel uses: all-masked rows -> 0
        probs = fast_dropout(probs, dropout, training)
        return torch.matmul(probs, value).to(origin)


def fast_sdpa_attention_forward(
    module: torch.nn.Module,
    query,
    key,
    value,
    attention_mask,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
):
    """A drop-in for transformers' ``sdpa_attention_forward`` (same arguments, same return)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    plain = (
        dropout > 0.0
        and query.device.type == "cpu"
        and getattr(module, "num_key_value_groups", 1) == 1
        and all(kwargs.get(name) is None for name in _DELEGATED)
        and not kwargs.get("output_attentions", False)
    )
    q_len = query.shape[2]
    # sdpa_attention_forward's rule: causal only without a mask, and never for one query.
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    causal = bool(q_len > 1 and attention_mask is None and causal)
    if not plain or (causal and key.shape[2] != q_len):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
        )
    out = attention_math(query, key, value, attention_mask, dropout, scaling, causal, training=True)
    return out.transpose(1, 2).contiguous(), None


def register_fast_sdpa() -> str:
    """Register :func:`fast_sdpa_attention_forward` and sdpa's mask builder under ``FAST_SDPA``.

    Adds one name to transformers' global tables (idempotent); nothing else changes.
    Usage: ``config._attn_implementation_internal = register_fast_sdpa()``
    """
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(FAST_SDPA, fast_sdpa_attention_forward)
    AttentionMaskInterface.register(FAST_SDPA, sdpa_mask)
    return FAST_SDPA


# ==========================================================================================
# The module swap: FastDropout, use_fast_dropout
#
# Faster CPU dropout for training: a drop-in ``nn.Dropout`` and a reversible swap into a model.
#
# The masks come from :mod:`mixft.train.fast_dropout`: one random byte per element, resolved
# exactly to a drop probability of ``round(p * 2**40) / 2**40`` (see its docstring), drawn
# from torch's default generator so seeds and checkpointed RNG state decide them. Kept values
# are scaled by ``1 / (1 - p)``, the backward reuses the forward's mask, eval mode is the
# identity and dtypes (fp32, bf16, fp16) are kept.
#
# What ``use_fast_dropout`` covers in a Hugging Face model:
#   * every exact ``nn.Dropout`` module (embeddings, hidden states, the recipes' heads):
#     its class becomes :class:`FastDropout` (same object, same ``p``, hooks kept);
#   * attention-probability dropout where the config's attention is ``"sdpa"`` (the
#     default): on CPU with dropout, torch's SDPA runs its math kernel and draws the mask
#     with ``bernoulli_`` inside, where it cannot be reached, so the config is pointed at
#     :mod:`mixft.train.fast_dropout`'s equivalent of sdpa with the fast mask.
# What it leaves to torch: ``"eager"`` attention (the model's own function calls
# ``nn.functional.dropout``), dropout called as a function with a float ``p`` in model code,
# ``nn.Dropout`` subclasses, in-place dropout, and anything on CUDA (torch's CUDA dropout is
# already one fused kernel: the model is returned untouched).
#
# Usage::
#
#     with use_fast_dropout(model):       # or: handle = use_fast_dropout(model); ...; handle.remove()
#         loss = loss_fn(model(**batch), labels)
#         loss.backward()
# ==========================================================================================


class FastDropout(nn.Dropout):
    """``nn.Dropout`` with :func:`fast_dropout`'s masks (CPU training; torch's dropout elsewhere).

    Usage: ``layer = FastDropout(0.1); y = layer(x)``
    """

    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__(check_p(p), inplace)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.inplace:  # an in-place mask multiply does not fit the saved-mask backward
            return super().forward(x)
        return fast_dropout(x, self.p, self.training)


class FastDropoutHandle:
    """What :func:`use_fast_dropout` changed, and :meth:`remove` to put it back (idempotent).

    ``modules``: the ``nn.Dropout`` objects now running as ``FastDropout``;
    ``attention_configs``: the configs whose sdpa attention now uses the fast mask.
    A context manager: leaving the block removes the swap, also on an exception.
    """

    def __init__(self):
        self.modules: list[nn.Module] = []
        self.attention_configs: list[object] = []
        self._original_attention: list[str] = []

    @property
    def active(self) -> bool:
        return bool(self.modules or self.attention_configs)

    def remove(self) -> None:
        """Undo the swap: every module back to ``nn.Dropout``, every config back to its attention."""
        for module in self.modules:
            if type(module) is FastDropout:
                module.__class__ = nn.Dropout
        for config, original in zip(self.attention_configs, self._original_attention):
            if getattr(config, "_attn_implementation_internal", None) == FAST_SDPA:
                config._attn_implementation_internal = original
        self.modules, self.attention_configs, self._original_attention = [], [], []

    def __enter__(self) -> FastDropoutHandle:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


def _model_device(model: nn.Module) -> torch.device | None:
    tensor = next(model.parameters(), None)
    if tensor is None:
        tensor = next(model.buffers(), None)
    return None if tensor is None else tensor.device


def _hf_configs(model: nn.Module) -> list[object]:
    """The distinct Hugging Face configs the model's modules hold (none if transformers is not loaded)."""
    if "transformers" not in sys.modules:  # no transformers imported: no Hugging Face model here
        return []
    from transformers import PretrainedConfig

    seen: dict[int, object] = {}
    for module in model.modules():
        config = getattr(module, "config", None)
        if isinstance(config, PretrainedConfig):
            seen.setdefault(id(config), config)
    return list(seen.values())


def use_fast_dropout(model: nn.Module, attention: bool = True) -> FastDropoutHandle:
    """Run ``model``'s dropout with fast CPU masks until the handle is removed.

    ``attention=False`` leaves attention-probability dropout to torch. A model whose
    tensors are not on the CPU is left untouched (the handle is then empty). Swapped
    modules keep their identity, ``p``, hooks and ``training`` flag; state dicts are
    unchanged (dropout holds no tensors) and configs save as before.

    Usage: ``with use_fast_dropout(model) as handle: trainer.fit()``
    """
    if not isinstance(model, nn.Module):
        raise UsageError(f"use_fast_dropout needs a torch.nn.Module, got {type(model).__name__}")
    handle = FastDropoutHandle()
    device = _model_device(model)
    if device is not None and device.type != "cpu":
        logger.debug("fast dropout: model on %s, torch's fused dropout kept", device)
        return handle
    try:
        for module in model.modules():
            if type(module) is nn.Dropout:  # subclasses may do more than dropout: left alone
                module.__class__ = FastDropout
                handle.modules.append(module)
        kept_eager = 0  # configs whose attention dropout stays torch's
        for config in _hf_configs(model) if attention else []:
            implementation = getattr(config, "_attn_implementation_internal", None)
            if implementation == "sdpa":
                register_fast_sdpa()
                handle._original_attention.append(implementation)
                handle.attention_configs.append(config)
                config._attn_implementation_internal = FAST_SDPA
            elif implementation not in (None, FAST_SDPA):
                kept_eager += 1
    except BaseException:
        handle.remove()
        raise
    logger.debug(
        "fast dropout: %d dropout modules and %d sdpa attention configs swapped; %d configs with other "
        "attention (eager, flash) keep torch's attention dropout",
        len(handle.modules),
        len(handle.attention_configs),
        kept_eager,
    )
    return handle
