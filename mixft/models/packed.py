"""The model side of packed batches (``mixft.data.packing``): attend within a sentence, read each sentence's [CLS].

A packed row holds several sentences end to end. Two things make the encoder compute for each
exactly what it computes for the sentence padded alone: each sentence's positions numbered as
the encoder numbers a sentence of its own (the batch's ``position_ids`` count from 0; the
model adds its family's first position, ``mixft.models.positions``: 2 for RoBERTa) and a
block-diagonal attention mask, built here from ``sequence_ids``. Padding slots attend to
themselves only, so no softmax row is empty (it would be NaN); nothing reads them.

Only the families in ``PACKING_TYPES`` pack: for each, packed logits and gradients are tested
equal to the padded batch's (tests/models/test_packed.py). Others may take neither the 4-D mask
(DeBERTa-v2's attention fails on it) nor positions from outside, or derive more from the row.

Usage (inside a classifier's forward)::

    check_packs(encoder.config)                              # ValueError for a family that does not pack
    mask = block_diagonal_mask(sequence_ids, encoder.config._attn_implementation)
    own = positions + first_position(encoder.config)         # the encoder's numbering
    hidden = encoder(input_ids=ids, attention_mask=mask, position_ids=own).last_hidden_state
    rows, starts = first_token_places(sequence_ids, positions)
    cls = hidden[rows, starts]                               # (B, H), in the batch's sentence order
"""

from __future__ import annotations

import torch

# Encoder families (config.model_type) whose packed forward and backward equal the padded
# batch's to float rounding: tested one by one, with token types where the family takes them.
PACKING_TYPES = ("bert", "distilbert", "electra", "roberta", "xlm-roberta")


def packs(config) -> bool:
    """Whether a model of ``config``'s family computes packed batches as it computes padded ones.

    Usage: ``packs(AutoConfig.from_pretrained(path))  # False for deberta-v2``
    """
    return getattr(config, "model_type", None) in PACKING_TYPES


def check_packs(config) -> None:
    """Raise ValueError, naming the family and those that pack, unless ``packs(config)``."""
    if not packs(config):
        raise ValueError(
            f"packed batches are not supported for {getattr(config, 'model_type', None) or 'this'} models "
            f"(packing supports {', '.join(PACKING_TYPES)}): pad them instead"
        )


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
