"""Checkpoints: stop a run anywhere and continue it to bit-identical weights.

A checkpoint holds everything the rest of a run depends on: the model, every optimizer,
every LR scheduler, the GradScaler, the trainer's ``TrainState`` (epoch, micro-batches
consumed in it, step, history, evaluations, time so far) and the random number
generators (python ``random``, numpy when imported, torch CPU, CUDA when present; see
``mixft.rng``), both as they are now and as they were when the current epoch's loader started. Resuming
replays the epoch's start (the loader draws its sampler and worker seeds there), skips
the micro-batches already trained, then continues from the saved RNG state, so dropout
draws the same masks: on CPU, fp32 and bf16 runs end with the same weights, bit for bit,
as a run that was never stopped.

With DataLoader worker processes (``persistent_workers``), a loader draws its worker
seed from the global RNG only the first time it is iterated; ``resume`` starts the loaders
the interrupted process had already started, without drawing, so a resumed run with
workers ends bit-identical too.

Files are written atomically (temp file, fsync, rename): a kill at any moment leaves the
previous checkpoint or the new one, never a torn file; a failed write (disk full) raises
``mixft.atomic.WriteFailed`` and leaves the previous checkpoint. Loading checks the zip's
CRC-32 of every record first, so a corrupted or truncated file is refused with one line
instead of resuming from garbage.

This module is the file format and the restore only: which options a checkpoint records
and when a resume may go on (same options, unchanged data files) is the run layer's
policy (``mixft.run.identity``), and where checkpoints live is ``mixft.run.outdir``'s.

Usage::

    ckpt = Checkpointer("out/checkpoint.pt", every=20)          # every 20 optimizer steps
    Trainer(model, opt, loss_fn, train_loader, callbacks=[ckpt]).fit()   # killed half-way
    trainer = Trainer(model2, opt2, loss_fn, train_loader, callbacks=[ckpt])  # same setup
    resume(trainer, "out/checkpoint.pt")
    trainer.fit()                                               # continues at the next batch
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import shutil
import time
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from .atomic import atomic_path
from .errors import UsageError
from .log import logger
from .options import NON_NEGATIVE_FLOAT, NON_NEGATIVE_INT, POSITIVE_INT
from .rng import capture_rng_state, restore_rng_state
from .callbacks import Callback, StepInfo
from .trainer import Trainer

FORMAT = "mixft-checkpoint"
VERSION = 1


class CheckpointError(UsageError):
    """A checkpoint that is missing, damaged, or from different options (CLI exit code 2)."""


# ---------------------------------------------------------------------- save / load
def save_checkpoint(trainer: Trainer, path: str | os.PathLike, meta: Mapping[str, Any] | None = None,
                    states: Mapping[str, Any] | None = None) -> Path:
    """Atomically write ``trainer``'s full state (plus ``meta``) to ``path``.

    ``states``: other objects the rest of the run depends on (``{name: obj}`` with
    ``state_dict()``, e.g. a ``mixft.best_model.BestModel``), saved under ``"states"``;
    ``resume(..., states=...)`` loads them back.
    Call between optimizer steps (a callback's ``on_step_end`` or ``on_epoch_end``).
    Usage: ``save_checkpoint(trainer, "out/checkpoint.pt", {"recipe": "bert-sst2"})``
    """
    path = Path(path)
    payload = {
        "format": FORMAT,
        "version": VERSION,
        "meta": {
            **dict(meta or {}),
            "precision": trainer.precision.name,
            "step": trainer.state.step,
            "epoch": trainer.state.epoch,
            "saved": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        },
        "trainer": trainer.state_dict(),
    }
    if states:
        payload["states"] = {name: obj.state_dict() for name, obj in states.items()}
    crc = torch.serialization.get_crc32_options()
    torch.serialization.set_crc32_options(True)  # load_checkpoint verifies these CRCs
    try:
        with atomic_path(path) as tmp, open(tmp, "wb") as f:
            # Through a Python file, a failed write is an OSError with its errno (ENOSPC);
            # torch.save(payload, tmp) would only say "file write failed".
            torch.save(payload, f)
    finally:
        torch.serialization.set_crc32_options(crc)
    logger.debug("checkpoint saved: %s (step %d)", path, trainer.state.step)
    return path


def verify_checkpoint(path: str | os.PathLike) -> None:
    """Raise CheckpointError unless ``path`` is a complete file whose records match their CRC-32.

    ``torch.load`` does not check CRCs: a flipped byte in a weight would load silently.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"--resume: no checkpoint at {path}; run without --resume to start over")
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()  # reads every record and checks its CRC-32
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
        raise CheckpointError(
            f"--resume: checkpoint {path} is corrupted or truncated ({e}); delete it to start over"
        ) from None
    if bad is not None:
        raise CheckpointError(
            f"--resume: checkpoint {path} is corrupted (record {bad} fails its CRC check); delete it to start over"
        )


