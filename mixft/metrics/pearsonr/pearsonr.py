"""Pearson correlation (STS-B's official metric, with Spearman) as an `evaluate` module.

Computed by ``scipy.stats.pearsonr``. With fewer than two examples, or when predictions
or references are constant, the correlation is undefined: it is reported as NaN (never
a made-up 0), without scipy's warning.
"""

import math
import warnings

import datasets
import evaluate

_DESCRIPTION = "Pearson correlation coefficient between predictions and references (-1 to 1)."
_INPUTS = "predictions (list of float), references (list of float)"


class Pearsonr(evaluate.Metric):
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
            return {"pearsonr": float("nan")}
        from scipy.stats import pearsonr

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            value = float(pearsonr(references, predictions)[0])
        return {"pearsonr": value if math.isfinite(value) else float("nan")}
