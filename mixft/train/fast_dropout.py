"""Faster CPU dropout for training: a drop-in ``nn.Dropout`` and a reversible swap into a model.

The masks come from :mod:`mixft.dropout_kernel`: one random byte per element, resolved
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
    :mod:`mixft.dropout_attention`'s equivalent of sdpa with the fast mask.
What it leaves to torch: ``"eager"`` attention (the model's own function calls
``nn.functional.dropout``), dropout called as a function with a float ``p`` in model code,
``nn.Dropout`` subclasses, in-place dropout, and anything on CUDA (torch's CUDA dropout is
already one fused kernel: the model is returned untouched).

Usage::

    with use_fast_dropout(model):       # or: handle = use_fast_dropout(model); ...; handle.remove()
        loss = loss_fn(model(**batch), labels)
        loss.backward()
"""

from __future__ import annotations

import sys

import torch
from torch import nn

from mixft.dropout_attention import FAST_SDPA, register_fast_sdpa
from mixft.dropout_kernel import check_p, drop_probability, fast_dropout, keep_mask
from mixft.errors import UsageError
from mixft.log import logger

__all__ = ["FastDropout", "FastDropoutHandle", "drop_probability", "fast_dropout", "keep_mask", "use_fast_dropout"]


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

    def __enter__(self) -> "FastDropoutHandle":
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
    logger.debug("fast dropout: %d dropout modules and %d sdpa attention configs swapped; %d configs with other "
                 "attention (eager, flash) keep torch's attention dropout", len(handle.modules),
                 len(handle.attention_configs), kept_eager)
    return handle
