"""Embedding gradients built from the rows a batch used, in a buffer kept between steps (CPU).

Why: an embedding's dense backward allocates a zero ``[num_embeddings, dim]`` tensor every
step and adds the batch's rows into it. For a BERT vocabulary that is a 47 MB (MiniLM) to
94 MB (BERT-base) block per step, and glibc hands allocations that large back to the OS on
free, so every step also pays the page faults of fresh memory. Here the gradient lives in
one buffer for the run: the first backward after ``.grad = None`` zeroes it (memory already
mapped: no page faults) and adds the batch's rows into it.

The dense path's semantics are kept in every case:

* the values are bit-identical to torch's dense backward: each lookup's backward sums its
  tokens' gradient rows per vocabulary row in token order, starting from zero (what
  ``embedding_dense_backward`` does on the CPU); autograd adds two lookups' coalesced sums
  row by row and accumulates later micro-batches into the buffer, as it would the dense
  tensors. The optimizer, clipping, the finite check and the scaler see an ordinary dense
  ``.grad``;
* after ``.grad = None`` the next backward's gradient is that backward's sum and nothing
  else: the buffer is zeroed whole, so whatever was written into it outside backward (an
  inf by a callback, gradient noise, through ``.data`` or numpy too) is gone, as it is with
  a fresh tensor;
* a gradient taken from ``.grad`` earlier is never written again: when anyone still holds
  the buffer (the tensor, or a view of its memory) a fresh one is allocated instead, as the
  dense backward would.

(Issue 28: the buffer used to be cleaned only in the rows the last step wrote, so a value
written elsewhere survived into every later step; cleaning by rows measured no faster than
zeroing whole, and the gradient norm and clip reading only the written rows measured within
the machine's noise: both removed. docs/benchmarks.md has the ablation.)

What it covers: exact ``nn.Embedding`` modules whose weight is trained, sits on the CPU and
is not shared with another module (a tied output layer adds a dense gradient: left alone),
without ``max_norm`` or ``scale_grad_by_freq``. Under DDP the reducer expects dense
gradients: the run layer does not apply it there, nor on CUDA (a zero fill is one fast
kernel there).

Usage::

    handle = use_row_embedding_grad(model)   # or: with use_row_embedding_grad(model): ...
    ...train...
    handle.remove()                          # back to nn.Embedding and dense gradients
"""

from __future__ import annotations

import sys

import torch
from torch import nn

__all__ = ["RowGradEmbedding", "RowGradHandle", "use_row_embedding_grad"]


class _LookupWithRowGrad(torch.autograd.Function):
    """``F.embedding`` whose weight gradient is a coalesced sparse tensor: one summed row per id used."""

    @staticmethod
    def forward(ctx, ids: torch.Tensor, weight: torch.Tensor, padding_idx: int | None):
        ctx.save_for_backward(ids)
        ctx.padding_idx = padding_idx
        ctx.weight_shape = weight.shape
        return nn.functional.embedding(ids, weight, padding_idx)

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        (ids,) = ctx.saved_tensors
        flat_ids = ids.reshape(-1)
        values = grad_out.reshape(flat_ids.numel(), -1)
        if ctx.padding_idx is not None:  # the padding row gets no gradient, as in torch's backward
            keep = flat_ids != ctx.padding_idx
            flat_ids, values = flat_ids[keep], values[keep]
        return None, coalesced_rows(flat_ids, values, ctx.weight_shape), None


