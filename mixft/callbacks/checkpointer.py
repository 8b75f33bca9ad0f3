"""The checkpoint policy: when and where a run saves (the file format is ``mixft.train.checkpoint``).

A callback, as Lightning's ``ModelCheckpoint`` is apart from its ``CheckpointIO``: the loop
never names it, and the format never knows when it is called.

Usage::

    ckpt = Checkpointer("out/checkpoint.pt", every=20)          # every 20 optimizer steps
    Trainer(model, opt, loss_fn, train_loader, callbacks=[ckpt]).fit()   # killed half-way
    trainer = Trainer(model2, opt2, loss_fn, train_loader, callbacks=[ckpt])  # same setup
    resume(trainer, "out/checkpoint.pt")                        # mixft.train.checkpoint.resume
    trainer.fit()                                               # continues at the next batch
"""

from __future__ import annotations

import math
import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mixft.distributed import any_process
from mixft.options import NON_NEGATIVE_FLOAT, NON_NEGATIVE_INT, POSITIVE_INT
from mixft.train.checkpoint import save_checkpoint
from mixft.train.hooks import Callback, StepInfo, TrainerLike

__all__ = ["Checkpointer"]


class Checkpointer(Callback):
    """Save a checkpoint every ``minutes`` of the run, every ``every`` optimizer steps, and at every epoch end.

    A periodic or epoch-end save is left out when the latest window loss is inf/NaN (the
    forward pass or the weights are broken): the previous checkpoint stays the last good
    one. A skipped step alone does not stop a save - it leaves the weights untouched,
    and an isolated skip (an fp16 overflow, an injected fault) is normal. Put a
    ``CollapseDetector`` before this callback so a collapse is caught before any save.
    ``save(trainer)`` writes unconditionally (the interrupt handler uses it).
    ``every=0`` and ``minutes=0``: epoch ends (and explicit saves) only.

    ``keep``: also keep the newest ``keep`` saves as step checkpoints, named by
    ``step_name`` (``"checkpoint-step{step}.pt"``, beside ``path``): hard links to the
    checkpoint just written, so keeping one costs no write. ``states``: ``{name: obj}``
    saved with the trainer (``save_checkpoint``). ``write_time_s`` adds up the seconds
    spent writing (left out of the training time; the run reports it beside it).

    ``sharded`` (an FSDP trainer): the checkpoint is a directory every process writes its
    shards into (``mixft.train.sharded_checkpoint``), so this callback runs in every process,
    and the processes agree on each save before making it (one all-reduce per step): a save
    that one process skips (its own loss was inf, its clock ran past ``minutes`` first) and
    another makes would leave the other waiting in the collective.

    Usage: ``Trainer(..., callbacks=[Checkpointer("out/checkpoint.pt", every=20)])``
    """

    def __init__(
        self,
        path: str | os.PathLike,
        every: int = 20,
        meta: Mapping[str, Any] | None = None,
        *,
        minutes: float = 0.0,
        keep: int | None = None,
        step_name: str = "checkpoint-step{step}.pt",
        states: Mapping[str, Any] | None = None,
        sharded: bool = False,
    ):
        NON_NEGATIVE_INT.validate("every", every)  # the options' rule (a UsageError is a ValueError)
        NON_NEGATIVE_FLOAT.validate("minutes", minutes)
        if keep is not None:
            POSITIVE_INT.validate("keep", keep)
            if "{step}" not in step_name:
                raise ValueError(f"step_name must hold {{step}}, got {step_name!r}")
        self.path = Path(path)
        self.every = every
        self.minutes = minutes
        self.keep = keep
        self.step_name = step_name
        self.meta = dict(meta or {})
        self.states = dict(states or {})
        self.sharded = sharded
        self.saved_step: int | None = None  # optimizer step of the latest save
        self.write_time_s = 0.0  # seconds spent writing checkpoints (a resumed run starts from the checkpoint's)
        self._last_save = time.monotonic()

    def save(self, trainer: TrainerLike) -> Path:
        if self.saved_step is None and not self.sharded:  # a sharded save clears its own temporary
            _remove_stale_temporaries(self.path)
        start = time.perf_counter()
        with trainer.untimed():  # disk writes are not training speed
            # The time so far goes into the file: a resumed run goes on counting from it.
            meta = {**self.meta, "checkpoint_time_s": self.write_time_s}
            if self.sharded:
                from mixft.train.sharded_checkpoint import save_sharded_checkpoint

                save_sharded_checkpoint(trainer, self.path, meta, self.states)  # every process: a collective
            else:
                save_checkpoint(trainer, self.path, meta, self.states)
            if self.keep and _is_writer(self.sharded):
                self._keep_step_copy(trainer.state.step)
        self.write_time_s += time.perf_counter() - start
        self.saved_step = trainer.state.step
        self._last_save = time.monotonic()
        return self.path

    def on_train_begin(self, trainer: TrainerLike) -> None:
        self._last_save = time.monotonic()  # the time cadence counts from the start of this fit

    def on_step_end(self, trainer: TrainerLike, info: StepInfo) -> None:
        by_steps = bool(self.every and info.step % self.every == 0)  # the same in every process
        by_time = bool(self.minutes and time.monotonic() - self._last_save >= self.minutes * 60)
        if not (by_steps or by_time or (self.sharded and self.minutes)):  # no process can be due
            return
        due, finite = self._agreed(by_steps or by_time, _loss_is_finite(info.loss))
        if due and finite:
            self.save(trainer)

    def on_epoch_end(self, trainer: TrainerLike, metrics: dict[str, float]) -> None:
        losses = trainer.state.history["loss"]
        _, finite = self._agreed(True, not losses or _loss_is_finite(losses[-1]))
        if finite:
            self.save(trainer)

    def _agreed(self, due: bool, finite: bool) -> tuple[bool, bool]:
        """(due in any process, finite in every process) for a sharded save; this process's own otherwise."""
        if not self.sharded:
            return due, finite
        any_due, any_not_finite = any_process(due, not finite)
        return any_due, not any_not_finite

    def step_checkpoints(self) -> list[Path]:
        """The kept step checkpoints beside ``path``, oldest first.

        Usage: ``[p.name for p in ckpt.step_checkpoints()]  # ["checkpoint-step20.pt", ...]``
        """
        prefix, _, suffix = self.step_name.partition("{step}")
        found = []
        for candidate in self.path.parent.glob(f"{prefix}*{suffix}"):
            number = candidate.name[len(prefix) : len(candidate.name) - len(suffix)]
            if number.isdigit():
                found.append((int(number), candidate))
        return [p for _, p in sorted(found)]

    def _keep_step_copy(self, step: int) -> None:
        target = self.path.parent / self.step_name.format(step=step)
        _remove(target)  # a resumed run saving the same step again
        if self.path.is_dir():  # a sharded checkpoint: a directory of hard links to its files
            shutil.copytree(self.path, target, copy_function=_link_or_copy)
        else:
            _link_or_copy(self.path, target)
        for old in self.step_checkpoints()[: -self.keep]:
            _remove(old)


def _is_writer(sharded: bool) -> bool:
    # A sharded checkpoint is written by every process, its kept copies by process 0 alone.
    if not sharded:
        return True
    import torch.distributed as dist

    return dist.get_rank() == 0


def _link_or_copy(source, target) -> None:
    try:
        os.link(source, target)  # the same bytes under a second name: no second write
    except OSError:
        shutil.copyfile(source, target)  # a file system without hard links


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _remove_stale_temporaries(path: Path) -> None:
    # A process killed while writing leaves its temporary file (atomic_path's
    # ".<name>.*.tmp"); the checkpoint itself is intact. One writer per checkpoint path
    # is assumed, so any such file is debris: a big one, for a big model.
    for tmp in path.parent.glob(f".{path.name}.*.tmp"):
        try:
            tmp.unlink()
        except OSError:
            pass


def _loss_is_finite(loss) -> bool:
    # Reading the loss is a host sync; a save is one anyway (the state goes to the CPU).
    return math.isfinite(float(loss))
