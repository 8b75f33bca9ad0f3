"""One hook per evaluation, whichever trainer hook delivers it.

A Trainer that has ``Callback.on_evaluate(trainer, metrics)`` calls it after every
evaluation (``--eval-steps`` ones and epoch-end ones); an older one only passes the
epoch-end metrics to ``on_epoch_end``. ``EvaluationCallback`` turns both into one
``on_evaluation`` call per evaluation, never two: once the trainer's base ``Callback``
declares ``on_evaluate``, ``on_epoch_end`` is not read for metrics at all.

Usage::

    class PrintAccuracy(EvaluationCallback):
        def on_evaluation(self, trainer, metrics):
            logger.info("accuracy %.3f at step %d", metrics["accuracy"], trainer.state.step)
"""

from __future__ import annotations

from typing import Any

from .callbacks import Callback

#: Whether the trainer calls ``on_evaluate`` (its base Callback declares it): then epoch
#: ends arrive there too, and ``on_epoch_end`` must not report them a second time.
TRAINER_CALLS_ON_EVALUATE = hasattr(Callback, "on_evaluate")


class EvaluationCallback(Callback):
    """A callback that acts once per evaluation: override ``on_evaluation``."""

    def on_evaluation(self, trainer, metrics: dict[str, Any]) -> None: ...

    def on_evaluate(self, trainer, metrics: dict[str, Any]) -> None:
        if metrics:
            self.on_evaluation(trainer, metrics)

    def on_epoch_end(self, trainer, metrics: dict[str, Any]) -> None:
        if metrics and not TRAINER_CALLS_ON_EVALUATE:
            self.on_evaluation(trainer, metrics)


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
