"""A real fine-tuning run through the CLI, in-process, on a tiny model (issue 20).

Evaluation during training, the best model (--load-best) and early stopping, TensorBoard
through --report-to, --predict-file, --config and OUTPUT_DIR/config.yaml, resume with the
best-model state, --save-total-limit and the time spent writing checkpoints.

The overfitting run: the validation file holds the training sentences with their labels
swapped, so the better the model learns the training data, the worse it scores on
validation; the best evaluation comes before the last one.
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
from pathlib import Path

import pytest
import torch
from conftest import without_timings

from mixft.callbacks.checkpointer import Checkpointer
from mixft.cli.main import build_parser, main
from mixft.train.checkpoint import load_checkpoint
from tests.cli_runs import text_classification_args
from tests.data_files import write_csv
from tests.tiny_models import TOY_ROWS, make_tiny_model_dir

NAMES = ("negative", "positive")


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return make_tiny_model_dir("bert", tmp_path_factory.mktemp("tiny") / "bert")


@pytest.fixture
def data(tmp_path) -> tuple[Path, Path]:
    rows = [(t, NAMES[int(c == 2)]) for t, c, _ in TOY_ROWS]
    swapped = [(t, NAMES[1 - NAMES.index(label)]) for t, label in rows]
    return write_csv(tmp_path / "train.csv", ["text", "label"], rows * 2), write_csv(
        tmp_path / "dev.csv", ["text", "label"], swapped
    )


def run(out: Path, model: Path, data: tuple[Path, Path], *args: str) -> tuple[int, dict]:
    train, dev = data
    code = main(text_classification_args(model, train, dev, out, *args, batch_size=4, lr="0.003"))
    doc = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else {}
    return code, doc


def metrics_of(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if k not in ("time_s", "samples_per_s")}


# 24 training rows, batch 4: 6 optimizer steps per epoch.
OVERFIT = ("--epochs", "3", "--eval-steps", "2", "--metric-for-best", "loss")


def test_best_is_not_last_and_the_saved_model_is_the_best_one(tmp_path, model, data, capsys):
    code, doc = run(tmp_path / "out", model, data, *OVERFIT, "--save-model")
    assert code == 0, capsys.readouterr().err
    (r,) = doc["runs"]
    losses = [e["loss"] for e in r["eval_history"]]
    assert r["best"]["loaded"] and r["best"]["metric"] == "loss"
    assert r["best"]["metrics"]["loss"] == min(losses)
    assert r["best"]["step"] < r["last"]["step"] == r["steps"] == 18  # the premise: validation gets worse
    assert r["last"]["metrics"]["loss"] == losses[-1] > r["eval"]["loss"]
    assert r["eval"] == r["best"]["metrics"]  # the final eval is the best evaluation's
    assert "(best, step" in capsys.readouterr().out
    # The saved model is the best one: evaluated alone, it scores the best evaluation's figures.
    code, again = run(tmp_path / "eval", tmp_path / "out" / "model", data, "--eval-only")
    assert code == 0
    reloaded = metrics_of(again["runs"][0]["eval"])
    assert reloaded["accuracy"] == r["best"]["metrics"]["accuracy"]
    assert reloaded["loss"] == pytest.approx(r["best"]["metrics"]["loss"], rel=1e-5)
    assert reloaded["loss"] != pytest.approx(r["last"]["metrics"]["loss"], rel=1e-3)


def test_one_evaluation_does_not_load_best_and_no_load_best_keeps_the_last(tmp_path, model, data):
    code, doc = run(tmp_path / "once", model, data, "--epochs", "1")
    assert code == 0
    assert doc["runs"][0]["best"]["loaded"] is False  # --load-best's default: off for a single evaluation
    code, doc = run(tmp_path / "off", model, data, *OVERFIT, "--no-load-best")
    (r,) = doc["runs"]
    assert r["best"]["loaded"] is False and r["eval"] == r["last"]["metrics"] != r["best"]["metrics"]


def test_early_stopping_fires_at_the_patience_th_evaluation_without_improvement(tmp_path, model, data, capsys):
    code, doc = run(tmp_path / "out", model, data, *OVERFIT, "--eval-steps", "1", "--early-stopping-patience", "2")
    assert code == 0
    (r,) = doc["runs"]
    assert r["stop_kind"] == "early_stopping" and r["steps"] < 18
    # Replay the rule on the recorded evaluations: the stop is at the first evaluation that is
    # the 2nd in a row without a new best, and it is the run's last.
    best, without, fired = None, 0, None
    for i, entry in enumerate(r["eval_history"]):
        if best is None or entry["loss"] < best:
            best, without = entry["loss"], 0
        else:
            without += 1
            if without == 2:
                fired = i
                break
    assert fired == len(r["eval_history"]) - 1 and r["eval_history"][fired]["step"] == r["steps"]
    assert r["eval"]["loss"] == best  # the best model, not the one that stopped
    assert ", early stopping" in capsys.readouterr().out


def test_early_stopping_is_marked_in_a_comparison_report(tmp_path, model, data):
    code, doc = run(
        tmp_path / "out",
        model,
        data,
        *OVERFIT,
        "--eval-steps",
        "1",
        "--early-stopping-patience",
        "2",
        "--compare",
        "fp32,bf16",
    )
    assert code == 0
    assert all(r["stop_kind"] == "early_stopping" and r["best"]["loaded"] for r in doc["runs"])
    report = (tmp_path / "out" / "report.md").read_text()
    assert "compared at its best evaluation by loss" in report and "Early stopping ended fp32, bf16" in report
    assert "early stopping: eval loss did not improve" in report


def test_tensorboard_event_file_from_a_cli_run_holds_loss_per_step_and_eval_metrics(tmp_path, model, data):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    code, doc = run(tmp_path / "out", model, data, "--epochs", "2", "--eval-steps", "3", "--report-to", "tensorboard")
    assert code == 0
    (r,) = doc["runs"]
    events = EventAccumulator(str(tmp_path / "out" / "tensorboard" / "fp32-seed0"))
    events.Reload()
    loss = events.Scalars("train/loss")
    assert [e.step for e in loss] == list(range(1, r["steps"] + 1))
    assert [e.value for e in loss] == pytest.approx(r["history"]["loss"], rel=1e-6)
    accuracy = events.Scalars("eval/accuracy")
    assert [(e.step, e.value) for e in accuracy] == [
        (h["step"], pytest.approx(h["accuracy"])) for h in r["eval_history"]
    ]
    assert {"train/learning_rate", "train/grad_norm", "eval/loss", "eval/f1"} <= set(events.Tags()["scalars"])
    # The run's options reach the tracker from the run layer: results.json's config, with this run's precision and seed.
    from tensorboard.plugins.hparams import plugin_data_pb2

    content = events.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    hp = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info.hparams
    assert hp["config.precision"].string_value == "fp32" and hp["config.seed"].number_value == r["seed"]
    assert hp["config.eval_steps"].number_value == r["config"]["eval_steps"] == 3
    assert hp["config.recipe"].string_value == r["config"]["recipe"]


def test_predictions_keep_input_order_and_label_names(tmp_path, model, data):
    code, doc = run(tmp_path / "out", model, data, "--epochs", "1", "--save-model")
    assert code == 0
    # results.json's per-example lists are in the validation file's row order (was: its longest-first batches').
    with data[1].open(encoding="utf-8") as f:
        dev_labels = [NAMES.index(row["label"]) for row in csv.DictReader(f)]
    assert dev_labels != sorted(dev_labels) and doc["runs"][0]["eval_labels"] == dev_labels
    # Lengths vary so that the length-sorted batches are not in input order.
    texts = [
        "it is fine",
        "great acting and a fun plot and a really good movie",
        "bad",
        "the plot was boring",
        "a very bad film and an awful plot",
        "fun",
    ]
    new = write_csv(tmp_path / "new.csv", ["id", "text"], [(f"r{i}", t) for i, t in enumerate(texts)])
    backwards = write_csv(
        tmp_path / "backwards.csv", ["id", "text"], [(f"r{i}", t) for i, t in reversed(list(enumerate(texts)))]
    )
    outputs = {}
    for name, source in (("forward", new), ("backward", backwards)):
        code, doc = run(tmp_path / name, tmp_path / "out" / "model", data, "--eval-only", "--predict-file", str(source))
        assert code == 0
        with (tmp_path / name / "predictions.csv").open(encoding="utf-8") as f:
            outputs[name] = list(csv.DictReader(f))
        assert doc["runs"][0]["predict"]["rows"] == len(texts) and doc["runs"][0]["predict"]["metrics"] is None
    forward, backward = outputs["forward"], outputs["backward"]
    assert [row["id"] for row in forward] == [f"r{i}" for i in range(len(texts))]  # input order
    assert {row["label"] for row in forward} <= set(NAMES)
    assert all(0.5 <= float(row["probability"]) <= 1 for row in forward)
    # Each input gets the same prediction whichever position it had in the file.
    by_id = {row["id"]: row for row in backward}
    for row in forward:
        assert by_id[row["id"]]["label"] == row["label"]
        assert float(by_id[row["id"]]["probability"]) == pytest.approx(float(row["probability"]), rel=1e-5)


def test_predict_file_rows_are_cut_to_what_the_model_reads(tmp_path, model, data):
    # Was: the predict file was cut at 128 tokens (the tokenizer's limit) while the tiny model reads
    # 64 positions; a long row then indexed past the position embeddings. Now it is cut like the
    # training data, to what the recipe chose for this model.
    long_text = " ".join(["a fun plot and great acting"] * 60)  # ~300 tokens
    source = write_csv(tmp_path / "long.csv", ["id", "text"], [("short", "bad"), ("long", long_text)])
    code, doc = run(tmp_path / "out", model, data, "--epochs", "1", "--predict-file", str(source))
    assert code == 0
    assert doc["runs"][0]["predict"]["rows"] == 2
    with (tmp_path / "out" / "predictions.csv").open(encoding="utf-8") as f:
        assert [row["id"] for row in csv.DictReader(f)] == ["short", "long"]


def test_predict_file_with_labels_reports_its_metrics_per_compared_run(tmp_path, model, data):
    _, dev = data
    code, doc = run(
        tmp_path / "out", model, data, "--epochs", "1", "--compare", "fp32,bf16", "--predict-file", str(dev)
    )
    assert code == 0
    for r in doc["runs"]:
        predict = r["predict"]
        assert Path(predict["output"]).name == f"predictions-{r['precision']}-seed0.csv"
        assert metrics_of(predict["metrics"]) == pytest.approx(metrics_of(r["eval"]))  # the same file as validation


def test_a_config_run_and_the_same_flags_give_identical_eval(tmp_path, model, data):
    code, flags = run(tmp_path / "flags", model, data, "--epochs", "2", "--eval-steps", "4", "--seed", "3")
    assert code == 0
    written = tmp_path / "flags" / "config.yaml"
    assert "eval_steps: 4" in written.read_text()
    code = main(["--config", str(written), "--output-dir", str(tmp_path / "config"), "--no-progress"])
    assert code == 0
    again = json.loads((tmp_path / "config" / "results.json").read_text())
    assert metrics_of(again["runs"][0]["eval"]) == metrics_of(flags["runs"][0]["eval"])
    assert without_timings(again["runs"][0]["eval_history"]) == without_timings(flags["runs"][0]["eval_history"])
    # Flags given on the command line win over the file.
    code = main(["--config", str(written), "--output-dir", str(tmp_path / "one"), "--epochs", "1", "--no-progress"])
    assert code == 0
    assert json.loads((tmp_path / "one" / "results.json").read_text())["runs"][0]["steps"] == 6


def test_resume_keeps_the_best_model_state_bit_exactly(tmp_path, model, data, monkeypatch):
    copies: dict[int, Path] = {}
    save = Checkpointer.save

    def save_and_copy(self, trainer):
        path = save(self, trainer)
        copies[trainer.state.step] = Path(shutil.copy(path, tmp_path / f"step{trainer.state.step}.pt"))
        return path

    monkeypatch.setattr(Checkpointer, "save", save_and_copy)
    code, ref = run(tmp_path / "ref", model, data, *OVERFIT, "--checkpoint-every", "1")
    monkeypatch.setattr(Checkpointer, "save", save)
    assert code == 0
    best_step = ref["runs"][0]["best"]["step"]
    resume_at = best_step + 3  # the checkpoint holds a best evaluation from before it
    saved = load_checkpoint(copies[resume_at])["states"]["best_model"]
    assert saved["step"] == best_step and saved["weights"] is not None
    out = tmp_path / "resumed"
    out.mkdir()
    shutil.copy(copies[resume_at], out / "checkpoint.pt")
    code, resumed = run(out, model, data, *OVERFIT, "--checkpoint-every", "1", "--resume")
    assert code == 0
    r, q = ref["runs"][0], resumed["runs"][0]
    assert (
        without_timings(q["best"]) == without_timings(r["best"])
        and q["best"]["metrics"]["loss"] == r["best"]["metrics"]["loss"]
    )
    assert without_timings(q["eval"]) == without_timings(r["eval"])
    final_ref = load_checkpoint(tmp_path / "ref" / "checkpoint.pt")["states"]["best_model"]
    final_resumed = load_checkpoint(out / "checkpoint.pt")["states"]["best_model"]
    assert final_resumed["evaluations"] == final_ref["evaluations"]
    for k, v in final_ref["weights"].items():
        assert torch.equal(final_resumed["weights"][k], v), k


def test_save_total_limit_keeps_the_newest_k_step_checkpoints_and_the_write_time_is_reported(
    tmp_path, model, data, capsys
):
    code, doc = run(
        tmp_path / "out", model, data, "--epochs", "2", "--checkpoint-every", "1", "--save-total-limit", "3"
    )
    assert code == 0
    kept = sorted(p.name for p in (tmp_path / "out").glob("checkpoint-step*.pt"))
    assert kept == ["checkpoint-step10.pt", "checkpoint-step11.pt", "checkpoint-step12.pt"]
    assert (tmp_path / "out" / "checkpoint-step12.pt").samefile(
        tmp_path / "out" / "checkpoint.pt"
    )  # a link, not a copy
    (r,) = doc["runs"]
    assert r["checkpoint_time_s"] > 0
    assert f"+ checkpoints {r['checkpoint_time_s']:.1f} s" in capsys.readouterr().out


def test_by_default_checkpoints_are_written_by_time_and_at_epoch_ends(tmp_path, model, data, monkeypatch):
    import mixft.callbacks.checkpointer

    saved_at: list[int] = []
    save = Checkpointer.save
    monkeypatch.setattr(
        Checkpointer, "save", lambda self, trainer: (saved_at.append(trainer.state.step), save(self, trainer))[1]
    )
    code, _ = run(tmp_path / "default", model, data, "--epochs", "2")
    assert code == 0 and saved_at == [6, 12]  # a short run: the epoch ends only
    # A clock that moves 4 minutes per look: --checkpoint-minutes 10 saves every third step.
    clock = iter(range(0, 10**6, 240))
    monkeypatch.setattr(mixft.callbacks.checkpointer.time, "monotonic", lambda: next(clock))
    saved_at.clear()
    code, _ = run(tmp_path / "timed", model, data, "--epochs", "2")
    assert code == 0 and 3 in saved_at and 6 in saved_at and len(saved_at) > 2


def test_help_lists_every_flag_with_its_default():
    parser = build_parser()
    for action in parser._actions:
        listed = action.help != argparse.SUPPRESS  # a retired flag (--torch-dropout) parses but is not listed
        if action.option_strings and listed and action.dest not in ("help", "recipe"):  # --recipe: required
            assert "default" in (action.help or ""), action.option_strings
    assert "required" in next(a for a in parser._actions if a.dest == "recipe").help


def test_bad_real_run_options_are_one_line_errors_before_any_work(tmp_path, model, data, capsys):
    cases = [
        (("--predict-file", str(tmp_path / "missing.csv")), "--predict-file"),
        (("--report-to", "wandb"), "--report-to: unknown tracker 'wandb'"),
        (("--metric-for-best", "bleu"), "--metric-for-best bleu: the evaluation has no such metric"),
        (("--early-stopping-patience", "0"), "--early-stopping-patience"),
    ]
    for args, message in cases:
        code, _ = run(tmp_path / "out", model, data, *args)
        err = capsys.readouterr().err.strip()
        assert code == 2 and message in err and "\n" not in err, err
        assert not (tmp_path / "out" / "results.json").exists()
