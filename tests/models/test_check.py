"""mixft.models.check: every broken model directory refused in one line naming the file and the cause."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
import torch
from tiny_models import ARCHITECTURES, DECODER_ARCHITECTURES, MAX_POSITIONS, make_tiny_model_dir, toy_batch

from mixft.errors import UsageError
from mixft.models.check import (
    check_max_length,
    check_model,
    max_sequence_length,
    safetensors_shapes,
)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    root = tmp_path_factory.mktemp("pristine")
    return {arch: make_tiny_model_dir(arch, root / arch) for arch in ARCHITECTURES}


@pytest.fixture
def bert_dir(pristine, tmp_path) -> Path:
    """A private copy of the tiny BERT, free to break."""
    return Path(shutil.copytree(pristine["bert"], tmp_path / "bert"))


def _refusal(path, **kwargs) -> str:
    with pytest.raises(UsageError) as info:
        check_model(str(path), **kwargs)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"--model {path}")
    return message


# ---------------------------------------------------------------------------------------
# Good models pass, quickly
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_good_tiny_models_pass(pristine, arch):
    checked = check_model(str(pristine[arch]), max_length=MAX_POSITIONS)
    assert checked.config.model_type == arch
    assert checked.weight_files == ("model.safetensors",)
    assert checked.tokenizer("the film was great")["input_ids"]  # the real tokenizer, loaded once
    assert checked.tokenizer.unk_token_id not in checked.tokenizer("the film was great")["input_ids"]


def test_shipped_model_passes_without_reading_its_tensors():
    from mixft.models.hub import shipped_model_dir

    check_model(str(shipped_model_dir()))  # warm the imports
    start = time.monotonic()
    checked = check_model(str(shipped_model_dir()), max_length=512)
    assert time.monotonic() - start < 5  # headers only: 90 MB of weights are not read
    assert checked.config.model_type == "bert" and checked.max_length == 512
    assert len(checked.tokenizer) == 30522


def test_sharded_checkpoint_passes(pristine, tmp_path):
    from transformers import AutoModel

    AutoModel.from_pretrained(pristine["bert"]).save_pretrained(tmp_path / "sharded", max_shard_size="20KB")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(pristine["bert"] / name, tmp_path / "sharded" / name)
    checked = check_model(str(tmp_path / "sharded"))
    assert len(checked.weight_files) > 1 and all(f.endswith(".safetensors") for f in checked.weight_files)


def test_pytorch_bin_checkpoint_passes_and_its_corruption_is_refused(bert_dir):
    from safetensors.torch import load_file

    state = load_file(bert_dir / "model.safetensors")
    (bert_dir / "model.safetensors").unlink()
    torch.save(state, bert_dir / "pytorch_model.bin")
    assert check_model(str(bert_dir)).weight_files == ("pytorch_model.bin",)

    data = (bert_dir / "pytorch_model.bin").read_bytes()
    (bert_dir / "pytorch_model.bin").write_bytes(data[: len(data) // 2])
    assert "pytorch_model.bin cannot be read (corrupt or truncated)" in _refusal(bert_dir)
    (bert_dir / "pytorch_model.bin").write_bytes(b"")
    assert _refusal(bert_dir).endswith("pytorch_model.bin is empty (0 bytes)")


# ---------------------------------------------------------------------------------------
# Weights
# ---------------------------------------------------------------------------------------


def test_empty_weights(bert_dir):
    (bert_dir / "model.safetensors").write_bytes(b"")
    assert _refusal(bert_dir) == f"--model {bert_dir}: model.safetensors is empty (0 bytes)"


@pytest.mark.parametrize("keep", [0.5, 0.999])
def test_truncated_weights(bert_dir, keep):
    weights = bert_dir / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: int(len(data) * keep)])
    message = _refusal(bert_dir)
    assert f"model.safetensors is truncated ({int(len(data) * keep)} bytes; its tensors need {len(data)})" in message


def test_truncated_inside_the_header(bert_dir):
    (bert_dir / "model.safetensors").write_bytes((bert_dir / "model.safetensors").read_bytes()[:100])
    assert "model.safetensors is truncated (100 bytes; its header alone needs" in _refusal(bert_dir)


@pytest.mark.parametrize(
    "garbage,cause",
    [
        (b"<html>404 Not Found</html>" * 10, "corrupt: not a safetensors file"),
        (
            b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all}" + bytes(64),
            "corrupt: its safetensors header is not valid JSON",
        ),
    ],
)
def test_corrupt_weights(bert_dir, garbage, cause):
    (bert_dir / "model.safetensors").write_bytes(garbage)
    assert f"model.safetensors is {cause}" in _refusal(bert_dir)


def test_header_offsets_that_disagree_with_shapes_are_corrupt(tmp_path):
    header = json.dumps({"w": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 60]}}).encode()
    path = tmp_path / "model.safetensors"
    path.write_bytes(len(header).to_bytes(8, "little") + header + bytes(60))
    with pytest.raises(UsageError, match=r"corrupt: tensor 'w' of shape \[4, 4\] has 60 bytes"):
        safetensors_shapes(path)


def test_weights_that_do_not_fit_the_config(bert_dir):
    config = json.loads((bert_dir / "config.json").read_text())
    (bert_dir / "config.json").write_text(json.dumps({**config, "intermediate_size": 40}))  # the weights: 37
    assert _refusal(bert_dir).endswith(
        "model.safetensors does not fit config.json: tensor encoder.layer.0.intermediate.dense.bias has shape [37], "
        "the config describes [40]"
    )


def test_weights_of_another_architecture(bert_dir, tmp_path):
    from transformers import GPT2Config, GPT2Model

    GPT2Model(GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=80, n_positions=64)).save_pretrained(
        tmp_path / "gpt"
    )
    shutil.copy(tmp_path / "gpt" / "model.safetensors", bert_dir / "model.safetensors")
    assert "model.safetensors holds no tensor of a bert model (weights of another architecture?)" in _refusal(bert_dir)


def test_no_weights(bert_dir):
    (bert_dir / "model.safetensors").unlink()
    assert _refusal(bert_dir).endswith("no model weights (model.safetensors or pytorch_model.bin)")


def test_bad_shard_index(bert_dir):
    (bert_dir / "model.safetensors").unlink()
    (bert_dir / "model.safetensors.index.json").write_text('{"metadata": {}}')
    assert "model.safetensors.index.json is not a valid shard index" in _refusal(bert_dir)


# ---------------------------------------------------------------------------------------
# Config
# ---------------------------------------------------------------------------------------


def test_invalid_config_json(bert_dir):
    (bert_dir / "config.json").write_text('{"model_type": "bert",\n "hidden_size": 32,,}')
    assert _refusal(bert_dir) == (
        f"--model {bert_dir}: config.json is not valid JSON (Expecting property name enclosed in double quotes "
        "at line 2 column 20)"
    )


def test_config_not_an_object(bert_dir):
    (bert_dir / "config.json").write_text("[1, 2]")
    assert _refusal(bert_dir).endswith("config.json must hold a JSON object, found list")


def test_unknown_model_type(bert_dir):
    config = json.loads((bert_dir / "config.json").read_text())
    (bert_dir / "config.json").write_text(json.dumps({**config, "model_type": "bertt"}))
    assert "config.json has model_type 'bertt', which this transformers does not know" in _refusal(bert_dir)


def test_missing_model_type(bert_dir):
    config = json.loads((bert_dir / "config.json").read_text())
    del config["model_type"]
    (bert_dir / "config.json").write_text(json.dumps(config))
    assert "config.json has no model_type" in _refusal(bert_dir)


def test_no_config(bert_dir):
    (bert_dir / "config.json").unlink()
    assert _refusal(bert_dir) == f"--model {bert_dir}: no config.json"


# ---------------------------------------------------------------------------------------
# Tokenizer
# ---------------------------------------------------------------------------------------


def test_no_tokenizer_files(bert_dir):
    """Today transformers builds a 5-token tokenizer here: every word [UNK], accuracy 0.5."""
    from transformers import AutoTokenizer

    for name in ("tokenizer.json", "tokenizer_config.json"):
        (bert_dir / name).unlink()
    silent = AutoTokenizer.from_pretrained(bert_dir)  # the failure this check exists for
    assert len(silent) == 5 and set(silent("the film")["input_ids"][1:-1]) == {silent.unk_token_id}
    assert "no tokenizer files (tokenizer.json, vocab.txt" in _refusal(bert_dir)


def test_tokenizer_of_special_tokens_only(bert_dir):
    from transformers import BertTokenizer

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    BertTokenizer(vocab={t: i for i, t in enumerate(specials)}).save_pretrained(bert_dir)
    assert "the tokenizer has only its 5 special tokens" in _refusal(bert_dir)


def test_vocabulary_smaller_than_the_tokenizer(pristine, tmp_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(pristine["bert"])
    path = make_tiny_model_dir("bert", tmp_path / "small-vocab")  # same tokenizer...
    config = json.loads((path / "config.json").read_text())
    small = len(tokenizer) - 10
    from transformers import BertConfig, BertModel

    BertModel(BertConfig(**{**config, "vocab_size": small})).save_pretrained(path)  # ...10 ids fewer rows
    message = _refusal(path)
    assert f"the tokenizer produces ids up to {len(tokenizer) - 1} but config.json has vocab_size {small}" in message
    # What it prevents: the tokenizer's last ids index past the embedding table.
    from mixft.models.classifiers import load_classifier

    model = load_classifier(str(path), seed=0, labels=["a", "b"])
    with pytest.raises(IndexError):
        model(torch.tensor([[len(tokenizer) - 1]]))


def test_broken_tokenizer_json(bert_dir):
    (bert_dir / "tokenizer.json").write_text("{ broken")
    assert "the tokenizer cannot be loaded:" in _refusal(bert_dir)


# ---------------------------------------------------------------------------------------
# Generative models
# ---------------------------------------------------------------------------------------


def _save_generative(model_type, path):
    from transformers import AutoModel, GPT2Config, T5Config

    config = (
        GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=100, n_positions=64)
        if model_type == "gpt2"
        else T5Config(d_model=32, d_ff=37, num_layers=1, num_heads=2, d_kv=16, vocab_size=100)
    )
    AutoModel.from_config(config).save_pretrained(path)
    return path


def test_decoder_only_models_are_refused_unless_the_caller_takes_them(tmp_path):
    """bert-sst2 keeps its BERT classifier: check_model's default still refuses decoders, naming the alternative."""
    path = _save_generative("gpt2", tmp_path / "gpt2")
    assert _refusal(path) == (
        f"--model {path} is a decoder-only model (gpt2); this recipe fine-tunes encoders "
        "(BERT, RoBERTa, DeBERTa, ...); --recipe text-classification also takes decoder-only models"
    )