def coalesced_rows(ids: torch.Tensor, values: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """A coalesced sparse gradient: per distinct id, ``0 + values[i1] + values[i2] + ...`` in order.

    ``index_add_`` adds row by row in index order, as torch's dense embedding backward
    does into its zero tensor, so every row's sum has the same bits.
    """
    rows, inverse = torch.unique(ids, return_inverse=True)
    sums = values.new_zeros((rows.numel(), values.shape[1])).index_add_(0, inverse, values)
    return torch.sparse_coo_tensor(rows.unsqueeze(0), sums, shape, is_coalesced=True, check_invariants=False)


class RowGradEmbedding(nn.Embedding):
    """``nn.Embedding`` whose backward hands over only the rows used (see the module docstring)."""

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if not (self.weight.requires_grad and torch.is_grad_enabled()):
            return super().forward(ids)
        return _LookupWithRowGrad.apply(ids, self.weight, self.padding_idx)


class _KeptGradient:
    """The weight's dense gradient buffer, zeroed and reused by the first backward after ``.grad = None``."""

    def __init__(self, weight: nn.Parameter):
        self.weight = weight
        self.buffer: torch.Tensor | None = None
        self.hook = weight.register_post_accumulate_grad_hook(self.after_accumulate)

    def after_accumulate(self, weight: nn.Parameter) -> None:
        # Two lookups in one forward arrive merged (autograd adds coalesced sparse gradients row
        # by row, as it would the dense ones); a later micro-batch is added into the buffer by
        # autograd itself (dense += sparse). Only a sparse .grad is the first backward's.
        grad = weight.grad
        if grad is not None and grad.is_sparse:
            buffer = self._zeroed_buffer()
            buffer.index_add_(0, grad._indices()[0], grad._values())  # 0 + sum: the sum's bits
            weight.grad = buffer

    def _zeroed_buffer(self) -> torch.Tensor:
        if self.buffer is None or _held_elsewhere(self.buffer):
            # First use, or someone kept the old gradient (or a view of it): the dense path would
            # leave it as it is and hand out a new tensor, and so does this.
            self.buffer = torch.zeros_like(self.weight, memory_format=torch.contiguous_format)
        else:
            self.buffer.zero_()  # whole: anything written into it since is gone, as with a fresh tensor
        return self.buffer

    def remove(self) -> None:
        if self.hook is not None:
            self.hook.remove()
            self.hook = None


def _held_elsewhere(tensor: torch.Tensor) -> bool:
    # Three references are ours (the attribute, this argument, getrefcount's own); a view or
    # .data of the tensor holds its storage (ours + the temporary storage object below: two).
    if sys.getrefcount(tensor) > 3:
        return True
    use_count = getattr(torch._C, "_storage_Use_Count", None)
    if use_count is None:  # cannot tell: assume it is held, and allocate (the dense path's cost)
        return True
    return use_count(tensor.untyped_storage()._cdata) > 2


class RowGradHandle:
    """What :func:`use_row_embedding_grad` changed; :meth:`remove` puts it back (idempotent)."""

    def __init__(self):
        self.modules: list[nn.Embedding] = []
        self._kept: list[_KeptGradient] = []

    @property
    def active(self) -> bool:
        return bool(self.modules)

    def remove(self) -> None:
        for module in self.modules:
            if type(module) is RowGradEmbedding:
                module.__class__ = nn.Embedding
        for kept in self._kept:
            kept.remove()
        self.modules, self._kept = [], []

    def __enter__(self) -> RowGradHandle:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


def _shared_weights(model: nn.Module) -> set[int]:
    seen: dict[int, int] = {}
    for _, param in model.named_parameters(remove_duplicate=False):
        seen[id(param)] = seen.get(id(param), 0) + 1
    return {key for key, count in seen.items() if count > 1}


def use_row_embedding_grad(model: nn.Module) -> RowGradHandle:
    """Give ``model``'s eligible embeddings row gradients in a kept buffer until the handle is removed.

    Eligible: exact ``nn.Embedding``, trained CPU weight used by no other module, no
    ``max_norm``, no ``scale_grad_by_freq``, not already ``sparse``. Others are left alone.
    """
    handle = RowGradHandle()
    shared = _shared_weights(model)
    for module in model.modules():
        weight = getattr(module, "weight", None)
        if (
            type(module) is nn.Embedding
            and weight is not None
            and weight.requires_grad
            and weight.device.type == "cpu"
            and id(weight) not in shared
            and module.max_norm is None
            and not module.scale_grad_by_freq
            and not module.sparse
        ):
            module.__class__ = RowGradEmbedding
            handle.modules.append(module)
            handle._kept.append(_KeptGradient(weight))
    return handle
