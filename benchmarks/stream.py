"""The recipe's real training stream: the shapes a run sees, in order, and how much of them is padding.

One batch repeated (``timing.SameBatch``) times a step whose shapes never change; a run does not
see that. Packed batches bring a new (rows x row length) nearly every step, and a kernel library
that sets kernels up per new shape (oneDNN's bf16 path) pays for it on every step (issue 41).
These helpers describe the stream the benchmarks' stream modes train on:

- :func:`epoch_shapes`: one pass over a loader, collation only (no model): its batches, the
  distinct (rows, row length) among them, real and computed tokens, so padding efficiency;
- :func:`median_batch`: the batch of a stretch of the stream with the median computed tokens
  (the fixed batch to set beside the stream: like shapes, repeated);
- :class:`LinearInputs`: the distinct input shapes the model's ``nn.Linear`` layers saw while
  training (what the matmul kernels were asked for);
- :class:`Batches`: the next ``count`` batches of a running stream, as a loader.

Usage::

    epoch = epoch_shapes(parts.train_loader)
    epoch.distinct, epoch.padding_efficiency      # 57 shapes of 63 batches, 0.96
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import torch
from torch import nn

from mixft.data.packing import is_packed, samples_in


def _main_tensor(batch) -> torch.Tensor | None:
    """``input_ids`` of a mapping batch, else its first tensor."""
    if isinstance(batch, Mapping):
        ids = batch.get("input_ids")
        return ids if isinstance(ids, torch.Tensor) else next((v for v in batch.values() if torch.is_tensor(v)), None)
    items = batch if isinstance(batch, (tuple, list)) else [batch]
    return next((v for v in items if torch.is_tensor(v)), None)


def batch_work(batch) -> tuple[tuple[int, ...], int, int, int]:
    """(shape of the computed ids, sentences, real tokens, computed tokens) of one batch.

    Real tokens are the attention mask's ones (every element when the batch has no mask);
    computed tokens are the ids tensor's elements: padding included.
    """
    ids = _main_tensor(batch)
    shape = tuple(ids.shape) if ids is not None else ()
    computed = int(ids.numel()) if ids is not None else 0
    mask = batch.get("attention_mask") if isinstance(batch, Mapping) else None
    real = int(mask.sum()) if isinstance(mask, torch.Tensor) else computed
    if isinstance(batch, Mapping) and "input_ids" in batch:
        sentences = samples_in(batch)
    else:
        sentences = shape[0] if shape else 0
    return shape, sentences, real, computed


@dataclass
class EpochShapes:
    """What one epoch of a loader computes: its batch shapes and tokens."""

    packed: bool
    batches: int = 0
    sentences: int = 0
    real_tokens: int = 0
    computed_tokens: int = 0
    shapes: Counter = field(default_factory=Counter)  # (rows, row length) -> batches of that shape

    @property
    def distinct(self) -> int:
        """Distinct (rows, row length): each a new shape for every matmul of the step."""
        return len(self.shapes)

    @property
    def padding_efficiency(self) -> float | None:
        """Real tokens over computed tokens (1.0: no padding)."""
        return self.real_tokens / self.computed_tokens if self.computed_tokens else None

    def describe(self) -> str:
        kind = "packed rows" if self.packed else "padded batches"
        eff = f"{self.padding_efficiency:.3f}" if self.padding_efficiency is not None else "n/a"
        return (
            f"{kind}: {self.batches} batches of {self.sentences} sentences, {self.distinct} distinct "
            f"(rows x row length), padding efficiency {eff} ({self.real_tokens} real / "
            f"{self.computed_tokens} computed tokens)"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "packed": self.packed,
            "batches": self.batches,
            "sentences": self.sentences,
            "real_tokens": self.real_tokens,
            "computed_tokens": self.computed_tokens,
            "distinct_shapes": self.distinct,
            "padding_efficiency": self.padding_efficiency,
            "shapes": {"x".join(map(str, k)): v for k, v in sorted(self.shapes.items())},
        }


def epoch_shapes(batches: Iterable) -> EpochShapes:
    """One pass over ``batches`` (a loader: epoch 0 of its sampler), counting shapes and tokens.

    Usage: ``epoch_shapes(parts.train_loader).distinct``
    """
    epoch = None
    for batch in batches:
        if epoch is None:
            epoch = EpochShapes(packed=is_packed(batch))
        shape, sentences, real, computed = batch_work(batch)
        epoch.batches += 1
        epoch.sentences += sentences
        epoch.real_tokens += real
        epoch.computed_tokens += computed
        epoch.shapes[shape] += 1
    return epoch if epoch is not None else EpochShapes(packed=False)


def median_batch(batches: list):
    """The batch with the median computed tokens (the lower middle one of an even count).

    Usage: ``SameBatch(median_batch(first_batches), steps)``: like shapes, repeated.
    """
    if not batches:
        raise ValueError("no batches to choose from")
    ranked = sorted(range(len(batches)), key=lambda i: (batch_work(batches[i])[3], i))
    return batches[ranked[(len(ranked) - 1) // 2]]


class LinearInputs:
    """Distinct input shapes (rows, in_features) of every ``nn.Linear`` call while the model trains.

    Usage: ``with LinearInputs(model) as seen: trainer.fit(); seen.distinct, seen.calls``
    """

    def __init__(self, model: nn.Module):
        self.model = model
        self.shapes: Counter = Counter()
        self._handles: list = []

    @property
    def distinct(self) -> int:
        return len(self.shapes)

    @property
    def calls(self) -> int:
        return sum(self.shapes.values())

    def __enter__(self) -> LinearInputs:
        def record(module: nn.Linear, args) -> None:
            x = args[0] if args else None
            if module.training and isinstance(x, torch.Tensor):
                self.shapes[(x.numel() // module.in_features, module.in_features)] += 1

        self._handles = [m.register_forward_pre_hook(record) for m in self.model.modules() if isinstance(m, nn.Linear)]
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []


class Batches:
    """The next ``count`` batches of a running iterator, as a loader (``len`` and iteration).

    Usage: ``stream = iter(loader); trainer.train_loader = Batches(stream, 3)``
    """

    def __init__(self, stream: Iterator, count: int):
        self.stream, self.count = stream, count

    def __len__(self) -> int:
        return self.count

    def __iter__(self):
        return islice(self.stream, self.count)


def step_work(step_shapes: list[list[tuple[int, ...]]], step_samples: list[int]) -> list[list[tuple[int, ...]]]:
    """``StepTimer``'s per-step shapes with each step's sentences added where a step is one forward.

    A packed row holds several sentences, and ``benchmarks.bert.bert_matmul_flops`` counts the
    last layer's [CLS] work per sentence: ``(rows, length)`` becomes ``(rows, length, sentences)``.
    """
    out = []
    for shapes, samples in zip(step_shapes, step_samples):
        out.append([(*shapes[0][:2], samples)] if len(shapes) == 1 else list(shapes))
    return out
