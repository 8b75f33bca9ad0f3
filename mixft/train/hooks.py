"""How code hooks into the training loop: ``Callback``, what a step tells it, and how it stops a run.

Usage::

    class StopOnPlateau(Callback):
        def on_evaluate(self, trainer, metrics):
            if metrics["loss"] > self.best:
                raise StopTraining("no improvement", kind="early_stopping")

    Trainer(model, opt, loss_fn, loader, callbacks=[StopOnPlateau()]).fit()

Its own module so that callbacks (checkpoints, collapse detection, interrupts, progress)
import these types without importing the loop, and the loop reads as the loop.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import torch
from torch import nn

from mixft.results import RunResult

if TYPE_CHECKING:  # annotations only: the protocol names the types, importing them is not needed to run
    from mixft.amp.precision import Precision
    from mixft.train.state import TrainState


class TrainerLike(Protocol):
    """What hooks, callbacks and the checkpoint format read of the running trainer.

    ``mixft.train.trainer.Trainer`` is one. A protocol, not an import: the trainer imports this
    module, and a callback or the checkpoint format that names the concrete class would import
    the loop for an annotation.
    Usage: ``def on_step_end(self, trainer: TrainerLike, info: StepInfo) -> None: ...``
    """

    state: TrainState  # the loop's progress (step, epoch, history)
    precision: Precision
    device: torch.device
    seed: int | None
    optimizers: list[torch.optim.Optimizer]
    callbacks: list[Callback]
    train_loader: Any
    eval_loader: Any

    @property
    def module(self) -> nn.Module: ...  # the model without a DDP wrapper
    @property
    def params(self) -> list[nn.Parameter]: ...  # what the optimizers update
    def untimed(self) -> contextlib.AbstractContextManager: ...  # leaves its body out of train_time_s
    def fit(self) -> RunResult: ...
    def evaluate(self, loader=None) -> dict[str, float]: ...
    def state_dict(self) -> dict[str, Any]: ...  # everything a checkpoint saves
    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None: ...
    def loop_state_dict(self) -> dict[str, Any]: ...  # state_dict() without the model and optimizers
    def load_loop_state_dict(self, sd: Mapping[str, Any]) -> None: ...


#: How a run can end early: RunResult.stop_kind (None: it ran its budget).
STOP_KINDS = ("collapse", "interrupt", "callback", "early_stopping")


class StopTraining(Exception):
    """Raised by a callback to end training early.

    The message becomes the RunResult's ``stopped_early``, ``kind`` its ``stop_kind``
    (one of ``STOP_KINDS``): code asks the kind, people read the message.

    Usage: ``raise StopTraining("the loss is nan at step 6", kind="collapse")``
    """

    def __init__(self, message: str = "", kind: str = "callback"):
        if kind not in STOP_KINDS:
            raise ValueError(f"StopTraining kind must be one of {', '.join(STOP_KINDS)}, got {kind!r}")
        super().__init__(message)
        self.kind = kind


def stop_kind_of(run: RunResult | Mapping[str, Any]) -> str | None:
    """The ``stop_kind`` of a RunResult or of a results.json run dict.

    Usage: ``stop_kind_of(json.load(f)["runs"][0]) == "interrupt"``
    """
    if isinstance(run, RunResult):
        return run.stop_kind
    if isinstance(run, Mapping):
        return run.get("stop_kind")
    raise TypeError(f"expected a RunResult or a results.json run dict, got {type(run).__name__}")


@dataclass
class StepInfo:
    """What ``Callback.on_step_end`` learns about one optimizer step (tensors stay on the device)."""

    step: int  # 1-based optimizer step
    epoch: int  # 0-based epoch the step belongs to
    loss: torch.Tensor  # mean loss over the window, on the device
    grad_norm: torch.Tensor  # unscaled total gradient norm (inf/NaN when the step was skipped)
    lr: float  # learning rate the step used
    loss_scale: float | None  # GradScaler scale after update(); None without a scaler
    skipped: bool  # True when any optimizer skipped this step
    stepped: list[bool] = field(default_factory=list)  # per optimizer: took its step


class Callback:
    """Hooks into the loop. Override what you need; every hook gets the trainer.

    Usage: ``class LogLoss(Callback): def on_step_end(self, trainer, info): ...``

    ``on_before_optimizer_step`` runs when a window's gradients are accumulated and still
    *scaled* (before ``unscale_``): the place to inspect or inject into raw gradients.
    ``on_step_end`` gets a ``StepInfo`` whose tensors are still on the device: reading
    them (``.item()``) is a host sync, so do it only every N steps.
    ``on_evaluate`` runs after every evaluation during ``fit`` (each epoch's end and every
    ``eval_steps`` optimizer steps), before that step's ``on_step_end`` or that epoch's
    ``on_epoch_end``; ``trainer.state.eval_history[-1]`` holds the same metrics with
    their epoch and step. It runs outside the training clock.
    """

    def on_train_begin(self, trainer: TrainerLike) -> None: ...
    def on_before_optimizer_step(self, trainer: TrainerLike) -> None: ...
    def on_step_end(self, trainer: TrainerLike, info: StepInfo) -> None: ...
    def on_evaluate(self, trainer: TrainerLike, metrics: dict[str, float]) -> None: ...
    def on_epoch_end(self, trainer: TrainerLike, metrics: dict[str, float]) -> None: ...
    def on_train_end(self, trainer: TrainerLike, result: RunResult) -> None: ...
