"""F1 as an `evaluate` module that ships with mixft (no hub, no scikit-learn).

Same definition and defaults as scikit-learn's ``f1_score`` (which the hub's "f1" wraps):
``average="binary"`` scores the class ``pos_label`` (1); ``average="macro"`` is the
unweighted mean of the per-class F1 over every class seen in references or predictions
(or over ``labels`` when given); ``"micro"`` and ``"weighted"`` as in scikit-learn.
A class with no true and no predicted example has F1 0 (scikit-learn's zero_division=0).
"""

from collections import Counter

import datasets
import evaluate

_DESCRIPTION = "F1: the harmonic mean of precision and recall, 2*tp / (2*tp + fp + fn)."
_INPUTS = (
    "predictions (list of int), references (list of int), "
    "average ('binary' | 'macro' | 'micro' | 'weighted', default 'binary'), pos_label (int, default 1), "
    "labels (list of int, optional: the classes to average over)"
)
_AVERAGES = ("binary", "macro", "micro", "weighted")


def _f1(tp: int, fp: int, fn: int) -> float:
    denominator = 2 * tp + fp + fn
    return 2 * tp / denominator if denominator else 0.0


class F1(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="",
            inputs_description=_INPUTS,
            features=datasets.Features({"predictions": datasets.Value("int32"), "references": datasets.Value("int32")}),
        )

    def _compute(self, predictions, references, average="binary", pos_label=1, labels=None):
        if average not in _AVERAGES:
            raise ValueError(f"average must be one of {', '.join(_AVERAGES)}, got {average!r}")
        if len(predictions) == 0:
            return {"f1": float("nan")}
        pairs = list(zip(predictions, references))
        tp = Counter(p for p, r in pairs if p == r)
        predicted = Counter(predictions)
        actual = Counter(references)
        if average == "binary":
            present = set(predicted) | set(actual)
            if not present <= {0, 1, pos_label}:
                raise ValueError(f"average='binary' needs two classes, got {sorted(present)}; use average='macro'")
            classes = [pos_label]
        else:
            classes = sorted(set(labels) if labels is not None else set(predicted) | set(actual))
        if average == "micro":
            tp_sum = sum(tp[c] for c in classes)
            fp_sum = sum(predicted[c] - tp[c] for c in classes)
            fn_sum = sum(actual[c] - tp[c] for c in classes)
            return {"f1": _f1(tp_sum, fp_sum, fn_sum)}
        scores = {c: _f1(tp[c], predicted[c] - tp[c], actual[c] - tp[c]) for c in classes}
        if average == "weighted":
            support = sum(actual[c] for c in classes)
            value = sum(scores[c] * actual[c] for c in classes) / support if support else 0.0
            return {"f1": value}
        return {"f1": sum(scores.values()) / len(classes)}
