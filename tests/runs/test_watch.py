"""What a run watches, through the CLI in-process on a tiny BERT: the metric that ranks evaluations (issue 30).

A timing never ranks evaluations; a metric undefined on the data (a correlation of
constant labels) never becomes the best and never ends a run with a traceback.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mixft.cli.main import main
from tests.cli_runs import text_classification_args
from tests.data_files import write_csv
from tests.tiny_models import TOY_ROWS, make_tiny_model_dir


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return make_tiny_model_dir("bert", tmp_path_factory.mktemp("tiny") / "bert")


def run(tmp_path: Path, model: Path, rows_train, rows_dev, *args: str) -> tuple[int, dict]:
    train = write_csv(tmp_path / "train.csv", ["text", "label"], rows_train)
    dev = write_csv(tmp_path / "dev.csv", ["text", "label"], rows_dev)
    out = tmp_path / "out"
    code = main(text_classification_args(model, train, dev, out, *args, batch_size=4))
    doc = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else {}
    return code, doc


def regression_rows(constant: bool):
    return [(t, "2.5" if constant else f"{(i % 5) + 0.5:.1f}") for i, (t, _, _) in enumerate(TOY_ROWS)]


def test_early_stopping_on_a_correlation_of_constant_labels_keeps_the_results(tmp_path, model, capsys):
    code, doc = run(
        tmp_path,
        model,
        regression_rows(False) * 2,
        regression_rows(True),
        "--epochs",
        "3",
        "--eval-steps",
        "2",
        "--early-stopping-patience",
        "2",
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "Traceback" not in captured.err
    (r,) = doc["runs"]
    assert r["best"] is None and len(r["eval_history"]) > 3  # never ranked, never stopped: every evaluation ran
    assert captured.err.count("pearsonr is undefined at step") == 1


@pytest.mark.parametrize("timing", ["time_s", "samples_per_s"])
def test_a_timing_as_metric_for_best_is_refused_before_any_work(tmp_path, model, capsys, timing):
    rows = [(t, ("neg", "pos")[c == 2]) for t, c, _ in TOY_ROWS]
    code, doc = run(tmp_path, model, rows * 2, rows, "--epochs", "2", "--eval-steps", "2", "--metric-for-best", timing)
    err = capsys.readouterr().err.strip()
    assert code == 2 and not doc
    assert err.endswith(
        f"error: --metric-for-best {timing} is a timing, not a measure of the model; choose from: accuracy, f1, loss"
    ), err


def test_an_unknown_metric_lists_only_rankable_names(tmp_path, model, capsys):
    rows = [(t, ("neg", "pos")[c == 2]) for t, c, _ in TOY_ROWS]
    code, _ = run(tmp_path, model, rows, rows, "--max-steps", "2", "--metric-for-best", "acuracy")
    err = capsys.readouterr().err.strip()
    assert code == 2 and "choose from: accuracy, f1, loss" in err and "time_s" not in err, err


def test_evaluations_tied_with_the_best_are_said(tmp_path, model, capsys):
    rows = [(t, ("neg", "pos")[c == 2]) for t, c, _ in TOY_ROWS]
    # A learning rate too small to change a prediction: every evaluation ties the first.
    code, doc = run(
        tmp_path,
        model,
        rows * 2,
        rows,
        "--epochs",
        "2",
        "--eval-steps",
        "2",
        "--lr",
        "1e-12",
        "--metric-for-best",
        "accuracy",
        "--load-best",
    )
    out = capsys.readouterr().out
    assert code == 0
    (r,) = doc["runs"]
    assert r["best"]["step"] == 2 and r["best"]["ties"] == len(r["eval_history"]) - 1 == 5
    assert "(best, step 2 of 12; 5 later evaluations tied, the first is kept)" in out


def test_an_explicit_correlation_undefined_on_the_data_is_refused_before_any_work(tmp_path, model, capsys):
    code, doc = run(
        tmp_path,
        model,
        regression_rows(False) * 2,
        regression_rows(True),
        "--epochs",
        "3",
        "--eval-steps",
        "2",
        "--metric-for-best",
        "pearsonr",
        "--early-stopping-patience",
        "2",
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and not doc and "\n" not in err, err
    assert err.endswith(
        "--metric-for-best pearsonr is undefined on this data: the validation labels are constant "
        "(all 2.5); use --metric-for-best loss"
    ), err
