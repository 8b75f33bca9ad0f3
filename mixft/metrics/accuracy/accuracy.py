"""Accuracy as an `evaluate` module that ships with mixft, so metrics work with no hub.

`evaluate.load("accuracy")` downloads its script from the hub; this is the same metric,
loaded by path (see ``mixft.metrics.load_metric``).
"""

import datasets
import evaluate

_DESCRIPTION = "Accuracy: the fraction of predictions equal to their references."
_INPUTS = "predictions (list of int), references (list of int)"


class Accuracy(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="",
            inputs_description=_INPUTS,
            features=datasets.Features({"predictions": datasets.Value("int32"), "references": datasets.Value("int32")}),
        )

    def _compute(self, predictions, references):
        if len(predictions) == 0:
            return {"accuracy": float("nan")}
        correct = sum(int(p == r) for p, r in zip(predictions, references))
        return {"accuracy": correct / len(predictions)}