def load_checkpoint(path: str | os.PathLike, *, verify: bool = True, mmap: bool = False) -> dict[str, Any]:
    """The checkpoint at ``path`` as a dict (``meta``, ``trainer``), on the CPU.

    Raises CheckpointError for a missing, corrupted or truncated file, or one that is not
    a mixft checkpoint. Loads with ``weights_only=True``: no code runs from the file.
    Usage: ``load_checkpoint("out/checkpoint.pt")["meta"]["step"]``
    """
    path = Path(path)
    if verify:
        verify_checkpoint(path)
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as e:  # unpickling errors come in many types; all mean "unusable"
        reason = str(e).splitlines()[0][:160] if str(e) else type(e).__name__
        raise CheckpointError(f"--resume: checkpoint {path} cannot be loaded ({reason}); delete it to start over") from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise CheckpointError(f"--resume: {path} is not a mixft checkpoint; delete it to start over")
    if ckpt.get("version") != VERSION:
        raise CheckpointError(
            f"--resume: checkpoint {path} has format version {ckpt.get('version')!r}, this mixft reads {VERSION}"
        )
    return ckpt


def resume(trainer: Trainer, path: str | os.PathLike, *, verify: bool = True,
           states: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Load the checkpoint at ``path`` into ``trainer``; its next ``fit()`` continues the run.

    Refuses a damaged file and one written at another precision. ``verify=False``: the
    caller has already checked the file (its CRCs and its metadata, as the runner's
    ``plan()`` does), so neither is checked again. ``states``: the objects saved with
    ``save_checkpoint(..., states=...)``, loaded back by name (one the checkpoint lacks
    keeps its fresh state). Returns the checkpoint's meta.
    Usage: ``resume(trainer, "out/checkpoint.pt"); trainer.fit()``
    """
    ckpt = load_checkpoint(path, verify=verify)
    meta = ckpt.get("meta", {})
    if verify and "precision" in meta and meta["precision"] != trainer.precision.name:
        raise CheckpointError(
            f"--resume: checkpoint {path} was written with --precision {meta['precision']!r}, this run has "
            f"{trainer.precision.name!r}; rerun with the same options, or without --resume to start over"
        )
    try:
        trainer.load_state_dict(ckpt["trainer"])
    except (KeyError, TypeError, ValueError, RuntimeError) as e:
        reason = " ".join(str(e).split())[:200]
        raise CheckpointError(f"--resume: checkpoint {path} does not fit this run ({reason})") from None
    saved_states = ckpt.get("states") or {}
    for name, obj in (states or {}).items():
        if name in saved_states:
            obj.load_state_dict(saved_states[name])
    _start_persistent_loaders(trainer)
    logger.info("resuming from %s (step %s, epoch %s)", path, meta.get("step"), meta.get("epoch"))
    return meta


def _start_persistent_loaders(trainer: Trainer) -> None:
    """Start the worker-backed loaders the interrupted process had started, without drawing.

    A DataLoader with ``persistent_workers`` draws its workers' base seed from the global
    RNG at its first ``iter()`` only; later epochs reuse the workers and draw nothing. A
    resumed process iterating it "for the first time" would draw once more than the
    uninterrupted run did, and every dropout mask after that would differ. The draw
    happens here instead, with the RNG state put back afterwards. (The workers' own seeds
    then differ from the original ones; mixft's loaders draw nothing in the workers.)
    """
    state = trainer.state
    started = {
        "train_loader": state.epoch > 0 or state.batch_in_epoch > 0,  # iterated before the stop
        "eval_loader": bool(state.eval_history),  # evaluated at least once
    }
    for attr, was_started in started.items():
        loader = getattr(trainer, attr, None)
        if not (was_started and getattr(loader, "persistent_workers", False) and getattr(loader, "num_workers", 0) > 0):
            continue
        if getattr(loader, "_iterator", None) is not None:
            continue  # already started in this process
        rng = capture_rng_state()
        try:
            iter(loader)
        finally:
            restore_rng_state(rng)


# ------------------------------------------------------------------------- callback
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

    Usage: ``Trainer(..., callbacks=[Checkpointer("out/checkpoint.pt", every=20)])``
    """

    def __init__(self, path: str | os.PathLike, every: int = 20, meta: Mapping[str, Any] | None = None, *,
                 minutes: float = 0.0, keep: int | None = None, step_name: str = "checkpoint-step{step}.pt",
                 states: Mapping[str, Any] | None = None):
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
        self.saved_step: int | None = None  # optimizer step of the latest save
        self.write_time_s = 0.0  # seconds spent writing checkpoints (a resumed run starts from the checkpoint's)
        self._last_save = time.monotonic()

    def save(self, trainer: Trainer) -> Path:
        if self.saved_step is None:
            _remove_stale_temporaries(self.path)
        start = time.perf_counter()
        with trainer.untimed():  # disk writes are not training speed
            # The time so far goes into the file: a resumed run goes on counting from it.
            save_checkpoint(trainer, self.path, {**self.meta, "checkpoint_time_s": self.write_time_s}, self.states)
            if self.keep:
                self._keep_step_copy(trainer.state.step)
        self.write_time_s += time.perf_counter() - start
        self.saved_step = trainer.state.step
        self._last_save = time.monotonic()
        return self.path

    def on_train_begin(self, trainer: Trainer) -> None:
        self._last_save = time.monotonic()  # the time cadence counts from the start of this fit

    def on_step_end(self, trainer: Trainer, info: StepInfo) -> None:
        by_steps = self.every and info.step % self.every == 0
        by_time = self.minutes and time.monotonic() - self._last_save >= self.minutes * 60
        if (by_steps or by_time) and _loss_is_finite(info.loss):
            self.save(trainer)

    def on_epoch_end(self, trainer: Trainer, metrics: dict[str, float]) -> None:
        losses = trainer.state.history["loss"]
        if not losses or _loss_is_finite(losses[-1]):
            self.save(trainer)

    def step_checkpoints(self) -> list[Path]:
        """The kept step checkpoints beside ``path``, oldest first.

        Usage: ``[p.name for p in ckpt.step_checkpoints()]  # ["checkpoint-step20.pt", ...]``
        """
        prefix, _, suffix = self.step_name.partition("{step}")
        found = []
        for candidate in self.path.parent.glob(f"{prefix}*{suffix}"):
            number = candidate.name[len(prefix):len(candidate.name) - len(suffix)]
            if number.isdigit():
                found.append((int(number), candidate))
        return [p for _, p in sorted(found)]

    def _keep_step_copy(self, step: int) -> None:
        target = self.path.parent / self.step_name.format(step=step)
        target.unlink(missing_ok=True)  # a resumed run saving the same step again
        try:
            os.link(self.path, target)  # the same bytes under a second name: no second write
        except OSError:
            shutil.copyfile(self.path, target)  # a file system without hard links
        for old in self.step_checkpoints()[: -self.keep]:
            old.unlink(missing_ok=True)


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
