"""How a model family numbers its positions: from 0 (BERT's convention) or from ``padding_idx + 1``.

fairseq's RoBERTa and the families built on it number a sentence's tokens ``padding_idx + 1``,
``padding_idx + 2``, ... (row ``padding_idx`` of the position table is the padding's), so their
position table holds ``max_position_embeddings - (padding_idx + 1)`` tokens: RoBERTa's 514
positions hold 512. Two things depend on it: the longest input a model reads
(``mixft.models.check.max_sequence_length``) and the positions a packed sentence is given
(``mixft.models.classifiers.BertClassifier``: packed batches number each sentence from 0, and the
model adds ``first_position`` so that the encoder sees the positions it computes for the
sentence padded alone).

Usage: ``position_ids + first_position(encoder.config)  # 0, 1, 2 -> 2, 3, 4 for roberta-base``
"""

from __future__ import annotations

# Families whose position ids start at padding_idx + 1 (fairseq's convention).
PADDING_OFFSET_TYPES = frozenset(
    {
        "roberta",
        "xlm-roberta",
        "xlm-roberta-xl",
        "camembert",
        "longformer",
        "roberta-prelayernorm",
        "data2vec-text",
        "ibert",
        "mpnet",
        "esm",
        "xmod",
        "luke",
    }
)


def first_position(config) -> int:
    """The position id the model's own embedding gives a sentence's first token: 0, or padding_idx + 1.

    Usage: ``first_position(AutoConfig.from_pretrained("roberta-base"))  # 2``
    """
    if getattr(config, "model_type", None) not in PADDING_OFFSET_TYPES:
        return 0
    pad = getattr(config, "pad_token_id", None)
    return (pad if isinstance(pad, int) else 1) + 1
