"""Packed batches through BertClassifier (mixft.models.packed): what the padded batch computes, sentence by sentence.

Against the padded batch as reference: logits and gradients equal to float rounding (dropout
off), for sdpa and eager attention, with and without a pooler; for every family that packs
(``PACKING_TYPES``: BERT's positions from 0, RoBERTa's and XLM-R's from padding_idx + 1), with a
sentence pair's token types where the family has them, and BERT both through the [CLS]-only last
layer and the whole encoder; a family that does not pack refuses a packed batch; in training with
mixft's fast dropout on, no sentence sees another sentence of its row; and through the real
trainer (``build_trainer``: fast dropout and row-gradient embeddings on) the first step's loss is
the padded run's and three steps end at its weights, for BERT and RoBERTa.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from mixft.data.packing import pack_batch
from mixft.data.shape_ladder import ShapeLadder, ladder_up
from mixft.models import classifiers
from mixft.models.classifiers import BertClassifier
from mixft.models.packed import PACKING_TYPES, block_diagonal_mask, first_token_places, packs
from recipes.bert_sst2 import loss_fn as bce_loss
from tests.tiny_models import ARCHITECTURES, TOY_ROWS, make_tiny_model_dir, make_tokenizer, uneven_bert_batch


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


@pytest.mark.parametrize(
    "attn,pooler,ladder", [("sdpa", True, None), ("eager", True, None), ("sdpa", False, None), ("sdpa", True, 2)]
)
def test_packed_logits_and_gradients_equal_the_padded_batch(bert_dir, batch, attn, pooler, ladder):
    model = classifier(bert_dir, attn, pooler).eval()  # dropout off: the same function both ways
    # ladder: shapes rounded up (mixft.data.shape_ladder; 2 steps per doubling: more padding rows and columns)
    packed = pack_batch(batch, ladder=ShapeLadder(steps=ladder) if ladder else None)
    if ladder:
        assert tuple(packed["input_ids"].shape) != tuple(pack_batch(batch)["input_ids"].shape)
    assert packed["input_ids"].numel() < batch["input_ids"].numel()
    ref_logits, ref_grads = logits_and_grads(model, batch)
    logits, grads = logits_and_grads(model, packed)
    torch.testing.assert_close(logits, ref_logits, rtol=1e-5, atol=1e-6)
    assert grads.keys() == ref_grads.keys()
    for name in ref_grads:
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=1e-4, atol=1e-6, msg=name)


def test_a_padded_batch_widened_to_the_ladder_computes_the_same(bert_dir, batch):
    """--batch-shapes ladder on padded batches (LadderPadding): more padding columns, the same logits and gradients."""
    model = classifier(bert_dir).eval()
    width = batch["input_ids"].shape[1]
    wider = ladder_up(width + 1)  # off the exact width, as the ladder pads a batch whose longest is off it
    widened = {k: torch.nn.functional.pad(v, (0, wider - width)) if v.dim() == 2 else v for k, v in batch.items()}
    ref_logits, ref_grads = logits_and_grads(model, batch)
    logits, grads = logits_and_grads(model, widened)
    torch.testing.assert_close(logits, ref_logits, rtol=1e-5, atol=1e-6)
    for name in ref_grads:
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=1e-4, atol=1e-6, msg=name)


def family_batch(arch: str) -> tuple[dict, int]:
    """(padded batch, pad id) of ``arch``'s tokenizer: sentences of 1 to 4 toy rows and a sentence pair."""
    tokenizer = make_tokenizer(arch)
    texts = [row[0] for row in TOY_ROWS]
    sentences = [" ".join(texts[i : i + 1 + i % 4]) for i in range(9)]
    batch = tokenizer(sentences, padding=True, return_tensors="pt")
    width = batch["input_ids"].shape[1]
    pair = tokenizer(
        ["okay but boring"], ["a very bad film"], padding="max_length", max_length=width, return_tensors="pt"
    )
    batch = {k: torch.cat([batch[k], pair[k]]) for k in batch}
    batch["labels"] = torch.tensor([float(i % 2) for i in range(len(sentences) + 1)])
    return batch, tokenizer.pad_token_id


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("families")
    return {arch: make_tiny_model_dir(arch, root / arch, num_hidden_layers=2) for arch in PACKING_TYPES}


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("arch", PACKING_TYPES)
def test_every_family_that_packs_computes_the_padded_batch(family_dirs, arch, attn):
    from transformers import AutoModel

    batch, pad_id = family_batch(arch)
    torch.manual_seed(0)
    encoder = AutoModel.from_pretrained(family_dirs[arch], dtype=torch.float32, attn_implementation=attn)
    model = BertClassifier(encoder).eval()  # dropout off: the same function both ways
    if getattr(encoder.config, "type_vocab_size", 0) > 1:  # BERT, ELECTRA: the pair's second segment is packed too
        assert int(batch["token_type_ids"].max()) == 1
    packed = pack_batch(batch, pad_id)
    assert packed["input_ids"].numel() < batch["input_ids"].numel() and not batch["attention_mask"].all()
    ref_logits, ref_grads = logits_and_grads(model, batch)
    logits, grads = logits_and_grads(model, packed)
    torch.testing.assert_close(logits, ref_logits, rtol=1e-5, atol=1e-6)
    assert grads.keys() == ref_grads.keys()
    for name in ref_grads:  # the position table's rows included: the same rows, the same gradients
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=1e-4, atol=1e-6, msg=name)


