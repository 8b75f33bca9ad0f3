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
instead of resuming from garbage. The checkpoint records the size, modification time and
SHA-256 of the data files it was trained on; a resume on changed data is refused.

Usage::

    ckpt = Checkpointer("out/checkpoint.pt", every=20)          # every 20 optimizer steps
    Trainer(model, opt, loss_fn, train_loader, callbacks=[ckpt]).fit()   # killed half-way
    trainer = Trainer(model2, opt2, loss_fn, train_loader, callbacks=[ckpt])  # same setup
    resume(trainer, "out/checkpoint.pt")
    trainer.fit()                                               # continues at the next batch
"""

from __future__ import annotations

import datetime as _dt
import functools
import hashlib
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
    "recipe", "model", "data_dir", "train_file", "validation_file", "dataset", "dataset_config", "eval_split",
    "task", "task_kind", "text_column", "text_pair_column", "label_column", "validation_split",
    "max_train_samples", "max_eval_samples", "epochs", "max_steps",
    "batch_size", "lr", "max_grad_norm", "grad_accum", "max_length", "inject_nonfinite", "extra",
)
# Options naming files or directories: `dir`, `dir/` and `/abs/dir` are the same data.
PATH_OPTIONS = ("model", "data_dir", "train_file", "validation_file")


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


def check_meta(ckpt: Mapping[str, Any], expected: Mapping[str, Any], path: str | os.PathLike) -> None:
    """Raise CheckpointError naming the first option whose value differs from ``expected``.

    Paths compare resolved; ``num_workers`` only as none vs some (see ``same_option``);
    ``data_files`` (from ``run_meta``) must be unchanged on disk.
    """
    meta = ckpt.get("meta", {})
    for key, want in expected.items():
        if key not in meta:
            continue  # an older checkpoint did not record it
        if key == "data_files":
            _check_data_files(meta[key], path)
        elif not same_option(key, meta[key], want):
            flag = "--" + key.replace("_", "-")
            why = ("; DataLoader workers draw random numbers differently from a loader without them "
                   "(any count above 0 continues exactly from another above 0)" if key == "num_workers" else "")
            raise CheckpointError(
                f"--resume: checkpoint {path} was written with {flag} {meta[key]!r}, this run has {want!r}{why}; "
                "rerun with the same options, or without --resume to start over"
            )


def same_option(key: str, recorded: Any, now: Any) -> bool:
    """Whether option ``key`` recorded in a checkpoint or results.json matches this run's value.

    Paths are the same data however they are spelled; worker counts match when both are
    0 or both above 0 (persistent workers are started without drawing on resume).
    Usage: ``same_option("data_dir", "data/", "/home/me/data")``
    """
    if key in PATH_OPTIONS:
        return _resolved(recorded, key != "model") == _resolved(now, key != "model")
    if key == "num_workers":
        return isinstance(recorded, int) and isinstance(now, int) and (recorded > 0) == (now > 0)
    return recorded == now


def _resolved(value: Any, always: bool) -> Any:
    # A model may be a hub name ("bert-base-uncased"): only an existing path is resolved.
    if not isinstance(value, str) or not value:
        return value
    path = Path(value).expanduser()
    return str(path.resolve()) if always or path.exists() else value


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
    _start_persistent_loaders(trainer)
    meta = ckpt["meta"]
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
    from .rng import capture_rng_state, restore_rng_state

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


# ------------------------------------------------------------------- resuming runs
def run_meta(cfg: RunConfig, precision: str, seed: int) -> dict[str, Any]:
    """What a (precision, seed) run's checkpoint records and a resume must match.

    The options of ``TRAJECTORY_OPTIONS`` (paths resolved), the worker count, and the
    size, modification time and SHA-256 of each data file (``data_files``).
    Usage: ``save_checkpoint(trainer, path, run_meta(cfg, "bf16", 0))``
    """
    options = {key: getattr(cfg, key) for key in TRAJECTORY_OPTIONS}
    for key in PATH_OPTIONS:
        options[key] = _resolved(options[key], key != "model")
    return {**options, "num_workers": cfg.num_workers, "data_files": data_fingerprints(cfg),
            "precision": precision, "seed": seed}


def data_files(cfg: RunConfig) -> list[Path]:
    """The local data files a run reads: ``--data-dir``'s train.tsv and dev.tsv, ``--train-file``, ``--validation-file``.

    (A ``--dataset`` from the Hugging Face cache is not fingerprinted.)
    Usage: ``data_files(RunConfig(data_dir="glue/SST-2"))``
    """
    files = []
    if cfg.data_dir:
        files += [Path(cfg.data_dir) / name for name in ("train.tsv", "dev.tsv")]
    files += [Path(f) for f in (cfg.train_file, cfg.validation_file) if f]
    return [f.expanduser().resolve() for f in files if f.expanduser().is_file()]


def data_fingerprints(cfg: RunConfig) -> dict[str, dict[str, Any]]:
    """``{resolved path: {"size", "mtime_ns", "sha256"}}`` for each of ``data_files(cfg)``."""
    out = {}
    for f in data_files(cfg):
        st = f.stat()
        out[str(f)] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": _sha256(str(f), st.st_size, st.st_mtime_ns)}
    return out


@functools.lru_cache(maxsize=64)
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    # Cached by (path, size, mtime): each run of a --compare records the same files.
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _check_data_files(recorded: Mapping[str, Mapping[str, Any]], path: str | os.PathLike) -> None:
    """Refuse a resume on data files that changed since the checkpoint (size, or content once mtime moved)."""
    for name, was in recorded.items():
        f = Path(name)
        try:
            st = f.stat()
        except OSError:
            raise CheckpointError(
                f"--resume: checkpoint {path} was trained on {f}, which is gone; restore it, or rerun without --resume "
                "to start over") from None
        if st.st_size == was.get("size") and st.st_mtime_ns == was.get("mtime_ns"):
            continue  # untouched: no need to read it
        if st.st_size != was.get("size") or _sha256(str(f), st.st_size, st.st_mtime_ns) != was.get("sha256"):
            raise CheckpointError(
                f"--resume: data file {f} changed since checkpoint {path} was written ({was.get('size')} -> "
                f"{st.st_size} bytes, new content); continuing would mix two datasets: restore the file, or rerun "
                "without --resume to start over")


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
            for option in TRAJECTORY_OPTIONS:
                value = getattr(cfg, option)
                if option in stored and not same_option(option, stored[option], value):
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
            if (name, seed) in finished:
                if cfg.save_model and not finished[(name, seed)].stopped_early:
                    _check_final_checkpoint(cfg, path, finished[(name, seed)])
                continue
            if not path.exists():
                continue
            ckpt = load_checkpoint(path, mmap=True)  # CRC-checked; tensors stay on disk
            check_meta(ckpt, run_meta(cfg, name, seed), path)
            found += 1
    if not found and not finished:
        first = out / checkpoint_name(precisions[0], cfg.seeds[0], single)
        raise CheckpointError(f"--resume: no checkpoint in {out} (looked for {first.name}); run without --resume to start")
    return finished


def _check_final_checkpoint(cfg: RunConfig, path: Path, result: RunResult) -> None:
    # --resume --save-model on a finished run saves the weights of its final checkpoint:
    # it must be there, from these options, and from the run's last step.
    what = f"the {result.precision} seed {result.seed} run finished, but"
    fix = "rerun without --resume (and with --save-model) to train it again"
    if not path.is_file():
        raise CheckpointError(f"--resume --save-model: {what} its checkpoint {path} is gone, so there are no "
                              f"weights to save; {fix}")
    ckpt = load_checkpoint(path, mmap=True)
    options = {k: v for k, v in run_meta(cfg, result.precision, result.seed).items() if k in TRAJECTORY_OPTIONS}
    check_meta(ckpt, options, path)
    step = ckpt["meta"].get("step")
    if step != result.steps:
        raise CheckpointError(f"--resume --save-model: {what} its checkpoint {path} is from step {step}, not its "
                              f"last step {result.steps} (the final save was skipped); {fix}")


def final_weights(path: str | os.PathLike, result: RunResult) -> dict[str, torch.Tensor]:
    """The model weights (``state_dict``) a finished run ended with, from its final checkpoint.

    Raises CheckpointError when the checkpoint is not from the run's last step.
    Usage: ``model.load_state_dict(final_weights("out/checkpoint.pt", result))``
    """
    ckpt = load_checkpoint(path)
    if ckpt["meta"].get("step") != result.steps:
        raise CheckpointError(f"--resume --save-model: checkpoint {path} is from step {ckpt['meta'].get('step')}, "
                              f"the run ended at step {result.steps}")
    return ckpt["trainer"]["model"]


def report_kept_run(result: RunResult, save_model: bool = False) -> None:
    """Log what ``--resume`` keeps of a finished run that ended early: the collapse and its diagnosis again.

    Usage: ``report_kept_run(finished[("fp16", 0)], save_model=cfg.save_model)``
    """
    if not result.stopped_early:
        return
    label = f"{result.precision} seed {result.seed}"
    logger.warning("training stopped early: %s", result.stopped_early)  # the line the run itself logged
    logger.warning("--resume keeps the %s run as it ended (resuming it would stop the same way); rerun without "
                   "--resume to train it again%s", label, " with the suggested fix" if "diagnosis" in result.stopped_early else "")
    if save_model:
        logger.warning("not saving the model of the %s run: it stopped early, its weights are not a finished model", label)


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
