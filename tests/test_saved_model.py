"""--save-model then --eval-only: a fine-tuned model evaluated alone, at each precision."""

import json

from mixft.cli import main


def test_saved_model_evaluates_alone_to_the_same_accuracy(tmp_path, tiny_bert_dir, tiny_data_dir, capsys):
    train_out, eval_out = tmp_path / "train", tmp_path / "eval"
    common = ["--recipe", "bert-sst2", "--data-dir", str(tiny_data_dir), "--batch-size", "4", "--no-progress"]
    assert main([*common, "--model", str(tiny_bert_dir), "--epochs", "2", "--save-model",
                 "--output-dir", str(train_out)]) == 0
    saved = train_out / "model"
    assert (saved / "config.json").is_file() and (saved / "classifier_head.pt").is_file()
    trained = json.loads((train_out / "results.json").read_text())["runs"][0]

    capsys.readouterr()
    assert main([*common, "--model", str(saved), "--eval-only", "--compare", "fp32,bf16",
                 "--output-dir", str(eval_out)]) == 0
    printed = capsys.readouterr().out
    # Was: a training budget in the header and "0.0 samples/s | train 0.0 s" per run.
    assert "budget" not in printed and "--eval-only: no training" in printed
    lines = [line for line in printed.splitlines() if line.startswith("[")]
    assert len(lines) == 2 and all("inference" in line and "no training (--eval-only)" in line for line in lines)
    assert not any("train 0.0 s" in line for line in lines)
    runs = json.loads((eval_out / "results.json").read_text())["runs"]
    assert [r["precision"] for r in runs] == ["fp32", "bf16"]
    assert all(r["steps"] == 0 for r in runs)
    # The same weights in fp32 give exactly the trained run's final evaluation.
    assert runs[0]["eval"]["accuracy"] == trained["eval"]["accuracy"]
    assert runs[0]["eval"]["loss"] == trained["eval"]["loss"]
    assert all(r["eval"]["samples_per_s"] > 0 for r in runs)


def test_eval_only_needs_a_model_and_a_savable_recipe(tmp_path, capsys):
    assert main(["--recipe", "bert-sst2", "--eval-only", "--output-dir", str(tmp_path / "o")]) == 2
    assert "--eval-only needs --model" in capsys.readouterr().err
    assert main(["--recipe", "mlp-synthetic", "--save-model", "--output-dir", str(tmp_path / "o")]) == 2
    assert "no saved-model format" in capsys.readouterr().err
    assert main(["--recipe", "bert-sst2", "--eval-only", "--model", str(tmp_path), "--resume",
                 "--output-dir", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cannot be combined with --resume" in err
