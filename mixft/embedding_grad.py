"""Embedding gradients built from the rows a batch used, in a buffer kept between steps (CPU).

Why: an embedding's dense backward allocates a zero ``[num_embeddings, dim]`` tensor every
step and adds the batch's rows into it. For a BERT vocabulary that is a 47 MB (MiniLM) to
94 MB (BERT-base) fill per step, and glibc hands allocations that large back to the OS on
free, so every step also pays the page faults of fresh memory: ~9-19 ms of a ~130 ms bf16
step on a 2-core CPU, for a gradient whose rows are mostly zero (a batch touches a few
hundred of 30,522). Here the gradient lives in one buffer for the whole run; a step writes
the rows its batches used and, before the next step writes, zeroes only those rows.

The values are bit-identical to torch's dense backward: each lookup's backward sums its
tokens' gradient rows per vocabulary row in token order, starting from zero (what
``embedding_dense_backward`` does on the CPU); autograd adds two lookups' coalesced sums row
by row and accumulates later micro-batches into the buffer, as it would the dense tensors. The optimizer,
clipping, the finite check and the scaler see an ordinary dense ``.grad``. The rows a step
wrote (``RowGradHandle.grad_rows``) let the norm and the clip read a few hundred rows; a
dense gradient reaching the weight (used outside the module too) makes them read it whole.

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
    """The weight's dense gradient buffer: reused by the first backward after ``.grad = None``.

    What the dense path guarantees, kept: after ``.grad = None`` the next backward's gradient
    is that backward's sum and nothing else, and a tensor taken from ``.grad`` earlier is
    never written again. So the buffer is reused only when no one else holds it (the tensor
    or a view of its memory: else a fresh one is allocated, as the dense backward does), and
    it is cleaned before the sum goes in: only the rows the last step wrote when nothing but
    mixft wrote into it since (its ``_version``, torch's count of in-place writes, is still
    the one mixft last recorded), otherwise whole. ``clean_by_rows = False`` cleans it whole
    every time (the step ablation's variant).
    """

    clean_by_rows = True

    def __init__(self, weight: nn.Parameter):
        self.weight = weight
        self.buffer: torch.Tensor | None = None
        self.written: torch.Tensor | None = None  # distinct row ids with values in the buffer
        self.incoming: torch.Tensor | None = None  # row ids of this backward, not yet in the buffer
        self.dense_seen = False  # a dense gradient reached the weight: any row may be nonzero
        # buffer._version after the last write mixft knows to keep every row outside `written` zero;
        # None: something else may have written anywhere (the rows are unknown).
        self.clean_version: int | None = None
        self.hooks = [weight.register_hook(self.before_accumulate),
                      weight.register_post_accumulate_grad_hook(self.after_accumulate)]

    def untouched(self) -> bool:
        """Whether only backward and mixft's row-preserving writes reached the buffer since its last check."""
        return self.buffer is not None and self.clean_version is not None and self.buffer._version == self.clean_version

    def before_accumulate(self, grad: torch.Tensor):
        # Two lookups in one forward arrive merged: autograd adds coalesced sparse gradients
        # row by row (Sa + Sb, as it would add the dense ones).
        if grad.is_sparse:
            self.incoming = grad._indices()[0]
        else:  # the weight was also used outside this module (e.g. as an output layer's matrix)
            self.dense_seen = True
        if self.weight.grad is self.buffer and not self.untouched():
            self.clean_version = None  # written between two backwards of one step: rows unknown
        return None

    def after_accumulate(self, weight: nn.Parameter) -> None:
        grad = weight.grad
        if grad is not None and grad.is_sparse:
            # First backward since .grad was set to None: a clean buffer, then 0 + sum: the sum's bits.
            buffer = self._clean_buffer()
            buffer.index_add_(0, grad._indices()[0], grad._values())
            weight.grad = buffer
            self.written, self.dense_seen, self.clean_version = None, False, buffer._version
        elif grad is not self.buffer:  # a gradient mixft did not make (set by hand): not ours to track
            self.incoming = None
            return
        # A later backward of the same step was added into the buffer by autograd (dense += sparse).
        # Kept distinct, so the record stays as small as the rows used, however long .grad lives
        # (a loop that zeroes it in place instead of setting it to None).
        if self.incoming is not None:
            self.written = self.incoming if self.written is None else torch.unique(torch.cat([self.written, self.incoming]))
            self.incoming = None
        if self.dense_seen:
            self.clean_version = None
        elif self.clean_version is not None:
            self.clean_version = self.buffer._version  # this accumulation was backward's own

    def _clean_buffer(self) -> torch.Tensor:
        if self.buffer is None or _held_elsewhere(self.buffer):
            # First use, or someone kept the old gradient (or a view of it): the dense path would
            # leave it as it is and hand out a new tensor, and so does this.
            self.buffer, self.written = torch.zeros_like(self.weight, memory_format=torch.contiguous_format), None
        elif self.clean_by_rows and self.untouched() and self.written is not None:
            self.buffer.index_fill_(0, self.written, 0.0)  # every other row is still zero
        elif self.clean_by_rows and self.untouched():
            pass  # nothing was written since it was zero
        else:
            self.buffer.zero_()
        return self.buffer

    def written_rows(self) -> torch.Tensor | None:
        """The rows of the weight's gradient that can be nonzero (None: unknown, read it all).

        Known only while the buffer is the weight's gradient and nothing but backward and
        mixft wrote into it. The norm of those rows is the whole gradient's up to the order
        of the sum, and scaling them scales the gradient (the other rows are zero).
        """
        if self.weight.grad is not self.buffer or self.written is None or self.dense_seen or not self.untouched():
            return None
        return self.written

    def kept_zero(self) -> None:
        """Say that the writes since the last check kept every row outside the written ones zero
        (the trainer's unscale and clip: a finite scale times zero is zero)."""
        if self.clean_version is not None and self.buffer is not None:
            self.clean_version = self.buffer._version

    def remove(self) -> None:
        for hook in self.hooks:
            hook.remove()
        self.hooks = []


def _held_elsewhere(tensor: torch.Tensor) -> bool:
    # Two references are ours (the attribute, getrefcount's argument); a view or .data of the
    # tensor holds its storage (ours + the temporary storage object below are two).
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

    def grad_rows(self) -> dict[torch.Tensor, object]:
        """``{weight: function}`` giving the rows of its gradient that can be nonzero, for
        ``Trainer.grad_rows`` (norm and clip read a few hundred rows, not the vocabulary)."""
        return {kept.weight: kept.written_rows for kept in self._kept}

    def remove(self) -> None:
        for module in self.modules:
            if type(module) is RowGradEmbedding:
                module.__class__ = nn.Embedding
        for kept in self._kept:
            kept.remove()
        self.modules, self._kept = [], []

    def __enter__(self) -> "RowGradHandle":
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
        if (type(module) is nn.Embedding and weight is not None and weight.requires_grad
                and weight.device.type == "cpu" and id(weight) not in shared and module.max_norm is None
                and not module.scale_grad_by_freq and not module.sparse):
            module.__class__ = RowGradEmbedding
            handle.modules.append(module)
            handle._kept.append(_KeptGradient(weight))
    return handle
