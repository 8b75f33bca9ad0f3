"""A BERT encoder pass whose last layer computes only the tokens the classifier reads.

A sentence classifier reads one token per sentence from the encoder's output ([CLS]). Every
layer but the last must compute every token (the next layer's keys and values come from all of
them), but in the last layer a token's own query, attention output, feed-forward and LayerNorms
feed only that token's output: for the tokens nobody reads, that work is thrown away. Here the
last layer computes its keys and values for every token, as before, and the rest for the read
tokens only. The read tokens' states are the full encoder's up to float rounding (the same
operations on fewer rows), and so are the gradients. With a layer's matmuls counted as 8 units
per token (Q, K, V, O: 4; the feed-forward: 4 at 4x width), the last layer keeps 2 per token
(K, V) and 6 per read token: on MiniLM (6 layers) with ~14 tokens per sentence that is ~70 % of
the last layer's matmul work gone, ~11 % of the encoder's.

Only ``transformers``' ``BertModel`` (BERT, MiniLM) with an attention implementation that takes
a mask tensor (``sdpa``, ``eager``, mixft's fast-dropout sdpa), and not when the last layer is
sharded by FSDP (its parameters are gathered only when the layer itself is called):
:func:`reads_first_tokens_only` says when; the caller runs the whole encoder otherwise.

Usage::

    if reads_first_tokens_only(encoder):
        rows = torch.arange(batch); positions = torch.zeros(batch, dtype=torch.long)
        cls = first_token_states(encoder, input_ids, attention_mask, token_type_ids, None, rows, positions)
"""

from __future__ import annotations

import torch
from torch import nn

from mixft.distributed import is_sharded

# Attention implementations that take the 4-D mask built below (flash attention takes none).
_MASKED_ATTENTION = ("sdpa", "eager", "mixft_fast_dropout_sdpa")


def reads_first_tokens_only(encoder: nn.Module) -> bool:
    """Whether :func:`first_token_states` computes what ``encoder(...)`` would for the read tokens."""
    from transformers import BertModel

    if not isinstance(encoder, BertModel):
        return False
    config = encoder.config
    if config.is_decoder or config.add_cross_attention or config.chunk_size_feed_forward:
        return False
    if getattr(config, "_attn_implementation", None) not in _MASKED_ATTENTION:
        return False
    return not is_sharded(encoder.encoder.layer[-1])


def first_token_states(
    encoder: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    token_type_ids: torch.Tensor | None,
    position_ids: torch.Tensor | None,
    rows: torch.Tensor,
    positions: torch.Tensor,
) -> torch.Tensor:
    """(N, hidden): the encoder's last hidden state at ``(rows[i], positions[i])`` for each i.

    ``attention_mask``: what ``BertModel`` takes (a 2-D padding mask, a 4-D mask, or None);
    it is turned into the layers' mask by the same transformers function ``BertModel`` uses.
    """
    from transformers.masking_utils import create_bidirectional_mask
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    from transformers.models.bert.modeling_bert import eager_attention_forward

    hidden = encoder.embeddings(input_ids=input_ids, token_type_ids=token_type_ids, position_ids=position_ids)
    mask = create_bidirectional_mask(config=encoder.config, inputs_embeds=hidden, attention_mask=attention_mask)
    *inner, last = encoder.encoder.layer
    for layer in inner:
        hidden = layer(hidden, mask)

    n_rows, length, width = hidden.shape
    n = rows.shape[0]
    attention = last.attention.self
    heads, head_size = attention.num_attention_heads, attention.attention_head_size
    read = hidden[rows, positions]  # (N, width)
    query = attention.query(read).view(n, 1, heads, head_size).transpose(1, 2)
    # Keys and values of every token, then each read token's own row of them.
    key = attention.key(hidden)[rows].view(n, length, heads, head_size).transpose(1, 2)
    value = attention.value(hidden)[rows].view(n, length, heads, head_size).transpose(1, 2)
    if mask is not None:  # each read token's row of the (rows, 1 or heads, length, length) mask
        mask = mask.expand(n_rows, -1, length, -1)[rows, :, positions][:, :, None, :]
    attend = ALL_ATTENTION_FUNCTIONS.get_interface(encoder.config._attn_implementation, eager_attention_forward)
    context, _ = attend(
        attention,
        query,
        key,
        value,
        mask,
        dropout=attention.dropout.p if attention.training else 0.0,
        scaling=attention.scaling,
    )
    attended = last.attention.output(context.reshape(n, width), read)
    return last.feed_forward_chunk(attended)
