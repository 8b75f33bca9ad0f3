"""predictions.csv / .jsonl: input order, label names, probabilities, values, id column."""

from __future__ import annotations

import csv
import json

import pytest
import torch

from mixft.runs.predictions_file import (
    find_id_column,
    prediction_rows,
    predictions_filename,
    probabilities_from_logits,
    write_predictions,
)


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
    rows = read_csv(write_predictions(tmp_path / "p.csv", torch.tensor([[0.0, 1.0]]), "classification",
                                      ["no", "yes"], ids=[torch.tensor(42)]))
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
