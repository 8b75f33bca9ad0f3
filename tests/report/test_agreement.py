"""mixft.report.agreement: flip rate, paired accuracy difference, McNemar's exact p, against values
computed by hand on small fixed sets."""

from __future__ import annotations

import math

import pytest

from mixft.report.agreement import Z95, agreement_vs_fp32, mcnemar_exact_p


def test_mcnemar_exact_p_by_hand():
    # b=1, c=6: two-sided exact binomial = 2 * sum_{k<=1} C(7,k) / 2^7 = 2 * 8 / 128.
    assert mcnemar_exact_p(1, 6) == pytest.approx(2 * (1 + 7) / 2**7)
    assert mcnemar_exact_p(6, 1) == pytest.approx(0.125)
    # b=0, c=10: 2 / 2^10.
    assert mcnemar_exact_p(0, 10) == pytest.approx(2 / 2**10)
    # balanced: p = 1.
    assert mcnemar_exact_p(3, 3) == pytest.approx(1.0)
    assert mcnemar_exact_p(0, 0) == 1.0


def _fixed_set():
    """20 examples: 10 both right, 3 both wrong (one of them a flip), 1 only fp32 right, 6 only bf16 right."""
    labels, fp32, bf16 = [], [], []
    for _ in range(10):  # both right
        labels.append(0)
        fp32.append(0)
        bf16.append(0)
    for _ in range(2):  # both wrong, same wrong label
        labels.append(0)
        fp32.append(1)
        bf16.append(1)
    labels.append(0)
    fp32.append(1)
    bf16.append(2)  # both wrong, different labels: a flip
    labels.append(1)
    fp32.append(1)
    bf16.append(0)  # only fp32 right
    for _ in range(6):  # only bf16 right
        labels.append(2)
        fp32.append(0)
        bf16.append(2)
    return bf16, fp32, labels


def test_classification_agreement_by_hand():
    bf16, fp32, labels = _fixed_set()
    a = agreement_vs_fp32("bf16", bf16, fp32, labels)
    n = 20
    assert a["n"] == n and a["kind"] == "classification"
    assert a["flips"] == 1 + 1 + 6 and a["flip_rate"] == pytest.approx(8 / 20)
    assert (a["fp32_only_right"], a["precision_only_right"]) == (1, 6)
    assert a["mcnemar_p"] == pytest.approx(0.125)
    # accuracies: bf16 16/20, fp32 11/20 -> +5/20 = 0.25
    assert a["accuracy_diff"] == pytest.approx(0.25)
    # d = six +1, one -1, thirteen 0; mean 0.25; sum of squares of deviations:
    ss = 6 * (1 - 0.25) ** 2 + (-1 - 0.25) ** 2 + 13 * 0.25**2
    half = Z95 * math.sqrt(ss / 19) / math.sqrt(20)
    lo, hi = a["accuracy_diff_ci95"]
    assert lo == pytest.approx(0.25 - half) and hi == pytest.approx(0.25 + half)
    assert "not distinguishable from noise" in a["verdict"] and "+25.00 pts" in a["verdict"]


def test_significant_gap_says_so():
    labels = [1] * 12
    fp32 = [0] * 10 + [1, 1]
    bf16 = [1] * 12
    a = agreement_vs_fp32("bf16", bf16, fp32, labels)
    assert a["mcnemar_p"] == pytest.approx(2 / 2**10)
    assert "a real difference at the 5% level" in a["verdict"]


def test_identical_predictions():
    a = agreement_vs_fp32("bf16", [0, 1, 1, 0], [0, 1, 1, 0], [0, 1, 0, 0])
    assert a["flip_rate"] == 0 and a["mcnemar_p"] == 1.0 and a["accuracy_diff"] == 0
    assert "same label on all 4 examples" in a["verdict"]


def test_without_labels_only_flips():
    a = agreement_vs_fp32("fp16", ["a", "b"], ["a", "a"])
    assert a["flip_rate"] == 0.5 and a["mcnemar_p"] is None and a["accuracy_diff_ci95"] is None


def test_regression_mean_abs_difference():
    a = agreement_vs_fp32("bf16", [1.0, 2.5, 3.0], [1.5, 2.5, 2.0], regression=True)
    assert a["mean_abs_diff"] == pytest.approx((0.5 + 0 + 1.0) / 3)
    assert a["max_abs_diff"] == pytest.approx(1.0)
    assert a["kind"] == "regression" and "0.5 on average" in a["verdict"]


def test_mismatched_lengths_refused():
    with pytest.raises(ValueError, match="same examples"):
        agreement_vs_fp32("bf16", [0, 1], [0, 1, 1])
