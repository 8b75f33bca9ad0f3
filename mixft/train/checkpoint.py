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

This module is the file format and the restore only (the ``Checkpointer`` callback that
decides when to save is ``mixft.callbacks.checkpointer``): which options a checkpoint records
and when a resume may go on (same options, unchanged data files) is the run layer's
policy (``mixft.runs.identity``), and where checkpoints live is ``mixft.runs.outdir``'s.
It does not import the loop: it reads the trainer through ``mixft.train.hooks.TrainerLike``,
and what goes into the file and back into the trainer's objects is the trainer's own
``state_dict()`` / ``load_state_dict()`` (``mixft.train.trainer``).

When and where to save during training is the policy, ``mixft.callbacks.checkpointer``'s
``Checkpointer`` (Lightning's split: ``ModelCheckpoint`` apart from ``CheckpointIO``).

Usage::

    save_checkpoint(trainer, "out/checkpoint.pt")                # or a Checkpointer callback
    trainer = Trainer(model2, opt2, loss_fn, train_loader)      # the same setup, a new process
    resume(trainer, "out/checkpoint.pt")
    trainer.fit()                                               # continues at the next batch
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from mixft.atomic import atomic_path
from mixft.errors import UsageError, shortened
from mixft.log import logger
from mixft.rng import capture_rng_state, restore_rng_state
from mixft.train.hooks import TrainerLike

FORMAT = "mixft-checkpoint"
VERSION = 1


class CheckpointError(UsageError):
    """A checkpoint that is missing, damaged, or from different options (CLI exit code 2)."""


# ---------------------------------------------------------------------- save / load
def save_checkpoint(
    trainer: TrainerLike,
    path: str | os.PathLike,
    meta: Mapping[str, Any] | None = None,
    states: Mapping[str, Any] | None = None,
) -> Path:
    """Atomically write ``trainer``'s full state (plus ``meta``) to ``path``.

    ``states``: other objects the rest of the run depends on (``{name: obj}`` with
    ``state_dict()``, e.g. a ``mixft.callbacks.best.BestModel``), saved under ``"states"``;
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
        raise CheckpointError(
            f"--resume: checkpoint {path} cannot be loaded ({reason}); delete it to start over"
        ) from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise CheckpointError(f"--resume: {path} is not a mixft checkpoint; delete it to start over")
    if ckpt.get("version") != VERSION:
        raise CheckpointError(
            f"--resume: checkpoint {path} has format version {ckpt.get('version')!r}, this mixft reads {VERSION}"
        )
    return ckpt


def resume(
    trainer: TrainerLike, path: str | os.PathLike, *, verify: bool = True, states: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Load the checkpoint at ``path`` into ``trainer``; its next ``fit()`` continues the run.

    Refuses a damaged file and one written at another precision. ``verify=False``: the
    caller has already checked the file (its CRCs and its metadata, as the runner's
    ``make_plan`` does), so neither is checked again. ``states``: the objects saved with
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
        raise CheckpointError(f"--resume: checkpoint {path} does not fit this run ({fit_reason(e)})") from None
    saved_states = ckpt.get("states") or {}
    for name, obj in (states or {}).items():
        if name in saved_states:
            obj.load_state_dict(saved_states[name])
    start_persistent_loaders(trainer)
    logger.info("resuming from %s (step %s, epoch %s)", path, meta.get("step"), meta.get("epoch"))
    return meta


# How torch says a saved tensor's shape is not the model's: nn.Module.load_state_dict, and DCP's load planner.
_SIZE = r"torch\.Size\(\[(?P<{}>[^\]]*)\]\)"
_SHAPE_MISMATCHES = (
    re.compile(
        r"size mismatch for (?P<name>[^\s:]+): copying a param with shape "
        + _SIZE.format("saved")
        + r" from checkpoint, the shape in current model is "
        + _SIZE.format("current")
    ),
    re.compile(
        r"Size mismatch between saved "
        + _SIZE.format("saved")
        + r" and current: "
        + _SIZE.format("current")
        + r" for (?P<name>[^\s:]+)"
    ),
)


def fit_reason(exc: BaseException) -> str:
    """Why a checkpoint's state did not load into this run's model, in one short line: the first
    parameter whose shape differs, with both shapes (a model regenerated with another size), else the
    error's own words, cut at a word boundary.

    Usage: ``raise CheckpointError(f"--resume: checkpoint {path} does not fit this run ({fit_reason(e)})")``
    """
    text = str(exc)
    found = [m for pattern in _SHAPE_MISMATCHES for m in pattern.finditer(text)]
    if not found:
        return shortened(text)
    first = found[0]
    others = len(found) - 1
    more = f"; {others} more parameter{'s differ' if others > 1 else ' differs'} in shape" if others else ""
    return (
        f"{first['name']} has shape [{first['saved']}] in the checkpoint, "
        f"[{first['current']}] in this run's model{more}"
    )


def start_persistent_loaders(trainer: TrainerLike) -> None:
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
