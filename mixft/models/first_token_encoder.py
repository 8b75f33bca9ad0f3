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
a mask tensor (``sdpa``, ``eager``), and nothing attached to the modules whose ``forward`` the
shortcut does not call (the encoder, its layer stack, the last layer, its attention, its
self-attention: ``--fp32-modules`` naming one, a forward hook such as the NaN diagnosis' or the fp16
preflight's):
:func:`reads_first_tokens_only` says when; the caller runs the whole encoder otherwise. Under FSDP2 the last layer's weights are
shards that FSDP gathers only around a call it knows of, so :func:`first_token_methods` gives a
sharded last layer this computation as a method and names it for FSDP to register
(``BertClassifier.fsdp_forward_methods``, asked by ``mixft.train.fsdp.shard_model`` after
sharding); a sharded last layer without it runs the whole encoder.

Usage::

    if reads_first_tokens_only(encoder):
        rows = torch.arange(batch); positions = torch.zeros(batch, dtype=torch.long)
        cls = first_token_states(encoder, input_ids, attention_mask, token_type_ids, None, rows, positions)
"""

from __future__ import annotations

from functools import partial
from types import MethodType

import torch
from torch import nn

from mixft.distributed import is_sharded

# Attention implementations that take the 4-D mask built below (flash attention takes none).
_MASKED_ATTENTION = ("sdpa", "eager")
# The last layer's method FSDP2 gathers the layer's weights around (first_token_methods).
_FSDP_METHOD = "mixft_first_tokens"


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
    last = encoder.encoder.layer[-1]
    if _something_attached((encoder, encoder.encoder, last, last.attention, last.attention.self)):
        return False
    return not is_sharded(last) or hasattr(last, _FSDP_METHOD)


def _something_attached(skipped: tuple[nn.Module, ...]) -> bool:
    """Whether a module whose ``forward`` the shortcut skips has a replaced ``forward`` or a forward hook.

    The shortcut calls the embeddings, the layers but the last, and the last layer's Linear, output and
    feed-forward modules; not the encoder, its layer stack, the last layer, its attention or its
    self-attention. ``--fp32-modules`` naming one of those (``mixft.amp.fp32`` replaces its ``forward``)
    would not run it in fp32, and a hook on one (the diagnosis and the preflight hook every module) would
    never fire. FSDP2's own hooks on a sharded module are not such a thing.
    """
    for module in skipped:
        if "forward" in module.__dict__:
            return True
        if not is_sharded(module) and (module._forward_hooks or module._forward_pre_hooks):
            return True
    return False


def first_token_methods(encoder: nn.Module) -> list[tuple[nn.Module, str]]:
    """``[(last layer, method name)]``: the method :func:`first_token_states` calls on ``encoder``'s
    sharded last layer instead of its ``forward``; ``[]`` for any other encoder or an unsharded layer.

    The method is set on the layer here (once); FSDP must then gather the layer's weights around it,
    free them after and reduce their gradients in backward, as around the layer's own forward:
    ``mixft.train.fsdp.shard_model`` registers it (``register_fsdp_forward_method``) after
    ``fully_shard`` of the layers.
    Usage: ``for layer, name in first_token_methods(model.encoder): register_fsdp_forward_method(layer, name)``
    """
    from transformers import BertModel

    if not isinstance(encoder, BertModel):
        return []
    last = encoder.encoder.layer[-1]
    if not is_sharded(last):
        return []
    if not hasattr(last, _FSDP_METHOD):
        setattr(last, _FSDP_METHOD, MethodType(_last_layer, last))
    return [(last, _FSDP_METHOD)]


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
    ``position_ids``: in the encoder's own numbering, as ``BertModel`` takes them (None: 0, 1, 2, ...
    per row); a packed batch's are translated by the caller (``BertClassifier``, ``mixft.models.positions``).
    """
    from transformers.masking_utils import create_bidirectional_mask

    hidden = encoder.embeddings(input_ids=input_ids, token_type_ids=token_type_ids, position_ids=position_ids)
    mask = create_bidirectional_mask(config=encoder.config, inputs_embeds=hidden, attention_mask=attention_mask)
    *inner, last = encoder.encoder.layer
    for layer in inner:
        hidden = layer(hidden, mask)

    sharded_call = getattr(last, _FSDP_METHOD, None)  # FSDP gathers the layer's weights around it
    if sharded_call is not None:
        return sharded_call(hidden, mask, rows, positions)
    return _last_layer(last, hidden, mask, rows, positions)


def _last_layer(layer: nn.Module, hidden: torch.Tensor, mask, rows: torch.Tensor, positions: torch.Tensor):
    """BertLayer ``layer`` on ``hidden`` (rows, length, width), for the tokens at (rows[i], positions[i]) only.

    Under gradient checkpointing (``--gradient-checkpointing``: the layer's ``gradient_checkpointing``)
    recomputed in backward, as transformers checkpoints the layer's forward: inside FSDP's
    gathering (the method FSDP wraps calls this), so the hooks do not run twice.
    """
    if getattr(layer, "gradient_checkpointing", False) and layer.training and torch.is_grad_enabled():
        return layer._gradient_checkpointing_func(partial(_last_layer_tokens, layer), hidden, mask, rows, positions)
    return _last_layer_tokens(layer, hidden, mask, rows, positions)


def _last_layer_tokens(layer: nn.Module, hidden: torch.Tensor, mask, rows: torch.Tensor, positions: torch.Tensor):
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    from transformers.models.bert.modeling_bert import eager_attention_forward

    n_rows, length, width = hidden.shape
    n = rows.shape[0]
    attention = layer.attention.self
    heads, head_size = attention.num_attention_heads, attention.attention_head_size
    read = hidden[rows, positions]  # (N, width)
    query = attention.query(read).view(n, 1, heads, head_size).transpose(1, 2)
    # Keys and values of every token, then each read token's own row of them.
    key = attention.key(hidden)[rows].view(n, length, heads, head_size).transpose(1, 2)
    value = attention.value(hidden)[rows].view(n, length, heads, head_size).transpose(1, 2)
    if mask is not None:  # each read token's row of the (rows, 1 or heads, length, length) mask
        mask = mask.expand(n_rows, -1, length, -1)[rows, :, positions][:, :, None, :]
    attend = ALL_ATTENTION_FUNCTIONS.get_interface(attention.config._attn_implementation, eager_attention_forward)
    context, _ = attend(
        attention,
        query,
        key,
        value,
        mask,
        dropout=attention.dropout.p if attention.training else 0.0,
        scaling=attention.scaling,
    )
    attended = layer.attention.output(context.reshape(n, width), read)
    return layer.feed_forward_chunk(attended)