@pytest.mark.parametrize("decoders", [False, True])
def test_encoder_decoder_models_are_always_refused(tmp_path, decoders):
    path = _save_generative("t5", tmp_path / "t5")
    takes = "BERT, RoBERTa, DeBERTa, ..." + (" or decoder-only GPT-2, Llama, Qwen2, Mistral, ..." if decoders else "")
    assert _refusal(path, decoders=decoders) == (
        f"--model {path} is an encoder-decoder model (t5); mixft fine-tunes encoders ({takes})"
    )


@pytest.mark.parametrize("arch", DECODER_ARCHITECTURES)
def test_decoder_only_models_pass_when_taken(tmp_path, arch):
    path = make_tiny_model_dir(arch, tmp_path / arch)
    checked = check_model(str(path), max_length=MAX_POSITIONS, decoders=True)
    assert checked.config.model_type == arch and checked.max_length == MAX_POSITIONS
    assert "decoder-only" in _refusal(path)  # the encoder-only default


def test_encoder_configured_as_a_decoder_is_refused(bert_dir):
    """is_decoder makes BERT's attention causal: the [CLS] vector its head reads would see only itself."""
    config = json.loads((bert_dir / "config.json").read_text())
    (bert_dir / "config.json").write_text(json.dumps({**config, "is_decoder": True}))
    for decoders in (False, True):
        assert _refusal(bert_dir, decoders=decoders).endswith(
            "is a bert encoder configured as a decoder (is_decoder: true in config.json); set it to false"
        )


