"""What one (precision, seed) run watches while it trains: the best evaluation, early stopping, trackers.

``RunWatch`` is made per run from the options (``--metric-for-best``, ``--load-best``,
``--early-stopping-patience``, ``--report-to``), before training; it hands the trainer
its callbacks and the checkpoint its states (so a resumed run judges later evaluations
against the same best, bit for bit, and writes on in the same tracker runs), and after ``fit`` puts the best weights back
(``--load-best``) and records ``best`` and ``last`` in the RunResult.

Usage::

    watch = RunWatch.for_run(cfg, parts, precision="bf16", seed=0)
    trainer = build_trainer(parts, cfg, ..., callbacks=[*watch.callbacks, checkpointer])
    result = watch.finish(trainer, trainer.fit())     # the best model, eval = its metrics
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mixft.callbacks.best import TIMINGS, BestModel, EarlyStopping, check_rankable
from mixft.callbacks.tracker_names import check_trackers
from mixft.callbacks.trackers import build_trackers, run_name
from mixft.config.run_config import RunConfig
from mixft.errors import UsageError
from mixft.results import RunResult
from mixft.train.hooks import Callback

# Figures every evaluation has besides the task's metrics (the timings: mixft.best_model.TIMINGS).
EVALUATION_FIGURES = ("loss", *TIMINGS)


def _metric_names(metric) -> list[str] | None:
    # mixft.metrics.task.TaskMetrics lists its names; an `evaluate` module has one name.
    names = getattr(metric, "names", None)
    if names:
        return list(names)
    name = getattr(metric, "name", None)
    return [name] if isinstance(name, str) and name else None


def main_metric(metric, predict_fn) -> str:
    """The task's main metric: the first the task reports (accuracy, matthews_correlation, pearsonr...), else loss.

    Usage: ``main_metric(parts.metric, parts.predict_fn)``
    """
    if predict_fn is None:
        return "loss"
    names = _metric_names(metric)
    return names[0] if names else "accuracy"


def known_metrics(metric, predict_fn) -> list[str] | None:
    """The names an evaluation will hold, when they can be known before it runs (None: they cannot)."""
    if predict_fn is None:
        return list(EVALUATION_FIGURES)
    if metric is None:
        return [*EVALUATION_FIGURES, "accuracy"]
    names = _metric_names(metric)
    return [*EVALUATION_FIGURES, *names] if names else None


def rankable_metrics(metric, predict_fn) -> list[str] | None:
    """The names ``--metric-for-best`` may choose: loss and the task's metrics, never a timing (None: unknown).

    Usage: ``rankable_metrics(parts.metric, parts.predict_fn)  # ["loss", "accuracy", "f1"]``
    """
    known = known_metrics(metric, predict_fn)
    return None if known is None else [name for name in known if name not in TIMINGS]


def check_metric_for_best(metric: str, parts) -> None:
    """UsageError before training when ``metric`` is a timing or not one the evaluation will hold."""
    rankable = rankable_metrics(parts.metric, parts.predict_fn)
    check_rankable(metric, rankable)
    if rankable is not None and metric not in rankable:
        raise UsageError(
            f"--metric-for-best {metric}: the evaluation has no such metric (choose from: "
            f"{', '.join(sorted(rankable))})"
        )


def load_best_default(cfg: RunConfig) -> bool:
    """``--load-best``'s value: as given, else on when the run evaluates more than once.

    Usage: ``load_best_default(RunConfig(epochs=3))  # True``
    """
    if cfg.load_best is not None:
        return cfg.load_best
    return bool(cfg.eval_steps) or (cfg.epochs or 1) > 1


@dataclass
class RunWatch:
    """The best-model, early-stopping and tracker callbacks of one run, and what ``finish`` does with them."""

    best: BestModel
    load_best: bool
    stop: EarlyStopping | None = None
    trackers: list[Callback] = field(default_factory=list)

    @classmethod
    def for_run(cfg_cls, cfg: RunConfig, parts, *, precision: str, seed: int, hparams=None) -> RunWatch:
        """Checks ``--metric-for-best`` against the task's metrics (UsageError before training) and builds the callbacks.

        ``hparams``: what the trackers log as the run's options (the plan's ``recorded_config`` with
        the run's precision and seed).
        """
        metric = cfg.metric_for_best or main_metric(parts.metric, parts.predict_fn)
        check_metric_for_best(metric, parts)
        load_best = load_best_default(cfg)
        stop = EarlyStopping(metric, cfg.early_stopping_patience) if cfg.early_stopping_patience else None
        names = check_trackers(cfg.report_to)
        trackers = build_trackers(names, cfg.output_dir, run_name(precision, seed), hparams=hparams) if names else []
        return cfg_cls(BestModel(metric, keep_weights=load_best), load_best, stop, list(trackers))

    @property
    def callbacks(self) -> list[Callback]:
        """In this order: the best model and the trackers see every evaluation before early stopping ends the run."""
        return [self.best, *self.trackers, *([self.stop] if self.stop else [])]

    def states(self) -> dict[str, Any]:
        """What a checkpoint keeps of them (``save_checkpoint(..., states=...)``)."""
        states: dict[str, Any] = {"best_model": self.best}
        if self.stop is not None:
            states["early_stopping"] = self.stop
        for tracker in self.trackers:  # so that --resume writes on in the same tracker run
            states[f"tracker_{tracker.KIND}"] = tracker
        return states

    def finish(self, trainer, result: RunResult) -> RunResult:
        """After ``fit``: the best weights back (``--load-best``), ``best``/``last`` recorded, ``eval`` the final model's.

        With ``--load-best`` the final ``eval`` is the best evaluation's (the same weights, so
        the same figures: not evaluated again); without it, the last evaluation's.
        """
        history = trainer.state.eval_history
        if history:
            entry = history[-1]
            result.last = {
                "step": entry.get("step"),
                "epoch": entry.get("epoch"),
                "metrics": {k: v for k, v in entry.items() if k not in ("epoch", "step")},
            }
        summary = self.best.summary()
        if summary is None:
            return result
        loaded = self.load_best and self.best.restore(trainer)
        result.best = {**summary, "loaded": bool(loaded), "evaluations": self.best.evaluations, "ties": self.best.ties}
        if loaded:
            result.eval = dict(self.best.metrics)
        return result
