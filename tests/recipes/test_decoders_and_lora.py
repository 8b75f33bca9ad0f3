"""Decoder-only classifiers and --lora through the real CLI, in-process, on tiny models made here.

Each decoder (GPT-2, Llama, Qwen2, Mistral) trains, saves and is evaluated again from the
saved directory with the same figures; --lora on an encoder and a decoder trains adapters
only, saves them small and reloads them onto the base; bad LoRA options and encoder-decoder
models stop before any work with one line (exit 2).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from mixft.cli.main import main
from tests.cli_runs import recipe_args
from tests.recipes.test_text_classification import three_class_csv
from tests.tiny_models import DECODER_ARCHITECTURES, make_tiny_model_dir


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny-decoders-and-bert")
    return {arch: make_tiny_model_dir(arch, root / arch) for arch in ("bert", *DECODER_ARCHITECTURES)}


@pytest.fixture()
def data(tmp_path) -> list[str]:
    train, dev = three_class_csv(tmp_path)  # 24 training rows, 12 evaluation rows, 3 string labels
    return ["--train-file", str(train), "--validation-file", str(dev)]


def run(out: Path, model: Path, *args: str, batch: int = 4) -> tuple[int, dict]:
    code = main(
        recipe_args("text-classification", model, [], out, args, {"batch_size": batch, "epochs": 1, "lr": "1e-3"})
    )
    doc = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else {}
    return code, doc


def header_params(printed: str) -> tuple[int, int, str]:
    """(trainable, total, the whole line) from the run header's ``params`` line."""
    line = next(line for line in printed.splitlines() if line.strip().startswith("params"))
    found = re.search(r"params\s+([\d,]+) trainable / ([\d,]+) total", line)
    return int(found[1].replace(",", "")), int(found[2].replace(",", "")), line


def one_line_error(capsys) -> str:
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("arch", DECODER_ARCHITECTURES)
def test_decoder_trains_saves_and_evaluates_again_with_the_same_figures(tmp_path, models, data, arch, capsys):
    code, trained = run(tmp_path / "out", models[arch], *data, "--save-model")
    assert code == 0, capsys.readouterr().err
    (r,) = trained["runs"]
    assert r["steps"] == 6 and r["task"]["names"] == ["negative", "neutral", "positive"]
    saved = tmp_path / "out" / "model"
    config = json.loads((saved / "config.json").read_text())
    assert config["model_type"] == arch and config["pad_token_id"] is not None
    trainable, total, line = header_params(capsys.readouterr().out)
    assert trainable == total > 0 and "LoRA" not in line  # full fine-tuning: every weight trains

    # Evaluated alone, at another batch size (1 example per batch: no padding at all).
    code, again = run(tmp_path / "eval", saved, *data, "--eval-only", batch=1)
    assert code == 0, capsys.readouterr().err
    (e,) = again["runs"]
    assert e["steps"] == 0
    assert e["eval"]["accuracy"] == r["eval"]["accuracy"] and e["eval"]["f1"] == r["eval"]["f1"]
    assert e["eval"]["loss"] == pytest.approx(r["eval"]["loss"], rel=1e-5)


@pytest.mark.parametrize("arch", ["bert", "gpt2"])
def test_lora_trains_adapters_saves_them_small_and_reloads_them(tmp_path, models, data, arch, capsys):
    code, trained = run(tmp_path / "out", models[arch], *data, "--lora", "--lora-r", "4", "--save-model")
    assert code == 0, capsys.readouterr().err
    (r,) = trained["runs"]
    assert r["steps"] == 6 and r["config"]["lora"] is True and r["config"]["lora_r"] == 4
    trainable, total, params = header_params(capsys.readouterr().out)
    assert 0 < trainable < total / 4 and "LoRA r=4, alpha 16" in params
    assert ("query, value" if arch == "bert" else "c_attn") in params

    saved = tmp_path / "out" / "model"
    assert (saved / "adapter_model.safetensors").is_file() and not (saved / "model.safetensors").exists()
    recorded = json.loads((saved / "lora_classifier.json").read_text())
    assert Path(recorded["base_model"]) == models[arch].resolve()
    full = (models[arch] / "model.safetensors").stat().st_size
    assert (saved / "adapter_model.safetensors").stat().st_size < full / 3

    code, again = run(tmp_path / "eval", saved, *data, "--eval-only")
    assert code == 0, capsys.readouterr().err
    (e,) = again["runs"]
    assert e["steps"] == 0 and e["eval"]["accuracy"] == r["eval"]["accuracy"]
    assert e["eval"]["loss"] == pytest.approx(r["eval"]["loss"], rel=1e-5)
    assert f"LoRA on {models[arch].resolve()}" in e["model"]
    if arch == "bert":
        # In bf16 weights too (was: exit 1, "optimizer got an empty parameter list": bf16-pure's Kahan AdamW
        # was built for a run whose every weight is frozen).
        code, pure = run(tmp_path / "pure", saved, *data, "--eval-only", "--precision", "bf16-pure")
        assert code == 0, capsys.readouterr().err
        (p,) = pure["runs"]
        assert (p["precision"], p["param_dtype"], p["steps"]) == ("bf16-pure", "bfloat16", 0)
        assert p["eval"]["loss"] == pytest.approx(r["eval"]["loss"], abs=0.05)


def test_lora_head_and_adapters_learn_and_the_base_stays_as_it_was(tmp_path, models, data):
    from safetensors.torch import load_file

    before = load_file(models["bert"] / "model.safetensors")
    code, _ = run(tmp_path / "out", models["bert"], *data, "--lora", "--save-model")
    assert code == 0
    adapters = load_file(tmp_path / "out" / "model" / "adapter_model.safetensors")
    lora_b = [t for name, t in adapters.items() if "lora_B" in name]
    assert lora_b and all(t.abs().sum() > 0 for t in lora_b)  # B starts at zero: nonzero means it trained
    assert any("classifier" in name for name in adapters)  # the head is saved with the adapters
    after = load_file(models["bert"] / "model.safetensors")
    assert all((before[k] == after[k]).all() for k in before)


