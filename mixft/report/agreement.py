"""Do two precisions predict the same thing? Per-example agreement with fp32 on one eval set.

Mean ± std of accuracy over seeds says nothing about whether bf16 and fp32 get the *same*
examples right. Given both precisions' predictions on the same examples in the same order
(same seed), ``agreement_vs_fp32`` returns (results.json ``agreement_vs_fp32`` of the run):

- classification: the flip rate (share of examples whose predicted label differs), the
  paired accuracy difference (this precision minus fp32) with a 95 % interval, McNemar's
  exact test on the discordant pairs, and one sentence saying whether the gap is
  distinguishable from noise;
- regression: the mean and largest |difference| of the predictions.

The interval is the paired normal (Wald) interval over the per-example correctness
differences d_i = [pred_i == y_i] - [ref_i == y_i]: mean(d) ± 1.96 · sd(d) / √n, with the
sample sd (n - 1). It is the textbook choice and is crude when discordant pairs are few;
McNemar's exact p-value (two-sided binomial test of b vs c discordant pairs at ½, scipy's
``binomtest``) is the one the verdict uses, at the 5 % level. p = 1.0 when there are no
discordant pairs: nothing to tell apart.

Usage::

    agreement = agreement_vs_fp32("bf16", bf16_preds, fp32_preds, labels)
    agreement["flip_rate"], agreement["mcnemar_p"], agreement["verdict"]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from mixft.log import logger

__all__ = ["ALPHA", "BASELINE", "Z95", "add_agreement", "agreement_vs_fp32", "mcnemar_exact_p"]

ALPHA = 0.05  # the verdict's significance level
Z95 = 1.959963984540054  # two-sided 95 % normal quantile
INTERVAL = "paired normal (Wald) 95% interval over per-example correctness differences"


def mcnemar_exact_p(fp32_only_right: int, precision_only_right: int) -> float:
    """McNemar's exact two-sided p-value: a binomial test of one discordant count against
    their sum at ½. 1.0 when there are no discordant pairs.

    Usage: ``mcnemar_exact_p(1, 6)`` -> ``0.125``
    """
    from scipy.stats import binomtest

    n = fp32_only_right + precision_only_right
    if n == 0:
        return 1.0
    return float(min(1.0, binomtest(precision_only_right, n, 0.5).pvalue))


def _check(name: str, values: Sequence[Any], n: int) -> None:
    if len(values) != n:
        raise ValueError(
            f"agreement: {name} has {len(values)} values, the fp32 predictions {n}; "
            "both must cover the same examples in the same order"
        )


def agreement_vs_fp32(
    precision: str,
    predictions: Sequence[Any],
    fp32_predictions: Sequence[Any],
    labels: Sequence[Any] | None = None,
    *,
    regression: bool = False,
) -> dict[str, Any]:
    """Per-example agreement of ``precision``'s eval predictions with fp32's (same examples, same order).

    Classification (predicted labels, any hashable values): ``{"kind": "classification", "n",
    "flips", "flip_rate", "accuracy_diff", "accuracy_diff_ci95": [lo, hi] | None,
    "fp32_only_right", "precision_only_right", "mcnemar_p", "interval", "verdict"}``;
    ``accuracy_diff`` and its interval are fractions (precision minus fp32) and need
    ``labels``; without them those keys, the counts and the p-value are None.
    Regression (``regression=True``, numbers): ``{"kind": "regression", "n", "mean_abs_diff",
    "max_abs_diff", "verdict"}``.

    Usage: ``agreement_vs_fp32("bf16", [0, 1, 1], [0, 1, 0], [0, 1, 1])["flip_rate"]`` -> ``0.333...``
    """
    n = len(fp32_predictions)
    _check("the predictions", predictions, n)
    if labels is not None:
        _check("the labels", labels, n)
    if n == 0:
        raise ValueError("agreement: no predictions to compare")
    if regression:
        return _regression(precision, predictions, fp32_predictions)

    flips = sum(1 for p, r in zip(predictions, fp32_predictions) if p != r)
    out: dict[str, Any] = {
        "kind": "classification",
        "n": n,
        "flips": flips,
        "flip_rate": flips / n,
        "accuracy_diff": None,
        "accuracy_diff_ci95": None,
        "fp32_only_right": None,
        "precision_only_right": None,
        "mcnemar_p": None,
        "interval": INTERVAL,
    }
    if labels is None:
        out["verdict"] = (
            f"{precision} predicted a different label than fp32 on {flips} of {n} examples "
            f"({flips / n:.1%}); without true labels no accuracy gap can be tested."
        )
        return out
    diffs = [int(p == y) - int(r == y) for p, r, y in zip(predictions, fp32_predictions, labels)]
    only_precision, only_fp32 = diffs.count(1), diffs.count(-1)
    mean = sum(diffs) / n
    ci = None
    if n > 1:
        sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
        half = Z95 * sd / math.sqrt(n)
        ci = [mean - half, mean + half]
    p = mcnemar_exact_p(only_fp32, only_precision)
    out.update(
        accuracy_diff=mean,
        accuracy_diff_ci95=ci,
        fp32_only_right=only_fp32,
        precision_only_right=only_precision,
        mcnemar_p=p,
    )
    out["verdict"] = _verdict(precision, n, flips, mean, ci, only_fp32, only_precision, p)
    return out


def _pts(x: float) -> str:
    return f"{100 * x:+.2f}"


def _verdict(
    precision: str,
    n: int,
    flips: int,
    mean: float,
    ci: list[float] | None,
    only_fp32: int,
    only_precision: int,
    p: float,
) -> str:
    if flips == 0:
        return f"{precision} and fp32 predicted the same label on all {n} examples: no accuracy gap to test."
    if only_fp32 + only_precision == 0:
        return (
            f"{precision} and fp32 were right and wrong on exactly the same {n} examples "
            f"({flips} predicted labels differ, all where both were wrong): no accuracy gap to test."
        )
    gap = f"accuracy {_pts(mean)} pts vs fp32"
    if ci is not None:
        gap += f" (95% interval {_pts(ci[0])} to {_pts(ci[1])})"
    split = (
        f"{only_precision} examples only {precision} got right, {only_fp32} only fp32 got right, McNemar p = {p:.3g}"
    )
    if p < ALPHA:
        return f"{precision}: {gap}; {split}: a real difference at the 5% level on these {n} examples."
    return f"{precision}: {gap}; {split}: not distinguishable from noise on these {n} examples."


def _regression(precision: str, predictions: Sequence[Any], fp32_predictions: Sequence[Any]) -> dict[str, Any]:
    gaps = [abs(float(p) - float(r)) for p, r in zip(predictions, fp32_predictions)]
    n = len(gaps)
    mean, worst = sum(gaps) / n, max(gaps)
    return {
        "kind": "regression",
        "n": n,
        "mean_abs_diff": mean,
        "max_abs_diff": worst,
        "verdict": (
            f"{precision}'s predictions differ from fp32's by {mean:.4g} on average "
            f"(largest {worst:.4g}) over {n} examples."
        ),
    }


# ------------------------------------------------------------------------------------------
# After a --compare: agreement for each run (was mixft/run/agreement_step.py)
#
# After a ``--compare``: each precision's eval predictions against fp32's of the same seed.
#
# Every run keeps its final evaluation's predictions and references (``eval_predictions``,
# ``eval_labels`` in results.json, so a ``--resume``'d compare still has those of the runs it
# kept); this step puts ``mixft.report.agreement.agreement_vs_fp32`` under each non-fp32 run's
# ``agreement_vs_fp32``. Runs without an fp32 run of their seed, or without predictions
# (stopped before evaluating, a task without ``predict_fn``), get none.
#
# Usage: ``if add_agreement(results): write_results(path, results)``
# ------------------------------------------------------------------------------------------

BASELINE = "fp32"


def _is_regression(result) -> bool:
    task = result.task or {}
    if task.get("kind"):
        return task["kind"] == "regression"
    return any(isinstance(v, float) for v in result.eval_predictions or [])


def add_agreement(results: list) -> bool:
    """Set ``agreement_vs_fp32`` on every non-fp32 RunResult that has an fp32 run of its seed.
    Returns whether any was set.

    Usage: ``add_agreement(results)``
    """
    baseline = {r.seed: r for r in results if r.precision == BASELINE}
    changed = False
    for r in results:
        ref = baseline.get(r.seed)
        if r.precision == BASELINE or ref is None or not r.eval_predictions or not ref.eval_predictions:
            continue
        if len(r.eval_predictions) != len(ref.eval_predictions):
            logger.warning(
                "no agreement with fp32 for %s seed %s: %d eval predictions against fp32's %d",
                r.precision,
                r.seed,
                len(r.eval_predictions),
                len(ref.eval_predictions),
            )
            continue
        # The references are the eval set's labels: the same for both runs unless the data changed.
        labels = r.eval_labels if r.eval_labels and r.eval_labels == ref.eval_labels else None
        r.agreement_vs_fp32 = agreement_vs_fp32(
            r.precision, r.eval_predictions, ref.eval_predictions, labels, regression=_is_regression(r)
        )
        changed = True
    return changed
