"""Spearman rank correlation (STS-B's official metric, with Pearson) as an `evaluate` module.

Computed by ``scipy.stats.spearmanr`` (ties get their average rank). Undefined, and
reported as NaN, with fewer than two examples or constant predictions or references.
"""

import math
import warnings

import datasets
import evaluate

_DESCRIPTION = "Spearman rank correlation between predictions and references (-1 to 1)."
_INPUTS = "predictions (list of float), references (list of float)"


class Spearmanr(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="",
            inputs_description=_INPUTS,
            features=datasets.Features(
                {"predictions": datasets.Value("float64"), "references": datasets.Value("float64")}
            ),
        )

    def _compute(self, predictions, references):
        if len(predictions) < 2 or len(set(predictions)) < 2 or len(set(references)) < 2:
            return {"spearmanr": float("nan")}
        from scipy.stats import spearmanr

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            value = float(spearmanr(references, predictions)[0])
        return {"spearmanr": value if math.isfinite(value) else float("nan")}
