"""mixft.metrics: the shipped evaluate modules against hand-computed values and scipy, and TaskMetrics."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from mixft.errors import UsageError
from mixft.metrics import SHIPPED, load_metric
from mixft.metrics.task import TaskMetrics, f1_average, metric_names, task_metrics

# A 3-class confusion matrix (rows: true class, columns: predicted class).
CONFUSION = [[5, 1, 0], [2, 3, 1], [0, 0, 4]]


def _from_confusion(matrix):
    refs, preds = [], []
    for true, row in enumerate(matrix):
        for pred, count in enumerate(row):
            refs += [true] * count
            preds += [pred] * count
    return preds, refs


@pytest.fixture(scope="module")
def metric():
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = load_metric(name)
        return cache[name]

    return get


def test_every_metric_ships():
    assert set(SHIPPED) >= {"accuracy", "f1", "matthews_correlation", "pearsonr", "spearmanr"}


# --------------------------------------------------------------------------------------- F1


def test_f1_binary_scores_the_positive_class(metric):
    # tp = 2 (rows 0 and 4), fp = 1 (row 1), fn = 1 (row 3): F1 = 2*2 / (2*2 + 1 + 1)
    result = metric("f1").compute(predictions=[1, 1, 0, 0, 1], references=[1, 0, 0, 1, 1])
    assert result["f1"] == pytest.approx(4 / 6)
    # pos_label=0 scores the other class: tp = 1, fp = 1, fn = 1
    result = metric("f1").compute(predictions=[1, 1, 0, 0, 1], references=[1, 0, 0, 1, 1], pos_label=0)
    assert result["f1"] == pytest.approx(2 / 4)


def test_f1_macro_micro_weighted_from_a_confusion_matrix(metric):
    preds, refs = _from_confusion(CONFUSION)
    # per class 2tp / (2tp + fp + fn): class 0: tp 5, fp 2, fn 1; class 1: tp 3, fp 1, fn 3; class 2: tp 4, fp 1, fn 0
    per_class = [10 / 13, 6 / 10, 8 / 9]
    support = [6, 6, 4]
    f1 = metric("f1")
    assert f1.compute(predictions=preds, references=refs, average="macro")["f1"] == pytest.approx(sum(per_class) / 3)
    assert f1.compute(predictions=preds, references=refs, average="micro")["f1"] == pytest.approx(12 / 16)
    weighted = sum(s * n for s, n in zip(per_class, support)) / 16
    assert f1.compute(predictions=preds, references=refs, average="weighted")["f1"] == pytest.approx(weighted)


def test_f1_degenerate_cases(metric):
    f1 = metric("f1")
    assert f1.compute(predictions=[1, 1, 1], references=[1, 1, 1])["f1"] == 1.0
    # No positive anywhere: precision and recall are 0/0; scikit-learn reports 0.
    assert f1.compute(predictions=[0, 0, 0], references=[0, 0, 0])["f1"] == 0.0
    # All predicted one class of two: class 0 F1 = 2*2/(2*2+2), class 1 never predicted = 0.
    assert f1.compute(predictions=[0, 0, 0, 0], references=[0, 0, 1, 1], average="macro")["f1"] == pytest.approx(
        (4 / 6 + 0.0) / 2
    )
    # A class given in labels that never occurs counts as 0 in the macro average.
    assert f1.compute(predictions=[0, 1], references=[0, 1], average="macro", labels=[0, 1, 2])["f1"] == pytest.approx(
        2 / 3
    )
    with pytest.raises(ValueError, match="binary"):
        f1.compute(predictions=[0, 1, 2], references=[0, 1, 2])


# ---------------------------------------------------------------------------------- Matthews


def _reference_mcc(preds, refs):
    """Gorodkin's R_K as the correlation of one-hot matrices, computed with numpy."""
    k = max(max(preds), max(refs)) + 1
    x = np.eye(k)[preds]
    y = np.eye(k)[refs]
    xc, yc = x - x.mean(0), y - y.mean(0)
    return float((xc * yc).sum() / math.sqrt((xc * xc).sum() * (yc * yc).sum()))


def test_matthews_binary_by_hand(metric):
    # tp 6, tn 3, fp 1, fn 2: (tp*tn - fp*fn) / sqrt((tp+fp)(tp+fn)(tn+fp)(tn+fn))
    preds = [1] * 6 + [0] * 3 + [1] + [0] * 2
    refs = [1] * 6 + [0] * 3 + [0] + [1] * 2
    expected = (6 * 3 - 1 * 2) / math.sqrt(7 * 8 * 4 * 5)
    assert metric("matthews_correlation").compute(predictions=preds, references=refs)[
        "matthews_correlation"
    ] == pytest.approx(expected)


