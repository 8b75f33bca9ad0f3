"""mixft.models.classifiers: the any-encoder SequenceClassifier on tiny models of six architectures."""

from __future__ import annotations

import json
import math

import pytest
import torch
from tiny_models import ARCHITECTURES, TOY_ROWS, make_tiny_model_dir, make_tokenizer, toy_batch
from torch import nn

from mixft.errors import UsageError
from mixft.models.classifiers import (
    SequenceClassifier,
    argmax_labels,
    classification_loss,
    load_classifier,
    regression_loss,
    regression_values,
)
from mixft.train.trainer import Trainer

LABELS = {"2-class": ["negative", "positive"], "3-class": ["bad", "so-so", "good"], "regression": None}


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny-encoders")
    return {arch: make_tiny_model_dir(arch, root / arch) for arch in ARCHITECTURES}


def _load(path, task, seed=0):
    return load_classifier(str(path), seed=seed, labels=LABELS[task], regression=task == "regression")


def _head(model: SequenceClassifier) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.model.state_dict().items() if k in model.fresh_weights}


# ---------------------------------------------------------------------------------------
# Train, save, reload: every architecture, every task kind
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("task", ["2-class", "3-class", "regression"])
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_trains_saves_and_reloads_with_labels(tiny_dirs, tmp_path, arch, task):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_dirs[arch])
    batch = toy_batch(tokenizer, task, pairs=True)
    model = _load(tiny_dirs[arch], task)
    assert all(p.dtype == torch.float32 for p in model.parameters())  # fp32 master weights
    assert model.untrained and model.fresh_weights  # a fresh head on a bare encoder

    trainer = Trainer(
        model,
        lambda params: torch.optim.AdamW(params, lr=1e-2),
        model.loss_fn,
        [batch] * 4,
        eval_loader=[batch],
        predict_fn=model.predict_fn,
        precision="fp32",
        device="cpu",
        epochs=2,
        seed=0,
    )
    result = trainer.fit()
    losses = trainer.state.history["loss"]
    assert len(losses) == 8 and all(math.isfinite(float(x)) for x in losses)
    assert float(losses[-1]) < float(losses[0])  # it learns the toy rows

    inputs = {k: v for k, v in batch.items() if k != "labels"}
    model.eval()
    with torch.no_grad():
        outputs = model(**inputs)
    n = len(TOY_ROWS)
    assert outputs.shape == ((n,) if task == "regression" else (n, len(LABELS[task])))
    if task == "regression":
        assert "accuracy" not in result.eval
    else:
        assert 0.0 <= result.eval["accuracy"] <= 1.0

    saved = tmp_path / "saved"
    model.save_pretrained(saved)
    config = json.loads((saved / "config.json").read_text())
    if task == "regression":
        assert config["problem_type"] == "regression" and len(config["id2label"]) == 1
    else:
        assert config["id2label"] == {str(i): name for i, name in enumerate(LABELS[task])}
        assert config["label2id"] == {name: i for i, name in enumerate(LABELS[task])}

    # --eval-only's path: no labels given, the task comes back from the saved config.
    reloaded = load_classifier(str(saved), seed=123)
    assert reloaded.labels == LABELS[task] and reloaded.is_regression == (task == "regression")
    assert not reloaded.untrained  # every weight, head included, came from the directory
    reloaded.eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**inputs), outputs)


def test_bf16_autocast_training_keeps_losses_fp32(tiny_dirs):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_dirs["roberta"])
    for task in ("3-class", "regression"):
        batch = toy_batch(tokenizer, task)
        model = _load(tiny_dirs["roberta"], task)
        inputs = {k: v for k, v in batch.items() if k != "labels"}
        with torch.autocast("cpu", dtype=torch.bfloat16):
            outputs = model(**inputs)
            loss = model.loss_fn(outputs, batch["labels"])
        assert outputs.dtype == torch.bfloat16  # the model did run in bf16...
        assert loss.dtype == torch.float32  # ...the loss did not
        reference = (nn.functional.mse_loss if task == "regression" else nn.functional.cross_entropy)(
            outputs.float(), batch["labels"]
        )
        torch.testing.assert_close(loss, reference)


