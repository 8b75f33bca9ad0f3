"""One place sets a whole earlier run aside before a new run writes into its output directory.

An earlier run is everything a run writes (``run_entries``): results.json, report.md and
its charts, config.yaml, predictions, every checkpoint (step checkpoints included), saved
models, and the trackers' folders (``tensorboard/``, ``mlruns/``: each tracker's spec names
its own) where a later run would otherwise append to the same curves. Before a new run (not
``--resume``) all of it moves, together and by renames only (nothing copied, nothing deleted),
to ``OUTPUT_DIR/previous-<stamp>/``, with one notice; an identical re-run (the same
config.yaml) is said to be one. A run killed before its first results.json is an earlier run
too: its checkpoints are set aside, not overwritten. Files mixft did not write, ``--probe``'s probe.json/probe.md, the lock
and earlier ``previous-*`` folders stay where they are.

Usage::

    aside = set_aside_earlier_run(Path("outputs/run"), "20261125-101500", config_text=config_yaml(cfg))
    if aside: logger.warning(aside.notice)   # aside.undo() if the run is refused before writing
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mixft.errors import UsageError
from mixft.runs.outdir import (
    CHART_PATTERN,
    CHECKPOINT_PATTERN,
    CONFIG_NAME,
    PREDICTIONS_STEM,
    PREDICTIONS_SUFFIXES,
    PREVIOUS_PREFIX,
    REPORT_NAME,
    RESULTS_NAME,
    SAVED_MODEL_NAME,
    SHARDED_ASIDE_PATTERN,
    SHARDED_CHECKPOINT_PATTERN,
    TRACKER_FOLDERS,
)

#: Files a run writes, by pattern (besides results.json, report.md and config.yaml).
RUN_FILE_PATTERNS = (
    CHART_PATTERN,
    *(f"{PREDICTIONS_STEM}*{suffix}" for suffix in PREDICTIONS_SUFFIXES),
    CHECKPOINT_PATTERN,
)
#: Folders a run writes: saved models, and the local trackers' stores (each tracker's spec names its folder).
RUN_DIR_PATTERNS = (
    f"{SAVED_MODEL_NAME}",
    f"{SAVED_MODEL_NAME}-*",
    *TRACKER_FOLDERS,
    SHARDED_CHECKPOINT_PATTERN,  # an --fsdp run's checkpoints are directories
    SHARDED_ASIDE_PATTERN,  # ... and one a kill left aside, which --resume would otherwise find
)


def run_entries(out: Path) -> list[Path]:
    """What an earlier run left in ``out``, in a stable order (``[]`` for a new or foreign directory).

    Usage: ``[p.name for p in run_entries(Path("outputs/run"))]  # ["results.json", "config.yaml", ...]``
    """
    out = Path(out)
    if not out.is_dir():
        return []
    entries = [out / name for name in (RESULTS_NAME, REPORT_NAME, CONFIG_NAME) if (out / name).is_file()]
    entries += sorted({p for pattern in RUN_FILE_PATTERNS for p in out.glob(pattern) if p.is_file()})
    entries += sorted({p for pattern in RUN_DIR_PATTERNS for p in out.glob(pattern) if p.is_dir()})
    return entries


@dataclass
class SetAside:
    """An earlier run moved to ``folder``: ``notice`` says so; ``undo`` puts it back (a run refused after all)."""

    notice: str
    folder: Path
    names: list[str]

    def undo(self) -> str | None:
        """Move the earlier run back where it was, if the refused run wrote nothing in its place; the line to log."""
        out = self.folder.parent
        if any((out / name).exists() for name in self.names):
            return None  # the new run wrote there: both stay as they are
        for name in self.names:
            (self.folder / name).rename(out / name)
        try:
            self.folder.rmdir()
        except OSError:  # something else was put there meanwhile: keep the folder
            return None
        return f"{out}: the earlier run is back in place (this run was refused)"


#: The options that name what a run reads, by their flags: none may lie in what a new run sets aside.
INPUT_OPTIONS = {
    "model": "--model",
    "data_dir": "--data-dir",
    "train_file": "--train-file",
    "validation_file": "--validation-file",
    "predict_file": "--predict-file",
}


def check_inputs_stay(cfg) -> None:
    """UsageError (one line, before any work) when a new run would set aside what it reads.

    ``--eval-only --model OUT/model --output-dir OUT`` (docs/cli.md names the saved model
    so) read the model from the earlier run that ``set_aside_earlier_run`` moves away first;
    training from OUT/model into OUT would also write its new ``model/`` over its input.
    ``--resume`` sets nothing aside.
    """
    if cfg.resume:
        return
    entries = [p.resolve() for p in run_entries(Path(cfg.output_dir))]
    for field, flag in INPUT_OPTIONS.items():
        value = getattr(cfg, field, None)
        if not value:
            continue
        path = Path(value).expanduser().resolve()
        if field == "model" and not path.is_dir():  # a hub name, or no model at all: the model check says why
            continue
        inside = next((e for e in entries if path == e or e in path.parents), None)
        if inside is not None:
            raise UsageError(
                f"{flag} {value} is part of the earlier run in --output-dir {cfg.output_dir} ({inside.name}), which "
                f"a new run sets aside first: write to another --output-dir, or copy {inside.name} out of it"
            )


def set_aside_earlier_run(out: Path, stamp: str, config_text: str | None = None) -> SetAside | None:
    """Move everything an earlier run left in ``out`` to ``out/previous-<stamp>/``; None when there was none.

    ``config_text``: this run's config.yaml as it will be written; when the earlier one is
    the same, the notice says the new run is an identical re-run.
    """
    out = Path(out)
    entries = run_entries(out)
    if not entries:
        return None
    earlier_config = out / CONFIG_NAME
    identical = (
        config_text is not None
        and earlier_config.is_file()
        and _options_of(earlier_config.read_text(encoding="utf-8")) == _options_of(config_text)
    )
    target = out / f"{PREVIOUS_PREFIX}{stamp}"
    n = 1
    while target.exists():  # two runs within one second
        n += 1
        target = out / f"{PREVIOUS_PREFIX}{stamp}-{n}"
    said = _describe(entries)
    target.mkdir()
    for path in entries:
        path.rename(target / path.name)
    same = "; the same options as this run: an identical re-run" if identical else ""
    return SetAside(
        f"{out} held an earlier run ({said}): set it aside in {target}{same}", target, [p.name for p in entries]
    )


def _options_of(text: str) -> list[str]:
    # The comment lines at the top are mixft's header, not options.
    return [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def _describe(entries: list[Path]) -> str:
    names = [p.name for p in entries]
    patterns = (CHECKPOINT_PATTERN, SHARDED_CHECKPOINT_PATTERN, SHARDED_ASIDE_PATTERN)
    checkpoints = [n for n in names if any(Path(n).match(pattern) for pattern in patterns)]
    shown = [n + ("/" if p.is_dir() else "") for n, p in zip(names, entries) if n not in checkpoints]
    if checkpoints:
        shown.append(f"{len(checkpoints)} checkpoint{'s' if len(checkpoints) != 1 else ''}")
    return ", ".join(shown)
