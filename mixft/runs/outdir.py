"""The output directory: the name of every file in it, checked before any work, held by one run at a time.

This module is the one place that lists what OUTPUT_DIR holds and composes each run's names::

    results.json                      every run's measurements (mixft.results)
    report.md, *.png                  the comparison report, with its charts (mixft.report.markdown, .plots)
    checkpoint.pt                     a single run's checkpoint (mixft.train.checkpoint)
    checkpoint-<prec>-seed<k>.pt      one per run of a comparison or of several seeds
    checkpoint[-<prec>-seed<k>]-step<N>.pt   --save-total-limit's kept step checkpoints (hard links)
    checkpoint[...].dcp/              the same under --fsdp: sharded directories (mixft.train.sharded_checkpoint)
    config.yaml                       the run's effective options (--config reproduces the run)
    predictions[-<prec>-seed<k>].csv|jsonl   --predict-file's labels, one row per input
    tensorboard/, mlruns/             --report-to's local trackers (TRACKER_FOLDERS; mixft.callbacks.trackers)
    model/, model-<prec>-seed<k>/     --save-model's fine-tuned model, named the same way
    .mixft.lock                       held while a run uses the directory
    .mixft-shared-check-<random>      for a moment under torchrun: seen by every process? (mixft.runs.shared_dir)
    probe.json, probe.md              --probe's own files (never a run's)
    previous-<time>/                  an earlier run, set aside whole (mixft.runs.set_aside)

Where each name is spelled, once: the fixed names in ``mixft.output_names`` (the ground, so that
the report below this layer reads ``REPORT_NAME`` from there too), each tracker's folder in its
spec (``mixft.callbacks.tracker_names.TRACKERS``: a new tracker brings its folder with it).
Everything else reads them from here.

It imports no torch: the reports and the CLI read these names too.

Usage::

    check_output_dir(Path("outputs/run"), files=[RESULTS_NAME, checkpoint_name("bf16", 0)], dirs=["model"])
    with OutputLock(Path("outputs/run")):
        ...  # train, write results
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mixft.atomic import WriteFailed
from mixft.callbacks.tracker_names import TRACKER_FOLDERS
from mixft.errors import UsageError
from mixft.output_names import (
    CHART_PATTERN,
    CHECKPOINT_NAME,
    CHECKPOINT_PATTERN,
    CHECKPOINT_STEM,
    CHECKPOINT_SUFFIX,
    CONFIG_NAME,
    LOCK_NAME,
    PREDICTIONS_STEM,
    PREDICTIONS_SUFFIXES,
    PREVIOUS_PREFIX,
    PROBE_REPORT_NAME,
    PROBE_RESULTS_NAME,
    REPORT_NAME,
    RESULTS_NAME,
    SAVED_MODEL_NAME,
    SHARDED_ASIDE_PATTERN,
    SHARDED_CHECKPOINT_PATTERN,
    SHARDED_SUFFIX,
)

__all__ = [  # the names, for every reader above the ground (re-exported from mixft.output_names and the specs)
    "CHART_PATTERN",
    "CHECKPOINT_NAME",
    "CHECKPOINT_PATTERN",
    "CONFIG_NAME",
    "LOCK_NAME",
    "PREDICTIONS_STEM",
    "PREDICTIONS_SUFFIXES",
    "PREVIOUS_PREFIX",
    "PROBE_REPORT_NAME",
    "PROBE_RESULTS_NAME",
    "REPORT_NAME",
    "RESULTS_NAME",
    "SAVED_MODEL_NAME",
    "SHARDED_ASIDE_PATTERN",
    "SHARDED_CHECKPOINT_PATTERN",
    "SHARDED_SUFFIX",
    "TRACKER_FOLDERS",
    "OutputLock",
    "RunNames",
    "check_output_dir",
    "checkpoint_name",
    "has_checkpoint",
    "planned_entries",
    "predictions_name",
    "recorded_runs",
    "run_names",
    "saved_model_name",
    "step_checkpoint_pattern",
]


def checkpoint_name(precision: str, seed: int, single: bool = True, sharded: bool = False) -> str:
    """``checkpoint.pt`` for a single run; ``checkpoint-<precision>-seed<k>.pt`` in a comparison;
    ``sharded`` (``--fsdp``): the directory ``checkpoint[-<precision>-seed<k>].dcp``.

    Usage: ``out / checkpoint_name("bf16", 0, single=False)``
    """
    name = CHECKPOINT_NAME if single else f"{CHECKPOINT_STEM}-{precision}-seed{seed}{CHECKPOINT_SUFFIX}"
    return name.removesuffix(CHECKPOINT_SUFFIX) + SHARDED_SUFFIX if sharded else name


def saved_model_name(precision: str, seed: int, single: bool = True) -> str:
    """``model`` for a single run; ``model-<precision>-seed<k>`` in a comparison (``--save-model``'s directory).

    Usage: ``out / saved_model_name("bf16", 0)``
    """
    return SAVED_MODEL_NAME if single else f"{SAVED_MODEL_NAME}-{precision}-seed{seed}"


def step_checkpoint_pattern(precision: str, seed: int, single: bool = True, sharded: bool = False) -> str:
    """The kept step checkpoints' name with ``{step}`` to fill: ``checkpoint-step{step}.pt`` for a single run
    (``.dcp`` directories when ``sharded``).

    Usage: ``step_checkpoint_pattern("bf16", 0, single=False).format(step=40)  # checkpoint-bf16-seed0-step40.pt``
    """
    return (
        checkpoint_name(precision, seed, single).removesuffix(CHECKPOINT_SUFFIX)
        + "-step{step}"
        + (SHARDED_SUFFIX if sharded else CHECKPOINT_SUFFIX)
    )


def predictions_name(input_file: str, precision: str, seed: int, single: bool = True) -> str:
    """``predictions.csv`` (``.jsonl`` for JSON inputs) for a single run; ``predictions-<precision>-seed<k>.csv`` in a comparison.

    Usage: ``out / predictions_name("new.jsonl", "bf16", 0)  # predictions.jsonl``
    """
    csv, jsonl = PREDICTIONS_SUFFIXES
    suffix = jsonl if Path(input_file).suffix.lower() in (".json", ".jsonl") else csv
    return PREDICTIONS_STEM + ("" if single else f"-{precision}-seed{seed}") + suffix


@dataclass(frozen=True)
class RunNames:
    """One (precision, seed) run's names in OUTPUT_DIR (``run_names``)."""

    checkpoint: str
    step_checkpoints: str  # with "{step}" to fill
    saved_model: str
    predictions: str | None  # None without --predict-file


def run_names(
    precisions: Sequence[str], seeds: Sequence[int], predict_file: str | None = None, sharded: bool = False
) -> dict[tuple[str, int], RunNames]:
    """Every (precision, seed) run's file names, in one table (a single run gets the short names;
    ``sharded``: the checkpoints are ``.dcp`` directories).

    Usage: ``run_names(["fp32", "bf16"], [0])[("bf16", 0)].checkpoint  # checkpoint-bf16-seed0.pt``
    """
    single = len(precisions) * len(seeds) == 1
    return {
        (name, seed): RunNames(
            checkpoint_name(name, seed, single, sharded),
            step_checkpoint_pattern(name, seed, single, sharded),
            saved_model_name(name, seed, single),
            predictions_name(predict_file, name, seed, single) if predict_file else None,
        )
        for seed in seeds
        for name in precisions
    }


def has_checkpoint(out: Path) -> bool:
    """Whether ``out`` holds a checkpoint that ``--resume`` could continue from.

    Usage: ``has_checkpoint(Path("outputs/run"))``
    """
    return any(Path(out).glob(CHECKPOINT_PATTERN)) or any(Path(out).glob(SHARDED_CHECKPOINT_PATTERN))


def planned_entries(runs: Iterable[RunNames], save_model: bool) -> tuple[list[str], list[str]]:
    """The files and the directories a command's runs may write (``check_output_dir``'s arguments).

    ``runs``: every run's names (``run_names(...).values()``, made once); a sharded checkpoint
    (``.dcp``) is a directory, as its name says.
    Usage: ``files, dirs = planned_entries(run_names(["fp32", "bf16"], [0]).values(), save_model=False)``
    """
    runs = list(runs)
    checkpoints = [n.checkpoint for n in runs]
    sharded = [c for c in checkpoints if c.endswith(SHARDED_SUFFIX)]
    files = [RESULTS_NAME, REPORT_NAME, CONFIG_NAME, *(c for c in checkpoints if c not in sharded)]
    files += [n.predictions for n in runs if n.predictions]
    dirs = [n.saved_model for n in runs] if save_model else []
    return files, dirs + sharded


def recorded_runs(out: Path) -> list[Any]:
    """The ``runs`` of ``out``'s results.json as written (plain dicts); ``[]`` when there is no file.

    The runner reads it once per invocation (``mixft.runs.identity.resume_runs`` keeps what
    it needs). A file that is not JSON, or has no ``runs``, raises its parsing error
    (OSError, ValueError, KeyError, TypeError): the caller words it for its context.
    Usage: ``recorded_runs(Path("outputs/run"))[0]["precision"]``
    """
    path = Path(out) / RESULTS_NAME
    if not path.is_file():
        return []
    return json.loads(path.read_text(encoding="utf-8"))["runs"]


def check_output_dir(out: Path, *, files=(), dirs=()) -> None:
    """Fail now, not after an hour of training, if results cannot be written.

    ``files`` must be files (or absent) and ``dirs`` directories (or absent): a
    results.json that is a directory, say, would otherwise end a finished run with the
    results lost.
    """
    if out.exists() and not out.is_dir():
        raise UsageError(f"--output-dir {out}: exists and is not a directory")
    for name in files:
        path = out / name
        if path.exists() and not path.is_file():
            raise UsageError(f"{path}: exists and is not a file; move it away or choose another --output-dir")
    for name in dirs:
        path = out / name
        if path.exists() and not path.is_dir():
            raise UsageError(f"{path}: exists and is not a directory; move it away or choose another --output-dir")
    if out.is_symlink() and not out.exists():
        raise UsageError(f"--output-dir {out}: is a symbolic link to {os.readlink(out)}, which does not exist")
    # Nothing is created yet (a refused run leaves no empty directory behind): the write test
    # runs in the directory, or where it would be created; OutputLock creates it.
    where = out
    while not where.exists() and where != where.parent:
        where = where.parent
    if not where.is_dir():
        raise UsageError(f"--output-dir {out}: {where} exists and is not a directory")
    try:
        fd, probe = tempfile.mkstemp(prefix=".mixft-write-check-", dir=where)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise UsageError(f"--output-dir {out}: not writable ({e.strerror or e})") from None


class OutputLock:
    """An exclusive lock on the output directory for one run's lifetime.

    A second run on the same directory refuses at start-up instead of overwriting the
    first one's checkpoints and results. ``flock`` locks die with their process, so a
    killed run never leaves a stale lock behind.
    """

    def __init__(self, out: Path):
        self.path = Path(out) / LOCK_NAME
        self._fd: int | None = None

    @classmethod
    def for_this_process(cls, out: Path) -> contextlib.AbstractContextManager:
        """The lock, taken by the first process of a launch; a no-op in the others (they share its directory).

        Usage: ``with OutputLock.for_this_process(out): ...``
        """
        from mixft import distributed  # torch: this module's names are read by the CLI before torch loads

        return cls(out) if distributed.is_main_process() else contextlib.nullcontext()

    def __enter__(self) -> OutputLock:
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)  # checked writable by check_output_dir
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            if e.errno in (errno.EAGAIN, errno.EACCES):
                raise UsageError(
                    f"--output-dir {self.path.parent}: another mixft run (pid {holder}) is using it; "
                    "wait for it or choose another --output-dir"
                ) from None
            raise
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError as e:  # a full disk or quota: the run's first write, one line like every later one
            os.close(fd)
            raise WriteFailed(self.path, e) from e
        self._fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            os.close(self._fd)  # releases the lock; the file stays (removing it would race a waiting run)
            self._fd = None