def test_non_text_model_is_refused(tmp_path):
    from transformers import AutoModel, ViTConfig

    AutoModel.from_config(
        ViTConfig(
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=37,
            image_size=32,
            patch_size=16,
        )
    ).save_pretrained(tmp_path / "vit")
    assert "is a vit model, which has no sequence-classification head" in _refusal(tmp_path / "vit")


# ---------------------------------------------------------------------------------------
# max_length against the position table
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_max_sequence_length_is_what_the_model_really_reads(pristine, arch):
    """The computed limit checked against the model itself: limit tokens run, limit + 1 crash."""
    from transformers import AutoConfig, AutoModel

    config = AutoConfig.from_pretrained(pristine[arch])
    limit = max_sequence_length(config)
    model = AutoModel.from_pretrained(pristine[arch]).eval()
    fill = 5  # a toy word's id: never the padding id

    def run(n):
        with torch.no_grad():
            return model(input_ids=torch.full((1, n), fill), attention_mask=torch.ones(1, n, dtype=torch.long))

    if limit is None:  # DeBERTa-v3 style: relative positions only, longer inputs work
        assert arch == "deberta-v2"
        run(2 * MAX_POSITIONS)
        check_max_length(config, 4 * MAX_POSITIONS)
        return
    assert limit == MAX_POSITIONS  # RoBERTa-likes: 66 positions, 2 reserved
    run(limit)
    with pytest.raises((IndexError, RuntimeError)):
        run(limit + 1)
    check_max_length(config, limit)
    with pytest.raises(UsageError) as info:
        check_max_length(config, limit + 1, f"--model {arch}")
    expected = f"--max-length {limit + 1} is longer than --model {arch} can read: at most {limit} tokens"
    assert str(info.value).startswith(expected) and str(info.value).endswith(f"pass --max-length {limit} or less")


