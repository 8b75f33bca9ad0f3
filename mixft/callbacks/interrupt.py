"""Ctrl-C and SIGTERM during training: stop cleanly at the next step, save, say how to resume.

The first SIGINT/SIGTERM only sets a flag. Training finishes the micro-step in flight
(with gradient accumulation: the rest of its window, so no gradient is half-summed),
then ``StopOnSignal`` saves a checkpoint through the run's ``Checkpointer`` and ends the
run with ``StopTraining("interrupted (SIGINT)", kind="interrupt")``: the results written
afterwards mark the run as interrupted (``stop_kind``). A second signal raises ``Interrupted`` at once. Outside a fit
(loading data, between runs) the first signal raises ``Interrupted`` at once, too.

The library installs no signal handlers by itself; the CLI does, like this::

    with SignalHandler() as signals:
        trainer = Trainer(..., callbacks=[StopOnSignal(signals), Checkpointer(path)])
        result = trainer.fit()
    if signals.signum is not None:
        sys.exit(signals.exit_code)           # 130 for SIGINT, 143 for SIGTERM
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Protocol, runtime_checkable

from mixft.distributed import is_distributed, max_over_processes
from mixft.log import logger
from mixft.train.hooks import Callback, StepInfo, StopTraining, TrainerLike, stop_kind_of

# The start of the stopped_early message of a run a signal ended (for people; code reads stop_kind).
INTERRUPTED = "interrupted"


def is_interrupted(run) -> bool:
    """Whether a RunResult (or a results.json run dict) was stopped by a signal.

    Usage: ``is_interrupted(json.loads(path.read_text())["runs"][0])``
    """
    return stop_kind_of(run) == "interrupt"


@runtime_checkable
class SavesCheckpoints(Protocol):
    """A callback that can write a checkpoint now (``mixft.callbacks.checkpointer.Checkpointer`` is one).

    A protocol, not an import: this module stays below the checkpoint module.
    """

    def save(self, trainer: TrainerLike) -> Path: ...


class Interrupted(KeyboardInterrupt):
    """A signal that ends the process now; ``exit_code`` is 128 + the signal number."""

    def __init__(self, signum: int):
        super().__init__(f"{signal.Signals(signum).name}")
        self.signum = signum
        self.exit_code = 128 + signum


class SignalHandler:
    """Turns SIGINT/SIGTERM into a stop request while ``armed`` (during a fit).

    A context manager: installs its handler on enter (main thread only; elsewhere it does
    nothing) and restores the previous handlers on exit.
    """

    def __init__(self, signals: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM)):
        self.signals = signals
        self.signum: int | None = None  # the first signal received (or adopted from another process), if any
        self._received = False  # a signal reached this process itself
        self.armed = False  # True while a fit can stop gracefully
        self._previous: dict[int, object] = {}

    @property
    def signal_name(self) -> str | None:
        return None if self.signum is None else signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int | None:
        return None if self.signum is None else 128 + self.signum

    def __enter__(self) -> SignalHandler:
        if threading.current_thread() is threading.main_thread():
            for sig in self.signals:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()

    def adopt(self, signum: int) -> None:
        """Stop for another process's signal as for one of this process's own (its name, its exit code).
        A signal that reaches this process later is still its first: it does not end the save in flight.

        Usage: ``handler.adopt(signal.SIGTERM)``
        """
        if self.signum is None:
            self.signum = signum

    def _handle(self, signum: int, frame) -> None:
        if self._received or not self.armed:
            # A second signal, or nothing to stop gracefully: leave now.
            self._received = True
            self.signum = self.signum or signum
            raise Interrupted(signum)
        self._received = True
        self.signum = self.signum or signum
        logger.warning(
            "%s: stopping after the current step and saving a checkpoint; send it again to quit at once",
            signal.Signals(signum).name,
        )


class StopOnSignal(Callback):
    """Ends the fit at the next step (or epoch) end after ``handler`` saw a signal.

    Before stopping it saves a checkpoint with every callback of the trainer that can
    (``SavesCheckpoints``: a ``Checkpointer``); ``checkpoint`` is then its path. Put it last:
    a callback after it never sees the step it stops at (a tracker would lose that step's loss,
    and a collapsed step would be saved before the collapse detector saw it).

    Usage: ``Trainer(..., callbacks=[StopOnSignal(handler), Checkpointer(path)])``
    """

    def __init__(self, handler: SignalHandler):
        self.handler = handler
        self.checkpoint: Path | None = None

    def on_train_begin(self, trainer: TrainerLike) -> None:
        self.handler.armed = True

    def on_step_end(self, trainer: TrainerLike, info: StepInfo) -> None:
        self._maybe_stop(trainer)

    def on_epoch_end(self, trainer: TrainerLike, metrics: dict[str, float]) -> None:
        self._maybe_stop(trainer)

    def on_train_end(self, trainer: TrainerLike, result) -> None:
        self.handler.armed = False

    def _maybe_stop(self, trainer: TrainerLike) -> None:
        signum = _signal_anywhere(self.handler.signum)
        if signum is None:
            return
        # Another process's signal (a launcher forwards one to every process, each at its own
        # moment): this process stops at the same step, and says and exits as if it had seen it.
        self.handler.adopt(signum)
        for cb in trainer.callbacks:
            if isinstance(cb, SavesCheckpoints):
                self.checkpoint = cb.save(trainer)
        raise StopTraining(f"{INTERRUPTED} ({self.handler.signal_name})", kind="interrupt")


def _signal_anywhere(here: int | None) -> int | None:
    """The signal this process saw, or in a process group (DDP, FSDP) the one any process saw
    (the larger number if they differ); None when none did.

    A process that stops alone leaves the others waiting in the next collective (DDP's gradient
    all-reduce; a sharded checkpoint is one too). One all-reduce per step decides, so every
    process stops after the same step; a one-process run decides alone.
    """
    if not is_distributed():
        return here
    (signum,) = max_over_processes(here or 0)
    return signum or None
