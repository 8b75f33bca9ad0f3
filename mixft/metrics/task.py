"""A task's metrics at once: which ones a task reports, and one object that computes them.

Usage::

    from mixft.metrics.task import TaskMetrics, metric_names, task_metrics
    metric_names("classification", num_labels=4)     # ["accuracy", "f1"]  (F1 macro-averaged)
    metrics = task_metrics("classification", num_labels=2, glue_task="mrpc")
    metrics.compute(predictions=[1, 0, 1], references=[1, 1, 1])   # {"f1": 0.8, "accuracy": 0.666...}

The trainer calls ``compute(predictions=..., references=...)`` and records every key.
A metric that is undefined on the data (a correlation of constant predictions) is NaN;
:func:`undefined_reasons` says why, in words the run's results carry (``eval.undefined``).
"""

from __future__ import annotations

from mixft.data.labels import TASK_KINDS
from mixft.errors import UsageError


def metric_names(kind: str, num_labels: int = 2, glue_task: str | None = None) -> list[str]:
    """The metrics a task reports: a GLUE task's official ones; otherwise by task kind.

    Classification: accuracy and F1 (of the positive class, id 1, for two classes;
    macro-averaged for more); regression: Pearson and Spearman correlation.

    Usage: ``metric_names("regression")  # ["pearsonr", "spearmanr"]``
    """
    if glue_task is not None:
        from mixft.data.glue import glue_task as lookup

        return list(lookup(glue_task).metrics)
    if kind == "classification":
        return ["accuracy", "f1"]
    if kind == "regression":
        return ["pearsonr", "spearmanr"]
    raise UsageError(f"unknown task kind {kind!r}; task kinds: {', '.join(TASK_KINDS)}")


def f1_average(num_labels: int) -> str:
    """F1's averaging for ``num_labels`` classes: "binary" (positive class 1) for 2, else "macro".

    Usage: ``TaskMetrics(["f1"], average=f1_average(4))``
    """
    return "binary" if num_labels <= 2 else "macro"


class TaskMetrics:
    """Several shipped `evaluate` metrics computed together into one flat dict.

    ``average`` goes to F1 only ("binary" scores class ``pos_label``; "macro" averages
    the classes). Metrics are loaded once, at construction, so a wrong name fails
    before training.

    Usage: ``TaskMetrics(["accuracy", "f1"], average="macro").compute(predictions=p, references=r)``
    """

    def __init__(self, names: list[str] | tuple[str, ...], *, average: str = "binary", pos_label: int = 1):
        from mixft.metrics import load_metric

        if not names:
            raise UsageError("TaskMetrics needs at least one metric name")
        self.names = list(names)
        self.average = average
        self.pos_label = pos_label
        self._metrics = {name: load_metric(name) for name in self.names}

    def compute(self, *, predictions, references) -> dict[str, float]:
        """Every metric's result, merged: e.g. ``{"accuracy": 0.9, "f1": 0.88}``."""
        predictions, references = list(predictions), list(references)
        results: dict[str, float] = {}
        for name, metric in self._metrics.items():
            kwargs = {"average": self.average, "pos_label": self.pos_label} if name == "f1" else {}
            results.update(metric.compute(predictions=predictions, references=references, **kwargs))
        return {key: float(value) for key, value in results.items()}

    def __repr__(self) -> str:
        return f"TaskMetrics({self.names!r}, average={self.average!r})"


def task_metrics(kind: str, num_labels: int = 2, glue_task: str | None = None) -> TaskMetrics:
    """The :class:`TaskMetrics` for a task kind (or GLUE task), with F1 averaged to fit.

    Usage: ``trainer_metric = task_metrics(data.task.kind, data.task.num_labels, data.task.glue_task)``
    """
    return TaskMetrics(metric_names(kind, num_labels, glue_task), average=f1_average(num_labels))


#: Where an evaluation's metrics keep the reason each undefined (NaN) one has no value.
UNDEFINED_KEY = "undefined"


def undefined_reasons(metrics: dict, predictions, references) -> dict[str, str]:
    """``{metric: why it is undefined}`` for each NaN in ``metrics`` (JSON has no NaN: results.json
    stores null, and the reason beside it under ``eval.undefined``).

    A correlation (Pearson, Spearman) needs both sides to vary: constant predictions (a
    model that outputs one value, or fp16/bf16 rounding them all to one) or constant labels
    leave it undefined, as does an evaluation set of fewer than two examples.

    Usage: ``undefined_reasons({"pearsonr": float("nan")}, [0.5, 0.5], [1.0, 2.0])``
    -> ``{"pearsonr": "the predictions are constant (all 0.5)"}``
    """
    missing = [
        name for name, value in metrics.items() if isinstance(value, float) and value != value
    ]  # NaN is the only value unequal to itself
    if not missing:
        return {}
    predictions, references = list(predictions), list(references)
    if len(predictions) < 2:
        why = f"{len(predictions)} evaluation example{'' if len(predictions) == 1 else 's'}, two or more needed"
    else:
        constant = [
            f"the {what} are constant (all {values[0]:g})"
            for what, values in (("predictions", predictions), ("labels", references))
            if len(set(values)) == 1
        ]
        why = " and ".join(constant) or "not a finite number on this data"
    return {name: why for name in missing}