def test_matthews_multiclass_matches_one_hot_correlation(metric):
    preds, refs = _from_confusion(CONFUSION)
    value = metric("matthews_correlation").compute(predictions=preds, references=refs)["matthews_correlation"]
    assert value == pytest.approx(_reference_mcc(preds, refs))
    assert metric("matthews_correlation").compute(predictions=refs, references=refs)["matthews_correlation"] == 1.0


def test_matthews_degenerate_is_zero(metric):
    mcc = metric("matthews_correlation")
    assert mcc.compute(predictions=[1, 1, 1, 1], references=[0, 1, 0, 1])["matthews_correlation"] == 0.0
    assert mcc.compute(predictions=[0, 1, 0, 1], references=[1, 1, 1, 1])["matthews_correlation"] == 0.0
    assert mcc.compute(predictions=[1, 0, 1, 0], references=[0, 1, 0, 1])["matthews_correlation"] == -1.0


# ------------------------------------------------------------------------ Pearson / Spearman

PREDS = [0.1, 2.5, 1.0, 3.7, 2.5, 4.9, 0.3]
REFS = [0.0, 2.0, 1.5, 4.0, 3.0, 5.0, 1.0]


def test_pearson_and_spearman_match_scipy(metric):
    assert metric("pearsonr").compute(predictions=PREDS, references=REFS)["pearsonr"] == pytest.approx(
        stats.pearsonr(REFS, PREDS)[0]
    )
    # PREDS has a tie (2.5, 2.5): average ranks, as scipy does.
    assert metric("spearmanr").compute(predictions=PREDS, references=REFS)["spearmanr"] == pytest.approx(
        stats.spearmanr(REFS, PREDS)[0]
    )


def test_spearman_by_hand():
    # Ranks without ties: rho = 1 - 6 * sum(d^2) / (n (n^2 - 1)); d = (0, 0, 1, -1) -> 1 - 12/60
    value = load_metric("spearmanr").compute(predictions=[1.0, 2.0, 4.0, 3.0], references=[10.0, 20.0, 30.0, 40.0])
    assert value["spearmanr"] == pytest.approx(1 - 6 * 2 / (4 * 15))


def test_correlations_undefined_are_nan(metric):
    for name in ("pearsonr", "spearmanr"):
        assert math.isnan(metric(name).compute(predictions=[1.0, 1.0, 1.0], references=[0.0, 1.0, 2.0])[name])
        assert math.isnan(metric(name).compute(predictions=[1.0], references=[2.0])[name])


# ------------------------------------------------------------------------------- TaskMetrics


def test_metric_names_per_task():
    assert metric_names("classification", 2) == ["accuracy", "f1"]
    assert metric_names("classification", 4) == ["accuracy", "f1"]
    assert metric_names("regression", 1) == ["pearsonr", "spearmanr"]
    assert metric_names("classification", 2, glue_task="cola") == ["matthews_correlation"]
    assert metric_names("classification", 2, glue_task="mrpc") == ["f1", "accuracy"]
    assert metric_names("classification", 2, glue_task="qqp") == ["f1", "accuracy"]
    assert metric_names("regression", 1, glue_task="stsb") == ["pearsonr", "spearmanr"]
    for task in ("sst2", "mnli", "qnli", "rte", "wnli"):
        assert metric_names("classification", 2, glue_task=task) == ["accuracy"]
    assert (f1_average(2), f1_average(3)) == ("binary", "macro")
    with pytest.raises(UsageError, match="task kinds: classification, regression"):
        metric_names("ranking")


def test_task_metrics_compute_every_metric_at_once():
    preds, refs = _from_confusion(CONFUSION)
    metrics = task_metrics("classification", num_labels=3)
    result = metrics.compute(predictions=preds, references=refs)
    assert result == pytest.approx({"accuracy": 12 / 16, "f1": (10 / 13 + 6 / 10 + 8 / 9) / 3})

    binary = TaskMetrics(["f1", "accuracy"])
    assert binary.compute(predictions=[1, 1, 0, 0, 1], references=[1, 0, 0, 1, 1]) == pytest.approx(
        {"f1": 4 / 6, "accuracy": 3 / 5}
    )

    regression = task_metrics("regression", num_labels=1)
    assert regression.compute(predictions=PREDS, references=REFS) == pytest.approx(
        {"pearsonr": stats.pearsonr(REFS, PREDS)[0], "spearmanr": stats.spearmanr(REFS, PREDS)[0]}
    )


def test_task_metrics_rejects_unknown_names_at_construction():
    with pytest.raises(UsageError, match="unknown metric 'bleu'"):
        TaskMetrics(["accuracy", "bleu"])
    with pytest.raises(UsageError, match="unknown GLUE task 'squad'"):
        task_metrics("classification", glue_task="squad")
