"""What the loop and evaluation do with one batch: move it to the device, split it, call the model.

A batch is either a mapping with a ``labels`` key (the rest is passed to
``model(**inputs)``, as Hugging Face collators produce) or an ``(inputs, labels)`` pair
(passed as ``model(inputs)``).

Usage::

    inputs, labels = split_batch(batch, device)
    outputs = forward(model, inputs)
    n = batch_size(labels)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import torch
from torch import nn


def split_batch(batch, device: torch.device):
    """(inputs, labels) on the device. Copies are non-blocking: pinned memory overlaps them.

    Usage: ``inputs, labels = split_batch({"input_ids": ids, "labels": y}, device)``
    """
    if isinstance(batch, Mapping):
        batch = {k: _to(v, device) for k, v in batch.items()}
        labels = batch.pop("labels")
        return batch, labels
    if isinstance(batch, (list, tuple)) and len(batch) == 2:
        return _to(batch[0], device), _to(batch[1], device)
    raise TypeError(
        f"a batch must be a mapping with a 'labels' key or an (inputs, labels) pair, got {type(batch).__name__}"
    )


def forward(model: nn.Module, inputs):
    """``model(**inputs)`` for a mapping, ``model(inputs)`` otherwise.

    Usage: ``outputs = forward(model, inputs)``
    """
    return model(**inputs) if isinstance(inputs, Mapping) else model(inputs)


def batch_size(labels) -> int:
    """Samples in a batch, counted from its labels (a 0-d label is one sample).

    Usage: ``batch_size(torch.zeros(8)) == 8``
    """
    return int(labels.shape[0]) if isinstance(labels, torch.Tensor) and labels.dim() > 0 else 1


def _to(value, device: torch.device):
    if isinstance(value, torch.Tensor):
        return value.to(device, non_blocking=True)
    return value


def floating_tensors(obj) -> Iterator[torch.Tensor]:
    """Every non-empty floating tensor anywhere in a module's output or inputs (tuples, ModelOutput, dicts).

    Usage: ``peak = max(t.abs().max().item() for t in floating_tensors(outputs))``
    """
    if isinstance(obj, torch.Tensor):
        if obj.is_floating_point() and obj.numel():
            yield obj
    elif isinstance(obj, Mapping):
        for v in obj.values():
            yield from floating_tensors(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from floating_tensors(v)
