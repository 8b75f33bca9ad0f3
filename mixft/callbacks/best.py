"""The best evaluation's model, and stopping when evaluations stop improving.

``BestModel`` keeps a CPU copy of the weights of the best evaluation so far (by one
metric) and puts them back on request; ``EarlyStopping`` ends training after ``patience``
evaluations in a row without improvement. Both save their state in a checkpoint
(``state_dict`` / ``load_state_dict``), so a resumed run judges the next evaluations
against the same best.

Put ``EarlyStopping`` after ``BestModel`` (and after any tracker) in the callback list:
its ``StopTraining`` ends the hook, so callbacks after it would miss that evaluation.

Usage::

    best = BestModel("accuracy")
    trainer = Trainer(..., callbacks=[best, EarlyStopping("accuracy", patience=3)])
    result = trainer.fit()
    best.restore(trainer)          # the model is now the best evaluation's
    best.summary()                 # {"step": 40, "epoch": 1, "metrics": {...}}
"""

from __future__ import annotations

import math
from typing import Any

import torch

from mixft.errors import UsageError
from mixft.log import logger
from mixft.train.hooks import Callback, StopTraining

#: Metrics where lower is better (errors); every other metric is higher-is-better.
LOWER_IS_BETTER = ("loss", "mse", "rmse", "mae")
#: What an evaluation also records about itself: how long it took, not how good the model is.
#: Never a --metric-for-best (the "best" model would be the fastest evaluation's).
TIMINGS = ("time_s", "samples_per_s")


def is_timing(metric: str) -> bool:
    """Whether ``metric`` is an evaluation's timing (``time_s``, ``eval_samples_per_s``...), not a measure of the model.

    Usage: ``is_timing("time_s") is True``
    """
    return any(metric == name or metric.endswith("_" + name) for name in TIMINGS)


def check_rankable(metric: str, choices=None) -> None:
    """Refuse a timing as the metric that ranks evaluations (UsageError naming the choices).

    Usage: ``check_rankable("time_s", ["accuracy", "loss"])  # UsageError``
    """
    if isinstance(metric, str) and is_timing(metric):
        listed = f"; choose from: {', '.join(sorted(choices))}" if choices else ""
        raise UsageError(f"--metric-for-best {metric} is a timing, not a measure of the model{listed}")


