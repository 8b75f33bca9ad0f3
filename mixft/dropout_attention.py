"""Hugging Face "sdpa" attention with ``fast_dropout`` on the attention probabilities (CPU training).

Why a separate attention function: in transformers 5.x BERT-style models do not call their
``attention.self.dropout`` module; they pass its ``p`` to the attention function. With
``attn_implementation="sdpa"`` (the default) that is ``torch.nn.functional.
scaled_dot_product_attention(dropout_p=p)``, and on CPU with ``dropout_p > 0`` torch runs
its *math* kernel (``aten::_scaled_dot_product_attention_math``: matmul, softmax,
``aten::dropout`` -> ``bernoulli_``, matmul), not a fused one. The mask inside SDPA cannot
be replaced from outside, so this function computes the same math itself with
``fast_dropout`` in place of ``aten::dropout``; with ``"eager"`` attention the model calls
``nn.functional.dropout`` inside its own function, which is left as it is.

It is registered under :data:`FAST_SDPA` with sdpa's mask builder, so the model receives
exactly the mask sdpa would (bool, True = attend, or None), and it hands the call to
transformers' own ``sdpa_attention_forward`` unchanged whenever its shortcut does not
apply: no dropout (eval mode passes 0), a non-CPU tensor, or anything beyond plain
attention (a cache, position bias, softcap, grouped key/value heads, attention outputs).

Usage::

    register_fast_sdpa()
    config._attn_implementation_internal = FAST_SDPA   # what mixft.dropout.use_fast_dropout does
"""

from __future__ import annotations

import math

import torch

from mixft.dropout_kernel import fast_dropout

FAST_SDPA = "mixft_fast_dropout_sdpa"

# Arguments of sdpa_attention_forward that mean "more than plain attention": hand those over.
_DELEGATED = ("position_bias", "cache", "softcap")


def attention_math(query, key, value, attention_mask, dropout: float, scaling: float | None, is_causal: bool,
                   training: bool = True) -> torch.Tensor:
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
                attention_mask = torch.zeros(attention_mask.shape, dtype=query.dtype,
                                             device=query.device).masked_fill_(~attention_mask, float("-inf"))
            scores = scores + attention_mask
        probs = torch._safe_softmax(scores, -1)  # what sdpa's math kernel uses: all-masked rows -> 0
        probs = fast_dropout(probs, dropout, training)
        return torch.matmul(probs, value).to(origin)


def fast_sdpa_attention_forward(module: torch.nn.Module, query, key, value, attention_mask,
                                dropout: float = 0.0, scaling: float | None = None,
                                is_causal: bool | None = None, **kwargs):
    """A drop-in for transformers' ``sdpa_attention_forward`` (same arguments, same return)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    plain = (dropout > 0.0 and query.device.type == "cpu"
             and getattr(module, "num_key_value_groups", 1) == 1
             and all(kwargs.get(name) is None for name in _DELEGATED)
             and not kwargs.get("output_attentions", False))
    q_len = query.shape[2]
    # sdpa_attention_forward's rule: causal only without a mask, and never for one query.
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    causal = bool(q_len > 1 and attention_mask is None and causal)
    if not plain or (causal and key.shape[2] != q_len):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, is_causal=is_causal, **kwargs)
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
