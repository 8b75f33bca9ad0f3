"""The model side of packed batches (``mixft.data.packing``): attend within a sentence, read each sentence's [CLS].

A packed row holds several sentences end to end. Two things make the encoder compute for each
exactly what it computes for the sentence padded alone: positions restarting at 0 (the batch's
``position_ids``) and a block-diagonal attention mask, built here from ``sequence_ids``. Padding
slots attend to themselves only, so no softmax row is empty (it would be NaN); nothing reads them.

Usage (inside a classifier's forward)::

    mask = block_diagonal_mask(sequence_ids, encoder.config._attn_implementation)
    hidden = encoder(input_ids=ids, attention_mask=mask, position_ids=positions).last_hidden_state
    rows, starts = first_token_places(sequence_ids, positions)
    cls = hidden[rows, starts]                               # (B, H), in the batch's sentence order
"""

from __future__ import annotations

import torch


def block_diagonal_mask(sequence_ids: torch.Tensor, attn_implementation: str | None = "sdpa") -> torch.Tensor:
    """(R, 1, C, C): token q may attend to token k when both are in the same sentence.

    Boolean (True = attend) for sdpa and mixft's fast-dropout attention, which take it as is;
    additive (0 / the dtype's minimum, fp32) for ``"eager"`` attention, which adds it to the scores.
    A 4-D mask is handed to the attention unchanged by transformers' mask builder.
    """
    same = sequence_ids[:, :, None] == sequence_ids[:, None, :]
    padding = sequence_ids < 0
    diagonal = torch.eye(sequence_ids.shape[1], dtype=torch.bool, device=sequence_ids.device)
    allowed = (same & ~padding[:, :, None]) | (diagonal & padding[:, :, None])
    allowed = allowed[:, None]
    if attn_implementation == "eager":
        return torch.zeros(allowed.shape, dtype=torch.float32, device=allowed.device).masked_fill_(
            ~allowed, torch.finfo(torch.float32).min
        )
    return allowed


def first_token_places(sequence_ids: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, positions), each (B,): where each sentence's first token sits, ordered by sentence id."""
    starts = ((position_ids == 0) & (sequence_ids >= 0)).nonzero()
    order = torch.argsort(sequence_ids[starts[:, 0], starts[:, 1]])
    return starts[order, 0], starts[order, 1]