def is_undefined(value) -> bool:
    """None or NaN: a metric with no value on this evaluation (a correlation of constant labels or predictions)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def greater_is_better(metric: str) -> bool:
    """Whether a larger value of ``metric`` is an improvement (loss: no; accuracy, f1...: yes).

    Usage: ``greater_is_better("eval_loss") is False``
    """
    return not any(metric == name or metric.endswith("_" + name) for name in LOWER_IS_BETTER)


def evaluation_position(trainer) -> tuple[int, int]:
    """(step, epoch) of the evaluation just made: the trainer's own record when it has one.

    The trainer's ``eval_history`` entry says which epoch an evaluation belongs to (at an
    epoch end, the epochs completed); without one, the loop's current position.
    """
    state = trainer.state
    history = getattr(state, "eval_history", None)
    if history and history[-1].get("step") == state.step:
        return state.step, int(history[-1].get("epoch", state.epoch))
    return state.step, state.epoch


class MetricWatch:
    """The best value of one metric so far, and whether a new value beats it."""

    def __init__(self, metric: str, greater: bool | None = None):
        if not isinstance(metric, str) or not metric.strip():
            raise UsageError(f"--metric-for-best must name a metric, got {metric!r}")
        check_rankable(metric)
        self.metric = metric
        self.greater = greater_is_better(metric) if greater is None else bool(greater)
        self.best: float | None = None

    def value_of(self, metrics: dict[str, Any]) -> float:
        if self.metric not in metrics:
            names = ", ".join(sorted(k for k, v in metrics.items() if isinstance(v, (int, float))))
            raise UsageError(f"--metric-for-best {self.metric}: the evaluation has no such metric (it has: {names})")
        value = metrics[self.metric]
        return float("nan") if value is None else float(value)

    def improves(self, value: float) -> bool:
        """Strictly better than the best so far; an undefined value (NaN) never is (a first defined value always is)."""
        if is_undefined(value):
            return False
        if self.best is None:
            return True
        return value > self.best if self.greater else value < self.best

    def state_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "greater": self.greater, "best": self.best}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["metric"] != self.metric or state["greater"] != self.greater:
            direction = lambda g: "higher" if g else "lower"  # noqa: E731
            raise UsageError(
                f"the checkpoint judged the best model by {state['metric']} ({direction(state['greater'])} is better), "
                f"this run by {self.metric} ({direction(self.greater)} is better): resume with the same --metric-for-best"
            )
        self.best = state["best"]


class BestModel(Callback):
    """Keeps the weights, step, epoch and metrics of the best evaluation (weights as a CPU copy).

    Usage: ``best = BestModel("loss"); Trainer(..., callbacks=[best]).fit(); best.restore(trainer)``

    Args:
        metric: the eval metric that ranks evaluations (a key of ``trainer.evaluate()``).
        greater: whether larger is better; default from the name (loss lower, the rest higher).
        keep_weights: False records only which evaluation was best (no copy of the model).
    """

    def __init__(self, metric: str = "loss", greater: bool | None = None, keep_weights: bool = True):
        self.watch = MetricWatch(metric, greater)
        self.keep_weights = keep_weights
        self.step: int | None = None
        self.epoch: int | None = None
        self.metrics: dict[str, Any] | None = None
        self.weights: dict[str, torch.Tensor] | None = None
        self.evaluations = 0
        self.ties = 0  # later evaluations equal to the best (the first of equals is kept)
        self._said_undefined = False

    @property
    def metric(self) -> str:
        return self.watch.metric

    @property
    def best_value(self) -> float | None:
        return self.watch.best

    def on_evaluate(self, trainer, metrics: dict[str, Any]) -> None:
        if not metrics:
            return
        value = self.watch.value_of(metrics)
        self.evaluations += 1
        if is_undefined(value):
            self._say_undefined(trainer, metrics)
            return
        if not self.watch.improves(value):
            if value == self.watch.best:
                self.ties += 1
            return
        self.watch.best = value
        self.ties = 0
        self.step, self.epoch = evaluation_position(trainer)
        self.metrics = dict(metrics)
        if self.keep_weights:
            # copy=True: on a CPU run .to("cpu") would hand back the live tensors, which
            # the next optimizer step overwrites.
            self.weights = {k: v.detach().to("cpu", copy=True) for k, v in trainer.module.state_dict().items()}

    def _say_undefined(self, trainer, metrics: dict[str, Any]) -> None:
        """Once per run: which metric had no value, and why (the evaluation's own reason when it gives one)."""
        if self._said_undefined:
            return
        self._said_undefined = True
        reason = (
            (metrics.get("undefined") or {}).get(self.metric) if isinstance(metrics.get("undefined"), dict) else None
        )
        logger.warning(
            "eval %s is undefined at step %s%s: not ranked (the best is the best defined evaluation; "
            "--metric-for-best loss is always defined)",
            self.metric,
            trainer.state.step,
            f" ({reason})" if reason else "",
        )

    def restore(self, trainer) -> bool:
        """Load the best evaluation's weights into ``trainer``'s model; False when there are none.

        Usage: ``if best.restore(trainer): final = trainer.evaluate()``
        """
        if self.weights is None:
            return False
        trainer.module.load_state_dict(self.weights)
        return True

    def summary(self) -> dict[str, Any] | None:
        """``{"step", "epoch", "metrics"}`` of the best evaluation (results.json's ``best``); None before one."""
        if self.metrics is None:
            return None
        return {"step": self.step, "epoch": self.epoch, "metric": self.metric, "metrics": dict(self.metrics)}

    def state_dict(self, include_weights: bool = True) -> dict[str, Any]:
        """Everything to judge later evaluations as this one would (for a checkpoint; tensors are not copied)."""
        return {
            "watch": self.watch.state_dict(),
            "step": self.step,
            "epoch": self.epoch,
            "metrics": None if self.metrics is None else dict(self.metrics),
            "evaluations": self.evaluations,
            "ties": self.ties,
            "weights": self.weights if include_weights else None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.watch.load_state_dict(state["watch"])
        self.step, self.epoch = state["step"], state["epoch"]
        self.metrics = None if state["metrics"] is None else dict(state["metrics"])
        self.evaluations = state["evaluations"]
        self.ties = state.get("ties", 0)  # checkpoints written before ties were counted
        self.weights = state["weights"]


class EarlyStopping(Callback):
    """Stops training after ``patience`` evaluations in a row that do not beat the best.

    Raises ``StopTraining(kind="early_stopping")`` from the evaluation that used up the
    patience; the run ends with the RunResult of what was trained (restore the best model
    with ``BestModel``).

    Usage: ``Trainer(..., callbacks=[BestModel("f1"), EarlyStopping("f1", patience=3)])``
    """

    def __init__(self, metric: str = "loss", patience: int = 3, greater: bool | None = None):
        if not (isinstance(patience, int) and not isinstance(patience, bool) and patience >= 1):
            raise UsageError(f"--early-stopping-patience must be a positive integer, got {patience!r}")
        self.watch = MetricWatch(metric, greater)
        self.patience = patience
        self.without_improvement = 0
        self.best_step: int | None = None

    def on_evaluate(self, trainer, metrics: dict[str, Any]) -> None:
        if not metrics:
            return
        value = self.watch.value_of(metrics)
        if self.watch.improves(value):
            self.watch.best = value
            self.best_step = trainer.state.step
            self.without_improvement = 0
            return
        if self.watch.best is None:
            return  # nothing defined measured yet (an undefined correlation): no patience is used up
        self.without_improvement += 1
        if self.without_improvement >= self.patience:
            raise StopTraining(
                f"early stopping: eval {self.watch.metric} did not improve for {self.without_improvement} "
                f"evaluation(s) (best {self.watch.best:.6g} at step {self.best_step})",
                kind="early_stopping",
            )

    def state_dict(self) -> dict[str, Any]:
        return {
            "watch": self.watch.state_dict(),
            "patience": self.patience,
            "without_improvement": self.without_improvement,
            "best_step": self.best_step,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.watch.load_state_dict(state["watch"])
        # The patience is this run's option (a resumed run may be given more); the count is the checkpoint's.
        self.without_improvement = state["without_improvement"]
        self.best_step = state["best_step"]