# ---------------------------------------------------------------------------------------
# Losses and predictions
# ---------------------------------------------------------------------------------------


def test_losses_are_fp32_islands_under_autocast():
    logits = torch.tensor([[2.0, -1.0, 0.5], [0.1, 0.2, 3.0]])
    labels = torch.tensor([0, 2])
    scores, targets = torch.tensor([300.0, -2.0]), torch.tensor([0.0, -1.0])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ce = classification_loss(logits.bfloat16(), labels)
        mse = regression_loss(scores.half(), targets)  # 300**2 overflows fp16 (max 65504)
    assert ce.dtype == mse.dtype == torch.float32
    torch.testing.assert_close(ce, nn.functional.cross_entropy(logits.bfloat16().float(), labels))
    assert math.isfinite(mse.item())
    torch.testing.assert_close(mse, torch.tensor((300.0**2 + 1.0) / 2))


def test_predictions():
    assert argmax_labels(torch.tensor([[0.1, 2.0, -1.0], [3.0, 0.0, 0.0]])).tolist() == [1, 0]
    values = regression_values(torch.tensor([1.5, -0.25], dtype=torch.bfloat16))
    assert values.dtype == torch.float32 and values.tolist() == [1.5, -0.25]


def test_model_picks_loss_and_predict_for_its_task(tiny_dirs):
    classifier = _load(tiny_dirs["bert"], "3-class")
    assert (classifier.loss_fn, classifier.predict_fn) == (classification_loss, argmax_labels)
    assert classifier.labels == ["bad", "so-so", "good"] and not classifier.is_regression
    regressor = _load(tiny_dirs["bert"], "regression")
    assert (regressor.loss_fn, regressor.predict_fn) == (regression_loss, regression_values)
    assert regressor.labels is None and regressor.config.num_labels == 1


# ---------------------------------------------------------------------------------------
# Seeding: missing weights depend on the seed only
# ---------------------------------------------------------------------------------------


def test_fresh_head_is_identical_for_the_same_seed_whatever_ran_before(tiny_dirs):
    torch.manual_seed(1)
    first = _head(_load(tiny_dirs["electra"], "3-class", seed=7))
    torch.rand(1000)  # the caller's RNG moved on: must not matter
    second = _head(_load(tiny_dirs["electra"], "3-class", seed=7))
    other = _head(_load(tiny_dirs["electra"], "3-class", seed=8))
    assert first.keys() == second.keys() and first
    for name in first:
        assert torch.equal(first[name], second[name])
    assert any(not torch.equal(first[name], other[name]) for name in first)


def test_missing_pooler_is_seeded_too(tmp_path):
    path = make_tiny_model_dir("bert", tmp_path / "no-pooler", pooler=False)
    a, b, c = (_load(path, "2-class", seed=s) for s in (0, 0, 1))
    assert "bert.pooler.dense.weight" in a.fresh_weights
    pooler = "bert.pooler.dense.weight"
    assert torch.equal(a.model.state_dict()[pooler], b.model.state_dict()[pooler])
    assert not torch.equal(a.model.state_dict()[pooler], c.model.state_dict()[pooler])


def test_loader_leaves_the_callers_rng_alone(tiny_dirs):
    torch.manual_seed(3)
    expected = torch.rand(4)
    torch.manual_seed(3)
    _load(tiny_dirs["bert"], "2-class", seed=99)
    assert torch.equal(torch.rand(4), expected)


# ---------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["roberta", "xlm-roberta", "distilbert", "deberta-v2"])
def test_token_type_ids_from_a_bert_style_collator_do_not_break_other_encoders(tiny_dirs, arch):
    """RoBERTa has one segment embedding, DistilBERT none: a pair's 1s must not index past them."""
    model = _load(tiny_dirs[arch], "2-class").eval()
    ids = torch.tensor([[0, 5, 6, 2, 7, 8, 2]])
    types = torch.tensor([[0, 0, 0, 0, 1, 1, 1]])
    with torch.no_grad():
        torch.testing.assert_close(model(ids, torch.ones_like(ids), types), model(ids, torch.ones_like(ids)))


