"""Decoder-only sequence classifiers (GPT-2, Llama, Qwen2, Mistral): padding, pooling, fp32 weights, round trips."""

from __future__ import annotations

import json
import math

import pytest
import torch
from tiny_models import DECODER_ARCHITECTURES, TOY_ROWS, make_tiny_model_dir, toy_batch

from mixft.errors import UsageError
from mixft.models.classifiers import load_classifier, pad_for_classification
from mixft.train.trainer import Trainer

LABELS = ["bad", "so-so", "good"]
# Published decoders are mostly saved in half precision; mixft must train fp32 master weights.
SAVED_DTYPE = {"gpt2": torch.float16, "llama": torch.bfloat16, "qwen2": torch.bfloat16, "mistral": torch.float32}
# 16 texts of different lengths: a batch of them is mostly padding for the short ones.
TEXTS = [text for text, _, _ in TOY_ROWS] + ["it", "the film", "a very very boring and not fun plot", "great"]


@pytest.fixture(scope="module")
def decoder_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny-decoders")
    return {arch: make_tiny_model_dir(arch, root / arch, dtype=SAVED_DTYPE[arch]) for arch in DECODER_ARCHITECTURES}


def _tokenizer(path):
    from transformers import AutoConfig, AutoTokenizer

    return pad_for_classification(AutoTokenizer.from_pretrained(path), AutoConfig.from_pretrained(path))


def _inputs(batch):
    return {k: v for k, v in batch.items() if k != "labels"}


def _predict_one_by_one(model, tokenizer, texts):
    with torch.no_grad():
        return torch.cat([model(**tokenizer([text], return_tensors="pt")) for text in texts])


@pytest.mark.parametrize("arch", DECODER_ARCHITECTURES)
def test_trains_saves_and_reloads_with_identical_predictions(decoder_dirs, tmp_path, arch):
    tokenizer = _tokenizer(decoder_dirs[arch])
    model = load_classifier(str(decoder_dirs[arch]), seed=0, labels=LABELS, tokenizer=tokenizer)
    assert all(p.dtype == torch.float32 for p in model.parameters())  # whatever the checkpoint's dtype
    assert model.config.pad_token_id == tokenizer.pad_token_id is not None
    assert model.fresh_weights == ("score.weight",)  # the pooled token's head is new, the body is not

    batch = toy_batch(tokenizer, "3-class")
    trainer = Trainer(
        model,
        lambda params: torch.optim.AdamW(params, lr=1e-2),
        model.loss_fn,
        [batch] * 4,
        eval_loader=[batch],
        predict_fn=model.predict_fn,
        precision="fp32",
        device="cpu",
        epochs=1,
        seed=0,
    )
    result = trainer.fit()
    losses = [float(x) for x in trainer.state.history["loss"]]
    assert len(losses) == 4 and all(math.isfinite(x) for x in losses) and losses[-1] < losses[0]
    assert 0.0 <= result.eval["accuracy"] <= 1.0

    model.eval()
    with torch.no_grad():
        outputs = model(**_inputs(batch))
    saved = tmp_path / "saved"
    model.save_pretrained(saved)
    tokenizer.save_pretrained(saved)
    config = json.loads((saved / "config.json").read_text())
    assert config["pad_token_id"] == tokenizer.pad_token_id and config["id2label"]["2"] == "good"

    reloaded = load_classifier(str(saved), seed=123).eval()  # --eval-only's path: task from the config
    assert reloaded.labels == LABELS and not reloaded.untrained
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**_inputs(batch)), outputs, rtol=0, atol=0)


@pytest.mark.parametrize("arch", DECODER_ARCHITECTURES)
def test_predictions_do_not_depend_on_batch_size_or_padding(decoder_dirs, arch):
    tokenizer = _tokenizer(decoder_dirs[arch])
    model = load_classifier(str(decoder_dirs[arch]), seed=0, labels=LABELS, tokenizer=tokenizer).eval()
    alone = _predict_one_by_one(model, tokenizer, TEXTS)  # batch 1: no padding at all
    batch = tokenizer(TEXTS, padding=True, pad_to_multiple_of=8, return_tensors="pt")
    assert len(TEXTS) == 16 and (batch["attention_mask"] == 0).sum() > 16  # real padding in the batch
    with torch.no_grad():
        together = model(**batch)
    torch.testing.assert_close(together, alone, rtol=1e-5, atol=1e-5)
    assert (together - together.mean(0)).abs().max() > 1e-3  # the texts do get different logits