def test_compare_fp32_bf16_with_lora(tmp_path, models, data, capsys):
    code, doc = run(tmp_path / "out", models["gpt2"], *data, "--lora", "--compare", "fp32,bf16")
    assert code == 0, capsys.readouterr().err
    assert [r["precision"] for r in doc["runs"]] == ["fp32", "bf16"]
    assert all(r["steps"] == 6 and r["config"]["lora"] for r in doc["runs"])


def test_glue_takes_a_decoder_with_lora(tmp_path, isolated_hf, models, capsys):
    code = main(
        [
            "--recipe",
            "glue",
            "--task",
            "sst2",
            "--model",
            str(models["llama"]),
            "--lora",
            "--max-train-samples",
            "16",
            "--max-eval-samples",
            "16",
            "--batch-size",
            "8",
            "--max-steps",
            "2",
            "--output-dir",
            str(tmp_path / "out"),
            "--no-progress",
        ]
    )
    assert code == 0, capsys.readouterr().err
    (r,) = json.loads((tmp_path / "out" / "results.json").read_text())["runs"]
    assert r["steps"] == 2 and r["task"]["glue_task"] == "sst2" and r["config"]["lora"]


@pytest.mark.parametrize(
    "args,message",
    [
        (["--lora-r", "4"], "--lora-r needs --lora"),
        (["--lora-dropout", "0.1"], "--lora-dropout needs --lora"),
        (["--lora", "--lora-dropout", "1"], "--lora-dropout: must be a number >= 0 and below 1, got '1'"),
        (["--lora", "--lora-r", "0"], "--lora-r: must be a positive integer, got '0'"),
    ],
)
def test_lora_options_are_checked_in_one_line(tmp_path, models, data, capsys, args, message):
    code, _ = run(tmp_path / "out", models["bert"], *data, *args)
    assert code == 2 and message in one_line_error(capsys)
    assert not (tmp_path / "out").exists()


def test_unknown_target_modules_list_the_linear_layers(tmp_path, models, data, capsys):
    code, _ = run(tmp_path / "out", models["llama"], *data, "--lora", "--lora-target-modules", "query,value")
    line = one_line_error(capsys)
    assert code == 2 and "llama has no Linear layer named query, value" in line
    assert "q_proj" in line and "v_proj" in line and "down_proj" in line and "score" not in line.split("layers:")[1]


def test_eval_only_with_lora_is_refused(tmp_path, models, data, capsys):
    code, _ = run(tmp_path / "out", models["bert"], *data, "--eval-only", "--lora")
    assert code == 2 and "a saved LoRA directory is loaded as it is; drop --lora" in one_line_error(capsys)


def test_a_saved_lora_directory_is_not_trained_as_a_model(tmp_path, models, data, capsys):
    code, _ = run(tmp_path / "out", models["bert"], *data, "--lora", "--save-model", "--max-steps", "1")
    assert code == 0
    capsys.readouterr()
    code, _ = run(tmp_path / "again", tmp_path / "out" / "model", *data)
    assert code == 2 and "is a saved LoRA adapter" in one_line_error(capsys)


def test_a_saved_lora_directory_whose_base_is_gone_names_the_file_that_records_it(tmp_path, models, data, capsys):
    code, _ = run(tmp_path / "out", models["bert"], *data, "--lora", "--save-model", "--max-steps", "1")
    assert code == 0
    capsys.readouterr()
    saved = tmp_path / "out" / "model"
    recorded = json.loads((saved / "lora_classifier.json").read_text())
    recorded["base_model"] = str(tmp_path / "moved-away")
    (saved / "lora_classifier.json").write_text(json.dumps(recorded))
    code, _ = run(tmp_path / "eval", saved, *data, "--eval-only")
    # Was: "--model <tmp>/moved-away: no such directory", a path the user never typed.
    assert code == 2
    line = one_line_error(capsys)
    assert f"--model {saved}: its LoRA adapters sit on the base model lora_classifier.json records" in line
    assert "moved-away: no such directory" in line


def test_lora_is_refused_by_bert_sst2(tmp_path, models, capsys):
    code = main(
        [
            "--recipe",
            "bert-sst2",
            "--model",
            str(models["bert"]),
            "--lora",
            "--output-dir",
            str(tmp_path / "out"),
            "--no-progress",
        ]
    )
    assert code == 2 and "--lora: not used by recipe bert-sst2" in one_line_error(capsys)


def test_bert_sst2_still_refuses_a_decoder(tmp_path, models, capsys):
    code = main(
        [
            "--recipe",
            "bert-sst2",
            "--model",
            str(models["gpt2"]),
            "--max-train-samples",
            "8",
            "--output-dir",
            str(tmp_path / "out"),
            "--no-progress",
        ]
    )
    assert code == 2 and "is a decoder-only model (gpt2)" in one_line_error(capsys)


@pytest.mark.parametrize("model_type", ["t5", "bart"])
def test_encoder_decoder_models_are_refused(tmp_path, data, capsys, model_type):
    from transformers import AutoModel, BartConfig, T5Config

    config = {
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
    path = tmp_path / model_type
    AutoModel.from_config(config).save_pretrained(path)
    capsys.readouterr()  # transformers' own saving progress bar
    code, _ = run(tmp_path / "out", path, *data)
    assert code == 2 and f"is an encoder-decoder model ({model_type})" in one_line_error(capsys)
