"""A user's data file (CSV, TSV, JSON, JSON Lines, Parquet) read into an Arrow dataset by `datasets`.

Usage::

    from mixft.data.files import load_data_file
    train = load_data_file("reviews/train.csv")    # a datasets.Dataset, memory-mapped Arrow

The format comes from the extension. `datasets` converts the file once into its cache
(Arrow on disk, memory-mapped), so a 100k-row file costs little RAM and a second run
skips the conversion. Every problem (missing, empty, unreadable, malformed, no rows)
raises :class:`mixft.errors.UsageError` with one line naming the file.
"""

from __future__ import annotations

import contextlib
import csv
import logging
import os
from pathlib import Path

from mixft.errors import UsageError

# extension -> (datasets builder, builder options)
FORMATS: dict[str, tuple[str, dict]] = {
    ".csv": ("csv", {}),
    # Tab-separated files follow GLUE's convention: quotes are ordinary characters
    # (SST-2 sentences contain `"` literally), so no quote processing at all.
    ".tsv": ("csv", {"sep": "\t", "quoting": csv.QUOTE_NONE}),
    ".json": ("json", {}),  # JSON Lines, or one JSON array of objects
    ".jsonl": ("json", {}),
    ".parquet": ("parquet", {}),
}
SUPPORTED = ", ".join(FORMATS)


def file_format(path: str | os.PathLike, option: str = "--train-file") -> str:
    """The datasets builder for ``path`` by extension; UsageError for any other extension.

    Usage: ``file_format("dev.jsonl")  # "json"``
    """
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        shown = f"extension {suffix!r}" if suffix else "no extension"
        raise UsageError(f"{option} {path}: unsupported file type ({shown}); supported: {SUPPORTED}")
    return FORMATS[suffix][0]


def _root_cause(exc: BaseException) -> BaseException:
    # datasets wraps a reader's error in DatasetGenerationError("An error occurred while
    # generating the dataset"); the user needs the reader's own message.
    while exc.__cause__ is not None or (exc.__context__ is not None and not exc.__suppress_context__):
        exc = exc.__cause__ or exc.__context__
    return exc


def first_line(exc: BaseException, limit: int = 200) -> str:
    """An exception as one short line, for a UsageError. Usage: ``first_line(exc)``"""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[:limit] + "..."


@contextlib.contextmanager
def _quiet_datasets():
    """datasets logs a reader failure at ERROR level before raising; we report it once, ourselves."""
    log = logging.getLogger("datasets")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        log.setLevel(level)


def load_data_file(path: str | os.PathLike, option: str = "--train-file"):
    """Read one data file into a ``datasets.Dataset`` (Arrow, cached by `datasets`).

    ``option`` names the flag in error messages (``--train-file`` / ``--validation-file``).
    Usage: ``ds = load_data_file("data/train.jsonl", "--train-file")``
    """
    where = f"{option} {path}"
    builder = file_format(path, option)
    p = Path(path).expanduser()
    if not p.exists():
        raise UsageError(f"{where}: file not found")
    if p.is_dir():
        raise UsageError(f"{where}: is a directory, expected a {SUPPORTED} file")
    try:
        size = p.stat().st_size
        with open(p, "rb"):
            pass
    except OSError as exc:
        raise UsageError(f"{where}: cannot read file: {exc.strerror or exc}") from None
    if size == 0:
        raise UsageError(f"{where}: file is empty (expected a header or records, then data rows)")

    import datasets

    datasets.disable_progress_bars()  # one bar per file conversion is noise in the CLI output
    options = FORMATS[p.suffix.lower()][1]
    try:
        with _quiet_datasets():
            ds = datasets.load_dataset(builder, data_files={"train": str(p.resolve())}, split="train", **options)
    except Exception as exc:  # every reader's error type: pandas, pyarrow, json, datasets
        cause = _root_cause(exc)
        if "corresponds to no data" in str(cause):  # datasets' wording for "no rows"
            raise UsageError(f"{where}: no data rows") from None
        raise UsageError(f"{where}: cannot read as {p.suffix[1:].upper()}: {first_line(cause)}") from None
    if ds.num_rows == 0:
        raise UsageError(f"{where}: no data rows")
    return ds
