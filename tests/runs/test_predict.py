"""predictions.csv / .jsonl: input order, label names, probabilities, values, id column; --predict-file labels."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from mixft.runs.predictions_file import (
    find_id_column,
    prediction_rows,
    predictions_filename,
    probabilities_from_logits,
    write_predictions,
)
from tests.cli_runs import run_cli
from tests.data_files import write_csv
from tests.tiny_models import TOY_ROWS, make_tiny_model_dir


def read_csv(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_rows_keep_input_order_and_use_label_names(tmp_path):
    # Inputs 0..3 predict classes 2, 0, 1, 2: the rows must say so in that order.
    logits = torch.tensor([[0.0, 1.0, 5.0], [3.0, 0.0, 0.0], [0.0, 2.0, 1.0], [-1.0, -1.0, 0.0]])
    names = ["negative", "neutral", "positive"]
    path = write_predictions(tmp_path / "predictions.csv", logits, "classification", names)
    rows = read_csv(path)
    assert [r["label"] for r in rows] == ["positive", "negative", "neutral", "positive"]
    assert list(rows[0]) == ["label", "probability"]  # no id column in the input, none written
    expected = torch.softmax(logits, -1).max(-1).values.tolist()
    assert [float(r["probability"]) for r in rows] == pytest.approx(expected)


def test_single_logit_is_a_sigmoid_over_two_names(tmp_path):
    logits = torch.tensor([[2.0], [-1.0], [0.5]])
    rows = read_jsonl(write_predictions(tmp_path / "p.jsonl", logits, "classification", ["neg", "pos"]))
    assert [r["label"] for r in rows] == ["pos", "neg", "pos"]
    p = torch.sigmoid(torch.tensor([2.0, -1.0, 0.5]))
    assert [r["probability"] for r in rows] == pytest.approx([p[0].item(), 1 - p[1].item(), p[2].item()])


def test_near_ties_are_labelled_as_the_metrics_count_them(tmp_path):
    """Was: the label was the max of the fp32 probabilities, which round two logits within ~6e-8 to equal values
    and pick the first class, while the metrics (argmax of the logits; one logit: > 0) counted the other."""
    logits = torch.tensor([[0.0, 1e-8], [1e-8, 0.0]])
    assert torch.softmax(logits, -1)[0, 0] == torch.softmax(logits, -1)[0, 1]  # the tie the max broke wrongly
    rows = prediction_rows(logits, "classification", ["neg", "pos"])
    assert [r["label"] for r in rows] == ["pos", "neg"]
    one = prediction_rows(torch.tensor([[1e-9], [-1e-9], [0.0]]), "classification", ["neg", "pos"])
    assert [r["label"] for r in one] == ["pos", "neg", "neg"]  # logit > 0, as the binary head's metrics
    assert [r["probability"] for r in one] == pytest.approx([0.5, 0.5, 0.5])


def test_probabilities_from_logits():
    assert probabilities_from_logits(torch.tensor([0.0]), 2).tolist() == [[0.5, 0.5]]
    probs = probabilities_from_logits(torch.tensor([[1.0, 2.0, 3.0]]), 3)
    assert probs.sum().item() == pytest.approx(1.0) and probs.argmax().item() == 2
    with pytest.raises(ValueError, match="binary head"):
        probabilities_from_logits(torch.tensor([[1.0]]), 3)
    with pytest.raises(ValueError, match=r"shape \[n, 2\]"):
        probabilities_from_logits(torch.zeros(4, 3), 2)


def test_regression_values_and_id_column(tmp_path):
    values = torch.tensor([[0.25], [3.5], [-1.0]])
    path = write_predictions(tmp_path / "predictions.jsonl", values, "regression", ids=[7, 3, 11], id_column="idx")
    assert read_jsonl(path) == [{"idx": 7, "value": 0.25}, {"idx": 3, "value": 3.5}, {"idx": 11, "value": -1.0}]
    rows = read_csv(write_predictions(tmp_path / "predictions.csv", values, "regression", ids=["a", "b", "c"]))
    assert rows == [{"id": "a", "value": "0.25"}, {"id": "b", "value": "3.5"}, {"id": "c", "value": "-1.0"}]


def test_id_column_comes_first_for_classification(tmp_path):
    rows = read_csv(
        write_predictions(
            tmp_path / "p.csv", torch.tensor([[0.0, 1.0]]), "classification", ["no", "yes"], ids=[torch.tensor(42)]
        )
    )
    assert list(rows[0]) == ["id", "label", "probability"] and rows[0]["id"] == "42"


def test_filename_follows_the_input_format():
    assert predictions_filename("new.jsonl") == "predictions.jsonl"
    assert predictions_filename("new.json") == "predictions.jsonl"
    assert predictions_filename("new.tsv") == "predictions.csv"
    assert predictions_filename("new.parquet") == "predictions.csv"
    assert predictions_filename("new.csv", fmt="jsonl") == "predictions.jsonl"
    with pytest.raises(ValueError, match="csv, jsonl"):
        predictions_filename("x.csv", fmt="xml")


def test_find_id_column():
    assert find_id_column(["sentence", "idx", "label"]) == "idx"
    assert find_id_column(["id", "idx"]) == "id"
    assert find_id_column(["sentence"]) is None


def test_mismatches_are_refused():
    with pytest.raises(ValueError, match="2 ids for 3 predictions"):
        prediction_rows(torch.zeros(3, 2), "classification", ["a", "b"], ids=[1, 2])
    with pytest.raises(ValueError, match="one value per input"):
        prediction_rows(torch.zeros(3, 2), "regression")
    with pytest.raises(ValueError, match="kind must be one of"):
        prediction_rows(torch.zeros(3, 2), "ranking")


def test_write_is_atomic_and_replaces(tmp_path):
    path = tmp_path / "predictions.csv"
    path.write_text("old\n")
    write_predictions(path, torch.tensor([[1.0, 0.0]]), "classification", ["x", "y"])
    assert read_csv(path)[0]["label"] == "x"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["predictions.csv"]  # no temporary left


# ------------------------------------------------------------ --predict-file labels (issue 30)
# Optional, so labels that cannot be scored cost the metrics, not the run.


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return make_tiny_model_dir("bert", tmp_path_factory.mktemp("tiny") / "bert")


@pytest.mark.parametrize(
    "labels, reason",
    [
        (["positive"] + ["pos"] * 11, "--predict-file label 'positive' never seen in training"),
        ([str(i % 2) for i in range(12)], "mixed label types: --predict-file labels in column 'label' are"),
        ([("a", "b", "c")[i % 3] for i in range(12)], "--predict-file labels 'a', 'b', 'c' never seen in training"),
    ],
)
def test_labels_that_cannot_be_scored_predict_without_metrics(tmp_path, model, capsys, labels, reason):
    predict = write_csv(
        tmp_path / "new.csv",
        ["id", "text", "label"],
        [(i, t, label) for i, ((t, _, _), label) in enumerate(zip(TOY_ROWS, labels))],
    )
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