def test_check_model_refuses_max_length_over_the_limit(pristine):
    path = pristine["roberta"]
    with pytest.raises(UsageError) as info:
        check_model(str(path), max_length=MAX_POSITIONS + 1)
    assert str(info.value) == (
        f"--max-length {MAX_POSITIONS + 1} is longer than --model {path} can read: at most {MAX_POSITIONS} tokens "
        f"({MAX_POSITIONS + 2} positions, the first 2 reserved); pass --max-length {MAX_POSITIONS} or less"
    )


def test_roberta_base_limit_is_512():
    from transformers import RobertaConfig

    # roberta-base's config.json: 514 positions, padding_idx 1
    assert max_sequence_length(RobertaConfig(max_position_embeddings=514, pad_token_id=1)) == 512


# ---------------------------------------------------------------------------------------
# Repo ids (the cache or the hub)
# ---------------------------------------------------------------------------------------


def test_cached_repo_is_checked_through_the_cache(pristine, isolated_hf):
    from huggingface_hub import constants

    from mixft.models.hub import go_offline

    sha = "0123456789abcdef0123456789abcdef01234567"
    repo_dir = Path(constants.HF_HUB_CACHE) / "models--mixft-test--tiny-roberta"
    shutil.copytree(pristine["roberta"], repo_dir / "snapshots" / sha)
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text(sha)
    go_offline()
    checked = check_model("mixft-test/tiny-roberta")
    assert checked.config.model_type == "roberta"
    batch = toy_batch(checked.tokenizer, "2-class")
    assert batch["input_ids"].shape[0] == 12

    (repo_dir / "snapshots" / sha / "model.safetensors").write_bytes(b"")
    with pytest.raises(UsageError, match=r"^--model mixft-test/tiny-roberta: model.safetensors is empty"):
        check_model("mixft-test/tiny-roberta")


def test_repo_missing_on_the_hub_is_one_line(monkeypatch):
    import transformers.utils.hub as hf_hub

    def not_found(*args, **kwargs):
        raise OSError(
            "roberta-larg is not a local folder and is not a valid model identifier listed on "
            "'https://huggingface.co/models'\nIf this is a private repository, ..."
        )

    monkeypatch.setattr(hf_hub, "cached_file", not_found)
    with pytest.raises(UsageError) as info:
        check_model("roberta-larg")
    assert str(info.value) == (
        "--model roberta-larg: cannot read config.json from the Hugging Face hub: roberta-larg is not a local folder and "
        "is not a valid model identifier listed on 'https://huggingface.co/models'"
    )


# ---------------------------------------------------------------------------------------
# One line means one line: library warnings never precede the refusal
# ---------------------------------------------------------------------------------------


def _out_of_vocab_bos(model_dir: Path, bos: int) -> None:
    cfg = json.loads((model_dir / "config.json").read_text())
    cfg["bos_token_id"] = bos  # transformers warns (logging) when it reads this config
    (model_dir / "config.json").write_text(json.dumps(cfg))


@pytest.fixture
def transformers_records():
    """What transformers' logger hands its handlers (its own stderr handler binds the stream
    it was created with, which pytest's capture fixtures do not see)."""
    import logging

    class Keep(logging.Handler):
        def __init__(self):
            super().__init__()
            self.messages = []

        def emit(self, record):
            self.messages.append(record.getMessage())

    lib = logging.getLogger("transformers")
    keep = Keep()
    lib.addHandler(keep)
    yield keep.messages
    lib.removeHandler(keep)


def test_library_warning_of_a_refused_model_is_not_shown(bert_dir, transformers_records):
    # transformers' warning_once remembers its messages: a bos id no other test uses.
    _out_of_vocab_bos(bert_dir, 7_654_321)
    (bert_dir / "model.safetensors").write_bytes(b"")
    message = _refusal(bert_dir)
    assert "model.safetensors is empty" in message
    assert not [m for m in transformers_records if "7654321" in m]


def test_library_warning_of_an_accepted_model_still_shown(bert_dir, transformers_records):
    _out_of_vocab_bos(bert_dir, 7_654_322)
    check_model(str(bert_dir))
    shown = [m for m in transformers_records if "7654322" in m]
    assert len(shown) == 1 and "bos_token_id must be `None` or an integer within the vocabulary" in shown[0]


def test_held_python_warnings_dropped_on_refusal_shown_on_pass():
    import warnings

    from mixft.models.check import held_library_warnings

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with pytest.raises(UsageError):
            with held_library_warnings():
                warnings.warn("from a library, before the refusal", UserWarning, stacklevel=1)
                raise UsageError("--model M: refused")
        assert seen == []
        with held_library_warnings():
            warnings.warn("from a library, model accepted", UserWarning, stacklevel=1)
        assert [str(w.message) for w in seen] == ["from a library, model accepted"]
