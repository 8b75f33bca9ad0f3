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

Files are written atomically (temp file, fsync, rename): a kill at any moment leaves the
previous checkpoint or the new one, never a torn file. Loading checks the zip's CRC-32
of every record first, so a corrupted or truncated file is refused with one line instead
of resuming from garbage.

Usage::

    ckpt = Checkpointer("out/checkpoint.pt", every=20)          # every 20 optimizer steps
    Trainer(model, opt, loss_fn, train_loader, callbacks=[ckpt]).fit()   # killed half-way
    trainer = Trainer(model2, opt2, loss_fn, train_loader, callbacks=[ckpt])  # same setup
    resume(trainer, "out/checkpoint.pt")
    trainer.fit()                                               # continues at the next batch
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

import torch

from .atomic import atomic_path
from .config import RunConfig
from .errors import UsageError
from .interrupt import is_interrupted
from .log import logger
from .results import RunResult
from .trainer import Callback, StepInfo, Trainer

FORMAT = "mixft-checkpoint"
VERSION = 1
CHECKPOINT_NAME = "checkpoint.pt"

# The options a checkpoint must share with the run that resumes it: each one changes the
# trajectory (data, model, schedule, injected faults) or the evaluation being reported.
TRAJECTORY_OPTIONS = (
    "recipe", "model", "data_dir", "max_train_samples", "max_eval_samples", "epochs", "max_steps",
    "batch_size", "lr", "max_grad_norm", "grad_accum", "max_length", "inject_nonfinite", "extra",
)


class CheckpointError(UsageError):
    """A checkpoint that is missing, damaged, or from different options (CLI exit code 2)."""


def checkpoint_name(precision: str, seed: int, single: bool = True) -> str:
    """``checkpoint.pt`` for a single run; ``checkpoint-<precision>-seed<k>.pt`` in a comparison."""
    return CHECKPOINT_NAME if single else f"checkpoint-{precision}-seed{seed}.pt"


# ---------------------------------------------------------------------- save / load
def save_checkpoint(trainer: Trainer, path: str | os.PathLike, meta: Mapping[str, Any] | None = None) -> Path:
    """Atomically write ``trainer``'s full state (plus ``meta``) to ``path``.

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
    crc = torch.serialization.get_crc32_options()
    torch.serialization.set_crc32_options(True)  # load_checkpoint verifies these CRCs
    try:
        with atomic_path(path) as tmp:
            torch.save(payload, tmp)
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


def check_meta(ckpt: Mapping[str, Any], expected: Mapping[str, Any], path: str | os.PathLike) -> None:
    """Raise CheckpointError naming the first option whose value differs from ``expected``."""
    meta = ckpt.get("meta", {})
    for key, want in expected.items():
        if key in meta and meta[key] != want:
            flag = "--" + key.replace("_", "-")
            raise CheckpointError(
                f"--resume: checkpoint {path} was written with {flag} {meta[key]!r}, this run has {want!r}; "
                "rerun with the same options, or without --resume to start over"
            )


def resume(
    trainer: Trainer, path: str | os.PathLike, expected: Mapping[str, Any] | None = None, *, verify: bool = True
) -> dict[str, Any]:
    """Load the checkpoint at ``path`` into ``trainer``; its next ``fit()`` continues the run.

    ``expected``: option values the checkpoint must have been written with (see
    ``TRAJECTORY_OPTIONS``); the precision must always match. Returns the checkpoint's meta.
    Usage: ``resume(trainer, "out/checkpoint.pt"); trainer.fit()``
    """
    ckpt = load_checkpoint(path, verify=verify)
    check_meta(ckpt, {**dict(expected or {}), "precision": trainer.precision.name}, path)
    try:
        trainer.load_state_dict(ckpt["trainer"])
    except (KeyError, TypeError, ValueError, RuntimeError) as e:
        reason = " ".join(str(e).split())[:200]
        raise CheckpointError(f"--resume: checkpoint {path} does not fit this run ({reason})") from None
    meta = ckpt["meta"]
    logger.info("resuming from %s (step %s, epoch %s)", path, meta.get("step"), meta.get("epoch"))
    return meta


# ------------------------------------------------------------------- resuming runs
def run_meta(cfg: RunConfig, precision: str, seed: int) -> dict[str, Any]:
    """What a (precision, seed) run's checkpoint records and a resume must match."""
    return {**{key: getattr(cfg, key) for key in TRAJECTORY_OPTIONS}, "precision": precision, "seed": seed}