def test_left_padding_would_make_gpt2_depend_on_its_batch(decoder_dirs):
    """Why pad_for_classification pads on the right: GPT-2's absolute positions shift under left padding."""
    tokenizer = _tokenizer(decoder_dirs["gpt2"])
    model = load_classifier(str(decoder_dirs["gpt2"]), seed=0, labels=LABELS, tokenizer=tokenizer).eval()
    alone = _predict_one_by_one(model, tokenizer, TEXTS)
    tokenizer.padding_side = "left"
    with torch.no_grad():
        shifted = model(**tokenizer(TEXTS, padding=True, return_tensors="pt"))
    assert (shifted - alone).abs().max() > 1e-3


@pytest.mark.parametrize("arch", DECODER_ARCHITECTURES)
def test_tokenizer_pads_on_the_right_with_eos_when_it_has_no_pad_token(decoder_dirs, arch):
    from transformers import AutoTokenizer

    original = AutoTokenizer.from_pretrained(decoder_dirs[arch])
    had_pad = original.pad_token
    assert (had_pad is None) == (arch != "qwen2")  # like the real ones
    tokenizer = _tokenizer(decoder_dirs[arch])
    assert tokenizer.padding_side == "right"
    assert tokenizer.pad_token == (had_pad or tokenizer.eos_token)
    ids = tokenizer(["it", "the film was great"], padding=True)["input_ids"]
    assert ids[0][-1] == tokenizer.pad_token_id and ids[0][0] != tokenizer.pad_token_id


def test_llama_tokenizer_padding_on_the_left_is_turned_right(decoder_dirs):
    from transformers import AutoTokenizer

    assert AutoTokenizer.from_pretrained(decoder_dirs["llama"]).padding_side == "left"
    assert _tokenizer(decoder_dirs["llama"]).padding_side == "right"


def test_loader_takes_the_padding_id_from_the_tokenizer_it_is_given(decoder_dirs):
    """The pad id the head looks for must be the one the batches hold, even where config.json says another."""
    from transformers import AutoTokenizer

    tokenizer = _tokenizer(decoder_dirs["llama"])
    tokenizer.pad_token = "<unk>"
    model = load_classifier(str(decoder_dirs["llama"]), seed=0, labels=LABELS, tokenizer=tokenizer)
    assert model.config.pad_token_id == tokenizer.convert_tokens_to_ids("<unk>") != tokenizer.eos_token_id
    default = load_classifier(str(decoder_dirs["llama"]), seed=0, labels=LABELS)  # the saved tokenizer's: EOS
    assert default.config.pad_token_id == AutoTokenizer.from_pretrained(decoder_dirs["llama"]).eos_token_id


def test_decoders_get_no_segment_ids_and_no_generation_cache(decoder_dirs):
    """GPT-2 would add segment ids' *word* embeddings; a classifier never reuses a key/value cache."""
    tokenizer = _tokenizer(decoder_dirs["gpt2"])
    model = load_classifier(str(decoder_dirs["gpt2"]), seed=0, labels=LABELS, tokenizer=tokenizer).eval()
    assert model.config.use_cache is False
    batch = tokenizer(["the film", "boring"], padding=True, return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(model(**batch, token_type_ids=torch.ones_like(batch["input_ids"])), model(**batch))


def test_bf16_autocast_runs_the_decoder_in_bf16_and_the_loss_in_fp32(decoder_dirs):
    tokenizer = _tokenizer(decoder_dirs["qwen2"])
    model = load_classifier(str(decoder_dirs["qwen2"]), seed=0, labels=LABELS, tokenizer=tokenizer)
    batch = toy_batch(tokenizer, "3-class")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(**_inputs(batch))
        loss = model.loss_fn(logits, batch["labels"])
    assert logits.dtype == torch.bfloat16 and loss.dtype == torch.float32
    loss.backward()
    assert all(p.grad.dtype == torch.float32 for p in model.parameters() if p.grad is not None)


def test_tokenizer_without_pad_or_eos_is_refused_in_one_line(decoder_dirs):
    from transformers import AutoConfig, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(decoder_dirs["gpt2"])
    tokenizer.eos_token = None
    with pytest.raises(UsageError) as info:
        pad_for_classification(tokenizer, AutoConfig.from_pretrained(decoder_dirs["gpt2"]), "--model tiny-gpt2")
    assert str(info.value) == (
        "--model tiny-gpt2: the tokenizer has neither a padding token nor an end-of-text token to pad with"
    )


def test_encoder_tokenizers_are_left_as_they_are(tmp_path):
    from transformers import AutoConfig, AutoTokenizer

    path = make_tiny_model_dir("bert", tmp_path / "bert")
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"  # an odd choice, but not ours to change for an encoder
    assert pad_for_classification(tokenizer, AutoConfig.from_pretrained(path)).padding_side == "left"
