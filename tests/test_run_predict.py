"""--predict-file labels (issue 30): optional, so labels that cannot be scored cost the metrics, not the run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_runs import run_cli
from tests.data_files import write_csv
from tests.tiny_models import TOY_ROWS, make_tiny_model_dir


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return make_tiny_model_dir("bert", tmp_path_factory.mktemp("tiny") / "bert")


@pytest.mark.parametrize("labels, reason", [
    (["positive"] + ["pos"] * 11, "--predict-file label 'positive' never seen in training"),
    ([str(i % 2) for i in range(12)], "mixed label types: --predict-file labels in column 'label' are"),
    ([("a", "b", "c")[i % 3] for i in range(12)], "--predict-file labels 'a', 'b', 'c' never seen in training"),
])
def test_labels_that_cannot_be_scored_predict_without_metrics(tmp_path, model, capsys, labels, reason):
    predict = write_csv(tmp_path / "new.csv", ["id", "text", "label"],
                        [(i, t, label) for i, ((t, _, _), label) in enumerate(zip(TOY_ROWS, labels))])
    code, err, out = run_cli(tmp_path, model, "--max-steps", "2", "--predict-file", str(predict), capsys=capsys)
    assert code == 0, err
    assert f"--predict-file {predict}: its labels cannot be scored ({reason}" in err, err
    assert "predicting without metrics" in err and "validation" not in err
    run = json.loads((out / "results.json").read_text())["runs"][0]
    assert run["predict"]["metrics"] is None and reason in run["predict"]["metrics_skipped"]
    assert len((out / "predictions.csv").read_text().splitlines()) == 13


def test_a_malformed_predict_file_is_still_refused(tmp_path, model, capsys):
    predict = write_csv(tmp_path / "new.csv", ["text", "label"], [(t, "") for t, _, _ in TOY_ROWS])
    code, err, out = run_cli(tmp_path, model, "--max-steps", "2", "--predict-file", str(predict), capsys=capsys)
    assert code == 2 and "\n" not in err and "--predict-file" in err, err
