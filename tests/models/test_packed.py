"""Packed batches through BertClassifier (mixft.models.packed): what the padded batch computes, sentence by sentence.

Against the padded batch as reference: logits and gradients equal to float rounding (dropout
off), for sdpa and eager attention, with and without a pooler; in training with mixft's fast
dropout on, no sentence sees another sentence of its row; and through the real trainer
(``build_trainer``: fast dropout and row-gradient embeddings on) three steps end at the
padded run's weights.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from mixft.data.packing import pack_batch
from mixft.models.classifiers import BertClassifier
from mixft.models.packed import block_diagonal_mask, first_token_places
from recipes.bert_sst2 import loss_fn as bce_loss
from tests.tiny_models import make_tiny_model_dir, uneven_bert_batch


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    return make_tiny_model_dir("bert", tmp_path_factory.mktemp("packed") / "bert", num_hidden_layers=2)


@pytest.fixture(scope="module")
def batch():
    return uneven_bert_batch()


def classifier(path, attn: str = "sdpa", pooler: bool = True) -> BertClassifier:
    from transformers import AutoModel, BertModel

    torch.manual_seed(0)
    if pooler:
        encoder = AutoModel.from_pretrained(path, dtype=torch.float32, attn_implementation=attn)
    else:
        encoder = BertModel.from_pretrained(
            path, dtype=torch.float32, attn_implementation=attn, add_pooling_layer=False
        )
    return BertClassifier(encoder)


def inputs_of(batch: dict) -> dict:
    return {k: v for k, v in batch.items() if k != "labels"}


def logits_and_grads(model, batch):
    model.zero_grad(set_to_none=True)
    logits = model(**inputs_of(batch))
    bce_loss(logits, batch["labels"].float()).backward()
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("attn,pooler", [("sdpa", True), ("eager", True), ("sdpa", False)])
def test_packed_logits_and_gradients_equal_the_padded_batch(bert_dir, batch, attn, pooler):
    model = classifier(bert_dir, attn, pooler).eval()  # dropout off: the same function both ways
    packed = pack_batch(batch)
    assert packed["input_ids"].numel() < batch["input_ids"].numel()
    ref_logits, ref_grads = logits_and_grads(model, batch)
    logits, grads = logits_and_grads(model, packed)
    torch.testing.assert_close(logits, ref_logits, rtol=1e-5, atol=1e-6)
    assert grads.keys() == ref_grads.keys()
    for name in ref_grads:
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=1e-4, atol=1e-6, msg=name)


def test_in_training_with_fast_dropout_no_sentence_sees_its_row_neighbours(bert_dir, batch):
    from mixft.train.fast_dropout import use_fast_dropout

    model = classifier(bert_dir).train()
    packed = pack_batch(batch)
    seq = packed["sequence_ids"]
    row = next(r for r in range(seq.shape[0]) if len(set(seq[r].tolist()) - {-1}) >= 2)
    first, neighbour = list(dict.fromkeys(s for s in seq[row].tolist() if s >= 0))[:2]
    changed = {k: v.clone() for k, v in packed.items()}
    where = seq == first
    changed["input_ids"][where] = torch.randint(5, model.encoder.config.vocab_size, (int(where.sum()),))
    with use_fast_dropout(model):
        torch.manual_seed(3)  # the same masks: the shapes are the same
        before = model(**inputs_of(packed))
        torch.manual_seed(3)
        after = model(**inputs_of(changed))
    assert not torch.equal(before[first], after[first])  # the changed sentence did change
    others = [s for s in range(len(before)) if s != first]
    assert neighbour in others and torch.equal(before[others], after[others])  # its row neighbour: untouched


def test_the_mask_keeps_attention_within_a_sentence_and_no_row_empty():
    seq = torch.tensor([[0, 0, 1, 1, 1, -1], [2, 2, 2, 2, -1, -1]])
    mask = block_diagonal_mask(seq)
    assert mask.shape == (2, 1, 6, 6) and mask.dtype == torch.bool
    assert mask[0, 0, 0].tolist() == [True, True, False, False, False, False]
    assert mask[0, 0, 3].tolist() == [False, False, True, True, True, False]
    assert mask[0, 0, 5].tolist() == [False] * 5 + [True]  # padding attends to itself only: no NaN row
    assert mask.any(-1).all()
    additive = block_diagonal_mask(seq, "eager")
    assert additive.dtype == torch.float32 and torch.equal(additive == 0, mask)


def test_first_token_places_come_back_in_sentence_order():
    seq = torch.tensor([[2, 2, 0, 0, 0], [1, 1, 1, -1, -1]])
    pos = torch.tensor([[0, 1, 0, 1, 2], [0, 1, 2, 0, 0]])
    rows, starts = first_token_places(seq, pos)
    assert rows.tolist() == [0, 1, 0] and starts.tolist() == [2, 0, 0]


def test_three_trainer_steps_packed_end_at_the_padded_runs_weights(tmp_path):
    from mixft.amp.precision import resolve_precision
    from mixft.config.run_config import RunConfig
    from mixft.recipe import get_recipe
    from mixft.runs.build import build_trainer
    from tests.conftest import make_data_dir

    model_dir = make_tiny_model_dir(
        "bert", tmp_path / "bert", num_hidden_layers=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0
    )
    recipe = get_recipe("bert-sst2")
    base = RunConfig(
        recipe="bert-sst2",
        model=str(model_dir),
        data_dir=str(make_data_dir(tmp_path / "data", 48, 8)),
        max_steps=3,
        max_length=64,
    )
    device, weights, seen = torch.device("cpu"), {}, {}
    for pack in (False, True):
        cfg = dataclasses.replace(base, pack_sequences=pack).with_defaults(recipe.DEFAULTS).validate()
        prepared = recipe.prepare(cfg)
        precision = resolve_precision("fp32", device)
        parts = recipe.build(cfg, prepared, precision, device, 0)
        parts.model.dropout.p = 0.0  # the head's dropout too: the same function, whatever the masks
        trainer = build_trainer(
            dataclasses.replace(parts, eval_loader=None), cfg, precision=precision, device=device, seed=0
        )
        assert {"fast_dropout", "row_embedding_grad"} <= set(trainer.cpu_swaps)  # the CPU speed paths are on
        trainer.fit()
        weights[pack] = {n: p.detach().clone() for n, p in parts.model.named_parameters()}
        seen[pack] = (trainer.state.samples, trainer.state.tokens)
    assert seen[True] == seen[False]  # the same sentences and real tokens
    for name, ref in weights[False].items():
        torch.testing.assert_close(weights[True][name], ref, rtol=1e-4, atol=1e-6, msg=name)
