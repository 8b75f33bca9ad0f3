"""Matthews correlation (CoLA's official metric) as an `evaluate` module shipped with mixft.

Binary and multi-class (Gorodkin's R_K), as scikit-learn's ``matthews_corrcoef``:
``(c*s - sum_k p_k*t_k) / sqrt((s^2 - sum_k p_k^2) * (s^2 - sum_k t_k^2))`` with ``c``
the correct predictions, ``s`` the examples, ``p_k``/``t_k`` the predicted/true counts of
class k. When either factor under the root is 0 (one class predicted, or one class in
the references) the correlation is undefined and reported as 0, as scikit-learn does.
"""

import math
from collections import Counter

import datasets
import evaluate

_DESCRIPTION = "Matthews correlation coefficient: +1 perfect, 0 chance level, -1 inverse."
_INPUTS = "predictions (list of int), references (list of int)"


class MatthewsCorrelation(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="",
            inputs_description=_INPUTS,
            features=datasets.Features({"predictions": datasets.Value("int32"), "references": datasets.Value("int32")}),
        )

    def _compute(self, predictions, references):
        s = len(predictions)
        if s == 0:
            return {"matthews_correlation": float("nan")}
        c = sum(int(p == r) for p, r in zip(predictions, references))
        p_k, t_k = Counter(predictions), Counter(references)
        classes = set(p_k) | set(t_k)
        cov_pt = c * s - sum(p_k[k] * t_k[k] for k in classes)
        cov_pp = s * s - sum(v * v for v in p_k.values())
        cov_tt = s * s - sum(v * v for v in t_k.values())
        if cov_pp == 0 or cov_tt == 0:
            return {"matthews_correlation": 0.0}
        return {"matthews_correlation": cov_pt / math.sqrt(cov_pp * cov_tt)}