def finished_runs(cfg: RunConfig, precisions: Sequence[str]) -> dict[tuple[str, int], RunResult]:
    """Runs of this plan that OUTPUT_DIR/results.json holds and that were not interrupted.

    ``--resume`` keeps these as they are (a run stopped by collapse detection counts as
    finished: resuming it would collapse again). Raises CheckpointError when the file
    cannot be read or holds one of these runs made with different options.
    """
    path = Path(cfg.output_dir) / "results.json"
    if not path.is_file():
        return {}
    try:
        runs = json.loads(path.read_text(encoding="utf-8"))["runs"]
        wanted = {(name, seed) for name in precisions for seed in cfg.seeds}
        done: dict[tuple[str, int], RunResult] = {}
        for run in runs:
            key = (run.get("precision"), run.get("seed"))
            if key not in wanted or is_interrupted(run):
                continue
            stored = run.get("config") or {}
            for option, value in run_meta(cfg, *key).items():
                if option in stored and stored[option] != value:
                    raise CheckpointError(
                        f"--resume: {path} holds a {key[0]} seed {key[1]} run made with --{option.replace('_', '-')} "
                        f"{stored[option]!r}, this run has {value!r}; rerun with the same options or another --output-dir"
                    )
            known = {f.name for f in fields(RunResult)}
            done[key] = RunResult(**{k: v for k, v in run.items() if k in known})
    except CheckpointError:
        raise
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise CheckpointError(f"--resume: {path} is not a readable results file ({type(e).__name__}: {e})") from None
    return done


def resume_plan(cfg: RunConfig, precisions: Sequence[str]) -> dict[tuple[str, int], RunResult]:
    """Check before any work that ``--resume`` can go on; returns the finished runs.

    Every checkpoint a run would continue from must be intact and written with the same
    options; runs with neither a checkpoint nor a finished result start from scratch.
    Raises CheckpointError when there is nothing at all to resume.
    """
    out = Path(cfg.output_dir)
    single = len(precisions) * len(cfg.seeds) == 1
    finished = finished_runs(cfg, precisions)
    found = 0
    for seed in cfg.seeds:
        for name in precisions:
            path = out / checkpoint_name(name, seed, single)
            if (name, seed) in finished or not path.exists():
                continue
            ckpt = load_checkpoint(path, mmap=True)  # CRC-checked; tensors stay on disk
            check_meta(ckpt, run_meta(cfg, name, seed), path)
            found += 1
    if not found and not finished:
        first = out / checkpoint_name(precisions[0], cfg.seeds[0], single)
        raise CheckpointError(f"--resume: no checkpoint in {out} (looked for {first.name}); run without --resume to start")
    return finished


# ------------------------------------------------------------------------- callback
class Checkpointer(Callback):
    """Save a checkpoint every ``every`` optimizer steps and at the end of every epoch.

    A periodic or epoch-end save is left out when the latest window loss is inf/NaN (the
    forward pass or the weights are broken): the previous checkpoint stays the last good
    one. A skipped step alone does not stop a save - it leaves the weights untouched,
    and an isolated skip (an fp16 overflow, an injected fault) is normal. Put a
    ``CollapseDetector`` before this callback so a collapse is caught before any save.
    ``save(trainer)`` writes unconditionally (the interrupt handler uses it).
    ``every=0``: epoch ends (and explicit saves) only.

    Usage: ``Trainer(..., callbacks=[Checkpointer("out/checkpoint.pt", every=20)])``
    """

    def __init__(self, path: str | os.PathLike, every: int = 20, meta: Mapping[str, Any] | None = None):
        if isinstance(every, bool) or not isinstance(every, int) or every < 0:
            raise ValueError(f"every must be an integer >= 0, got {every!r}")
        self.path = Path(path)
        self.every = every
        self.meta = dict(meta or {})
        self.saved_step: int | None = None  # optimizer step of the latest save

    def save(self, trainer: Trainer) -> Path:
        if self.saved_step is None:
            _remove_stale_temporaries(self.path)
        with trainer.untimed():  # disk writes are not training speed
            save_checkpoint(trainer, self.path, self.meta)
        self.saved_step = trainer.state.step
        return self.path

    def on_step_end(self, trainer: Trainer, info: StepInfo) -> None:
        if self.every and info.step % self.every == 0 and _finite(info.loss):
            self.save(trainer)

    def on_epoch_end(self, trainer: Trainer, metrics: dict[str, float]) -> None:
        losses = trainer.state.history["loss"]
        if not losses or _finite(losses[-1]):
            self.save(trainer)


def _remove_stale_temporaries(path: Path) -> None:
    # A process killed while writing leaves its temporary file (atomic_path's
    # ".<name>.*.tmp"); the checkpoint itself is intact. One writer per checkpoint path
    # is assumed, so any such file is debris: a big one, for a big model.
    for tmp in path.parent.glob(f".{path.name}.*.tmp"):
        try:
            tmp.unlink()
        except OSError:
            pass


def _finite(loss) -> bool:
    # Reading the loss is a host sync; a save is one anyway (the state goes to the CPU).
    return math.isfinite(float(loss))