def test_bert_uses_token_type_ids(tiny_dirs):
    model = _load(tiny_dirs["bert"], "2-class").eval()
    ids = torch.tensor([[2, 5, 6, 3, 7, 8, 3]])
    types = torch.tensor([[0, 0, 0, 0, 1, 1, 1]])
    with torch.no_grad():
        assert not torch.allclose(model(ids, torch.ones_like(ids), types), model(ids, torch.ones_like(ids)))


# ---------------------------------------------------------------------------------------
# Refusals
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "labels,regression,match",
    [
        (["only"], False, r"2 or more distinct labels, got \['only'\]"),
        (["a", "a"], False, "2 or more distinct labels"),
        (["a", "b"], True, "either a classifier"),
    ],
)
def test_bad_task_is_refused(tiny_dirs, labels, regression, match):
    with pytest.raises(UsageError, match=match):
        load_classifier(str(tiny_dirs["bert"]), seed=0, labels=labels, regression=regression)


def _save_config_only_model(config, path):
    from transformers import AutoModel

    AutoModel.from_config(config).save_pretrained(path)
    return path


@pytest.mark.parametrize("model_type", ["t5", "bart"])
def test_encoder_decoder_models_are_refused(tmp_path, model_type):
    from transformers import BartConfig, T5Config

    tiny = {
        "t5": T5Config(d_model=32, d_ff=37, num_layers=1, num_heads=2, d_kv=16, vocab_size=100),
        "bart": BartConfig(
            d_model=32,
            encoder_layers=1,
            decoder_layers=1,
            encoder_attention_heads=2,
            decoder_attention_heads=2,
            encoder_ffn_dim=37,
            decoder_ffn_dim=37,
            vocab_size=100,
            max_position_embeddings=64,
        ),
    }[model_type]
    path = _save_config_only_model(tiny, tmp_path / model_type)
    with pytest.raises(UsageError) as info:
        load_classifier(str(path), seed=0, labels=["a", "b"])
    message = str(info.value)
    assert message.startswith(f"--model {path} is an encoder-decoder model ({model_type}); mixft fine-tunes encoders")
    assert "\n" not in message


def test_decoder_without_a_tokenizer_is_refused_in_one_line(tmp_path):
    """A decoder's head needs the padding id the batches use, which only its tokenizer knows."""
    from transformers import GPT2Config

    path = _save_config_only_model(
        GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=100, n_positions=64), tmp_path / "gpt2"
    )
    with pytest.raises(UsageError) as info:
        load_classifier(str(path), seed=0, labels=["a", "b"])
    message = str(info.value)
    assert message.startswith(f"--model {path}: a decoder-only model needs its tokenizer") and "\n" not in message


def test_head_of_another_size_is_replaced_when_new_labels_are_asked_for(tiny_dirs, tmp_path):
    three = _load(tiny_dirs["distilbert"], "3-class")
    three.save_pretrained(tmp_path / "three")
    two = load_classifier(str(tmp_path / "three"), seed=0, labels=["x", "y"])
    assert two.labels == ["x", "y"] and two.config.num_labels == 2
    assert "classifier.weight" in two.fresh_weights  # new size: fresh head
    assert "pre_classifier.weight" not in two.fresh_weights  # same size: kept


def test_encoder_weights_that_do_not_fit_are_refused(tmp_path):
    path = make_tiny_model_dir("bert", tmp_path / "bert")
    config = json.loads((path / "config.json").read_text())
    config["intermediate_size"] = 40  # the saved weights are 37 wide
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(
        UsageError, match=r"the weights do not fit config.json: bert\.encoder\.layer\.0\..*another shape"
    ):
        load_classifier(str(path), seed=0, labels=["a", "b"])


def test_tokenizer_helpers_cover_each_architecture():
    """tests/tiny_models.py itself: every tokenizer knows every toy word as one token."""
    for arch in ARCHITECTURES:
        tokenizer = make_tokenizer(arch)
        for word in ("film", "boring", "great"):
            assert len(tokenizer.tokenize(" " + word if arch == "roberta" else word)) == 1, (arch, word)