def test_bert_packed_through_the_whole_encoder_too(family_dirs, monkeypatch):
    # The family test above reads BERT's [CLS] through the [CLS]-only last layer; the whole encoder gets the positions too.
    from transformers import AutoModel

    monkeypatch.setattr(classifiers, "reads_first_tokens_only", lambda encoder: False)
    batch, pad_id = family_batch("bert")
    torch.manual_seed(0)
    model = BertClassifier(AutoModel.from_pretrained(family_dirs["bert"], dtype=torch.float32)).eval()
    ref_logits, ref_grads = logits_and_grads(model, batch)
    logits, grads = logits_and_grads(model, pack_batch(batch, pad_id))
    torch.testing.assert_close(logits, ref_logits, rtol=1e-5, atol=1e-6)
    for name in ref_grads:
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=1e-4, atol=1e-6, msg=name)


def test_a_family_that_does_not_pack_refuses_a_packed_batch(tmp_path):
    from transformers import AutoModel, CamembertConfig

    assert set(PACKING_TYPES) < set(ARCHITECTURES)  # each one is tested above
    assert not packs(CamembertConfig())  # a RoBERTa-like not tested: not packed either
    batch, pad_id = family_batch("deberta-v2")
    model = BertClassifier(AutoModel.from_pretrained(make_tiny_model_dir("deberta-v2", tmp_path / "deberta"))).eval()
    assert model(**inputs_of(batch)).shape == (len(batch["labels"]),)  # padded: fine
    with pytest.raises(ValueError, match=r"not supported for deberta-v2 models \(packing supports bert, distilbert, "):
        model(**inputs_of(pack_batch(batch, pad_id)))  # not a shape error deep in its attention


def test_in_training_no_sentence_sees_its_row_neighbours(bert_dir, batch):
    model = classifier(bert_dir).train()
    packed = pack_batch(batch)
    seq = packed["sequence_ids"]
    row = next(r for r in range(seq.shape[0]) if len(set(seq[r].tolist()) - {-1}) >= 2)
    first, neighbour = list(dict.fromkeys(s for s in seq[row].tolist() if s >= 0))[:2]
    changed = {k: v.clone() for k, v in packed.items()}
    where = seq == first
    changed["input_ids"][where] = torch.randint(5, model.encoder.config.vocab_size, (int(where.sum()),))
    torch.manual_seed(3)  # the same dropout masks: the shapes are the same
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


@pytest.mark.parametrize("arch", ["bert", "roberta"])  # positions from 0, and from padding_idx + 1
def test_three_trainer_steps_packed_end_at_the_padded_runs_weights(tmp_path, arch):
    """Packed, exact and on the shape ladder (--batch-shapes ladder), against exact padded batches.
    (This data's padded batches are all --max-length wide, where the ladder stops: padded batches on the
    ladder are the next test's.)"""
    from mixft.amp.precision import resolve_precision
    from mixft.config.run_config import RunConfig
    from mixft.recipe import get_recipe
    from mixft.runs.build import build_trainer
    from tests.conftest import make_data_dir

    model_dir = make_tiny_model_dir(
        arch, tmp_path / arch, num_hidden_layers=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0
    )
    recipe = get_recipe("bert-sst2")
    base = RunConfig(
        recipe="bert-sst2",
        model=str(model_dir),
        data_dir=str(make_data_dir(tmp_path / "data", 48, 8)),
        max_steps=3,
        max_length=64,
    )
    device, weights, seen, losses, first_shapes = torch.device("cpu"), {}, {}, {}, {}
    ways = [(False, "exact"), (True, "exact"), (True, "ladder")]
    for way in ways:
        pack, shapes = way
        cfg = dataclasses.replace(base, pack_sequences=pack, batch_shapes=shapes).with_defaults(recipe.DEFAULTS)
        cfg = cfg.validate()
        prepared = recipe.prepare(cfg)
        assert not prepared.settled  # packed as asked
        precision = resolve_precision("fp32", device)
        parts = recipe.build(cfg, prepared, precision, device, 0)
        assert parts.run_info["batch_shapes"] == shapes
        first_shapes[way] = tuple(next(iter(parts.train_loader))["input_ids"].shape)
        parts.model.dropout.p = 0.0  # the head's dropout too: the same function, whatever the masks
        trainer = build_trainer(
            dataclasses.replace(parts, eval_loader=None), cfg, precision=precision, device=device, seed=0
        )
        trainer.fit()
        weights[way] = {n: p.detach().clone() for n, p in parts.model.named_parameters()}
        seen[way] = (trainer.state.samples, trainer.state.tokens)
        losses[way] = [float(loss) for loss in trainer.state.history["loss"]]
    reference = ways[0]  # exact padded batches
    assert first_shapes[(True, "ladder")] != first_shapes[(True, "exact")]  # the ladder changed the shapes
    for way in ways[1:]:
        assert seen[way] == seen[reference], way  # the same sentences and real tokens (padding is not counted)
        assert losses[way] == pytest.approx(losses[reference], rel=1e-5), way  # the first step's loss included
        for name, ref in weights[reference].items():
            torch.testing.assert_close(weights[way][name], ref, rtol=1e-4, atol=1e-6, msg=f"{way} {name}")
