"""Packed batches: a batch's sentences laid end to end in a few rows, so no compute goes to padding.

A random batch of SST-2 sentences padded to its longest member is two-thirds padding (mean 13
tokens, longest ~50). Grouping sentences by length pads less but changes which sentences share
a batch, and that cost accuracy at small budgets (docs/benchmarks.md, "Accuracy at equal
budget"). Packing keeps the random batch and drops its padding instead: the batch's sentences
are placed first-fit-decreasing into rows as long as its longest sentence, each sentence's
positions restart at 0, and the model attends only within a sentence (a block-diagonal mask,
``mixft.models.packed``). The optimizer step sees the same sentences and, up to float rounding,
the same gradient as the padded batch (tests/data/test_packing.py, tests/models/test_packed.py).

That holds for the encoder families ``mixft.models.packed.PACKING_TYPES`` lists (BERT, DistilBERT,
ELECTRA, RoBERTa, XLM-R), each tested packed against padded (tests/models/test_packed.py):
the model turns the batch's 0-based positions into its own numbering (RoBERTa-likes start at
``padding_idx + 1``: ``mixft.models.positions``). Any other family is not packed: bert-sst2 pads
its batches with a notice, and refuses an explicit ``--pack-sequences`` in one line.

A packed batch, from the padded one (``input_ids`` etc. of shape (B, L), ``labels`` (B,))::

    input_ids, token_type_ids, ...   (R, C)  the token-aligned tensors (TOKEN_KEYS), tokens moved into rows
    attention_mask                   (R, C)  1 on real tokens (what token counters sum)
    position_ids                     (R, C)  0, 1, 2, ... within each sentence
    sequence_ids                     (R, C)  which sentence of the batch a token belongs to; -1: padding
    labels, anything else            (B, ...) unchanged, one per sentence in the batch's order

Usage::

    collate = PackingCollator(DataCollatorWithPadding(tokenizer, return_tensors="pt"), tokenizer.pad_token_id)
    loader = DataLoader(rows, batch_sampler=sampler, collate_fn=collate)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from mixft.data.shape_ladder import ShapeLadder

PACKED_KEYS = ("position_ids", "sequence_ids")  # what a packed batch adds to the padded one
# The tensors with one value per token, which packing moves into rows. Decided by name, not by
# shape: a per-sentence tensor (multi-label targets, features) of shape (B, K) with K equal to the
# padded length is still one row per sentence, and is passed through as it is.
TOKEN_KEYS = frozenset({"input_ids", "attention_mask", "token_type_ids", "special_tokens_mask"})


def is_packed(inputs: Mapping[str, Any]) -> bool:
    """True for a packed batch (or its inputs): it names each token's sentence."""
    return isinstance(inputs, Mapping) and "sequence_ids" in inputs


def samples_in(inputs: Mapping[str, Any]) -> int:
    """Sentences in a batch's inputs: rows when padded, ``sequence_ids``' count when packed."""
    if is_packed(inputs):
        return int(inputs["sequence_ids"].max()) + 1
    return int(inputs["input_ids"].shape[0])


def first_fit_decreasing(lengths: Sequence[int], capacity: int) -> list[list[int]]:
    """Sentence indices per row: longest first, each into the first row with room (no row over ``capacity``).

    Usage: ``first_fit_decreasing([5, 3, 2, 4], 6) == [[0], [3, 2], [1]]``
    """
    rows: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        if lengths[i] > capacity:
            raise ValueError(f"a sentence of {lengths[i]} tokens does not fit rows of {capacity}")
        row = next((r for r, free in enumerate(room) if free >= lengths[i]), None)
        if row is None:
            rows.append([])
            room.append(capacity)
            row = len(rows) - 1
        rows[row].append(i)
        room[row] -= lengths[i]
    return rows


def pack_batch(
    batch: Mapping[str, Any],
    pad_token_id: int = 0,
    pad_to_multiple_of: int | None = None,
    ladder: ShapeLadder | None = None,
) -> dict:
    """The packed form of a padded batch (the module docstring's layout); its real tokens keep their order.

    Row length: the longest sentence, up ``ladder``'s steps if given, then up to a multiple of
    ``pad_to_multiple_of``; with a ladder the row count goes up its steps too (rows of padding only).
    Real tokens are where ``attention_mask`` is 1 (left or right padding alike). Only ``TOKEN_KEYS``
    are packed; every other entry is per sentence and kept as it is.
    """
    mask = batch["attention_mask"].bool()
    n, width = mask.shape
    lengths = mask.sum(1)
    capacity = int(lengths.max()) if n else 0
    if ladder is not None:
        capacity = ladder.row_length(capacity)
    if pad_to_multiple_of:
        capacity = -(-capacity // pad_to_multiple_of) * pad_to_multiple_of
    rows = first_fit_decreasing(lengths.tolist(), capacity)
    row_count = ladder.rows(len(rows)) if ladder is not None else len(rows)  # the extra rows: padding only
    start = torch.zeros(n, dtype=torch.long)  # each sentence's first slot in the flattened rows
    for r, members in enumerate(rows):
        offset = r * capacity
        for i in members:
            start[i] = offset
            offset += int(lengths[i])
    sentence = torch.repeat_interleave(torch.arange(n), lengths)  # of each real token, in batch order
    first_token = torch.repeat_interleave(torch.cumsum(lengths, 0) - lengths, lengths)
    position = torch.arange(int(lengths.sum())) - first_token
    target = start[sentence] + position  # where each real token goes
    source = mask.flatten().nonzero().squeeze(1)  # where it is now

    def scatter(values: torch.Tensor, fill: int) -> torch.Tensor:
        out = torch.full((row_count * capacity,), fill, dtype=values.dtype)
        out[target] = values.flatten()[source] if values.dim() == 2 else values  # (B, L) or one per real token
        return out.view(row_count, capacity)

    packed: dict[str, Any] = {}
    for key, value in batch.items():
        if key not in TOKEN_KEYS:
            packed[key] = value  # labels and anything else per sentence, whatever its shape
        elif not isinstance(value, torch.Tensor) or value.shape != (n, width):
            shape = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
            raise ValueError(f"{key} is one value per token: expected shape {(n, width)}, got {shape}")
        else:
            packed[key] = scatter(value, pad_token_id if key == "input_ids" else 0)
    packed["position_ids"] = scatter(position, 0)
    packed["sequence_ids"] = scatter(sentence, -1)
    return packed


class PackingCollator:
    """Wraps a padding collator (``padding_collator``) and packs what it returns (``pack_batch``).

    Usage: ``PackingCollator(DataCollatorWithPadding(tok, return_tensors="pt"), tok.pad_token_id)``
    """

    def __init__(
        self,
        padding_collator: Callable[[list], Mapping],
        pad_token_id: int | None,
        ladder: ShapeLadder | None = None,
    ):
        self.padding_collator = padding_collator
        self.pad_token_id = pad_token_id if pad_token_id is not None else 0
        self.pad_to_multiple_of = getattr(padding_collator, "pad_to_multiple_of", None)
        self.ladder = ladder  # None: each batch's own (rows x row length)

    def __call__(self, features: list) -> dict:
        return pack_batch(self.padding_collator(features), self.pad_token_id, self.pad_to_multiple_of, self.ladder)
