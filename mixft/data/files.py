"""A user's data file (CSV, TSV, JSON, JSON Lines, Parquet) read into an Arrow dataset by `datasets`.

Usage::

    from mixft.data.files import load_data_file
    train = load_data_file("reviews/train.csv")    # a datasets.Dataset, memory-mapped Arrow

The format comes from the extension. `datasets` converts the file once into its cache
(Arrow on disk, memory-mapped), so a 100k-row file costs little RAM and a second run
skips the conversion; the cache is named by the file's SHA-256, so a file replaced with its
mtime kept is read anew. Every problem (missing, empty, unreadable, malformed, no rows)
raises :class:`mixft.errors.UsageError` with one line naming the file.

The file is read exactly as written:

- the path is a path: `datasets` takes ``data_files`` as glob patterns, so ``tr[1].csv``
  would match ``tr1.csv``; the path is escaped, and only a regular file is read (a FIFO
  would block the reader forever);
- text formats must be UTF-8 (checked up front, with the line of the first bad byte:
  pyarrow's JSON reader would otherwise keep invalid bytes and fail much later);
- CSV and TSV cells are read as strings, only an empty cell is missing (pandas would make
  ``NA``, ``None`` or ``null`` missing and ``007`` the number 7); labels are then read by
  mixft's one rule (:func:`mixft.data.labels.label_key`). The header is read by mixft
  too: a repeated column name is refused (pandas renames it ``label.1``), and a row with
  more fields than the header is refused (pandas would silently turn the first field
  into a hidden index column, e.g. for an unquoted comma in a text);
- a blank line between rows of a CSV, TSV or JSON Lines file is refused with its line number
  (pandas and pyarrow skip it in silence): it often marks lost or pasted-together rows, and
  ``--predict-file`` writes one prediction per row, so every row after it would sit one line
  off its input line. Blank lines after the last row are only the file's end.
"""

from __future__ import annotations

import codecs
import contextlib
import csv
import glob
import hashlib
import json
import logging
import os
import re
import stat
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


@contextlib.contextmanager
def datasets_bars_off():
    """No datasets progress bars in the block (a bar per conversion or tokenisation pass is noise in the CLI's
    output), and the process's setting back after: a notebook's own ``ds.map`` keeps its bars."""
    import datasets

    was_on = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        if was_on:
            datasets.enable_progress_bars()


# A column past the header's: filled only by rows with one field too many (see _read_header).
_EXTRA_FIELD = "__mixft_extra_field__"
_UTF8_HINT = "save the file as UTF-8 (e.g. in a spreadsheet: Save As, CSV UTF-8)"
_TEXT_SUFFIXES = (".csv", ".tsv", ".json", ".jsonl")


def _check_regular_file(p: Path, where: str) -> int:
    """The file's size; UsageError unless ``p`` is a readable regular file (never opens a FIFO)."""
    try:
        info = p.stat()
    except FileNotFoundError:
        raise UsageError(f"{where}: file not found") from None
    except OSError as exc:
        raise UsageError(f"{where}: cannot read file: {exc.strerror or exc}") from None
    if stat.S_ISDIR(info.st_mode):
        raise UsageError(f"{where}: is a directory, expected a {SUPPORTED} file")
    if not stat.S_ISREG(info.st_mode):
        kind = (
            "a named pipe (FIFO)"
            if stat.S_ISFIFO(info.st_mode)
            else "a socket"
            if stat.S_ISSOCK(info.st_mode)
            else "a device"
            if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode)
            else "not a regular file"
        )
        raise UsageError(f"{where}: is {kind}, expected a regular {SUPPORTED} file; save the data to a file first")
    try:
        with open(p, "rb"):
            pass
    except OSError as exc:
        raise UsageError(f"{where}: cannot read file: {exc.strerror or exc}") from None
    return info.st_size


def _content_digest(p: Path, where: str, text: bool) -> str:
    """The file's SHA-256, read once; for a text format (``text``), also a UsageError naming the line of the
    first byte that is not UTF-8 (a BOM is fine)."""
    digest = hashlib.sha256()
    decoder = codecs.getincrementaldecoder("utf-8")()
    newlines = 0
    with open(p, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
            if not text:
                continue
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as exc:
                line = newlines + chunk.count(b"\n", 0, exc.start) + 1
                utf16 = chunk[:2] in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE) and newlines == 0
                what = "a UTF-16 file" if utf16 else f"{chunk[exc.start : exc.start + 1]!r} is not UTF-8"
                raise UsageError(f"{where}: line {line}: {what} (Invalid UTF8 sequence); {_UTF8_HINT}") from None
            newlines += chunk.count(b"\n")
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            raise UsageError(
                f"{where}: line {newlines + 1}: the file ends inside a UTF-8 character; {_UTF8_HINT}"
            ) from None
    return digest.hexdigest()


def _read_header(p: Path, where: str, options: dict) -> tuple[list[str], int]:
    """(the header's column names as written, records up to and including it), by Python's csv module.

    Read here rather than by pandas, which renames a repeated name (``label.1``) in silence.
    """
    with open(p, encoding="utf-8-sig", newline="") as f:
        if options.get("quoting") == csv.QUOTE_NONE:
            rows = (line.rstrip("\r\n").split(options["sep"]) for line in f)
        else:
            rows = csv.reader(f, delimiter=options["sep"])
        header, records = None, 0
        try:
            for row in rows:
                records += 1
                if any(cell != "" for cell in row):
                    header = row
                    break
        except csv.Error as exc:
            raise UsageError(f"{where}: cannot read the header: {first_line(exc)}") from None
    if header is None:
        raise UsageError(f"{where}: no header line (expected column names, then data rows)")
    # pandas' own name for a column without one, so messages list what users saw before.
    names = [name if name != "" else f"Unnamed: {i}" for i, name in enumerate(header)]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise UsageError(
            f"{where}: the header names column {repeated[0]!r} more than once; give every column its own name"
        )
    return names, records


def _first_blank_line_between_rows(p: Path, options: dict | None) -> int | None:
    """The line number of the first blank line (only whitespace) that has a record after it, or None.

    ``options``: the CSV builder's (quoted fields may hold blank lines: those are text), or None for
    JSON Lines, whose records are one line each. Blank lines before the first record are the header's
    business (``_read_header`` skips them) and leave every row on its place relative to the others.
    """
    with open(p, encoding="utf-8-sig", newline="") as f:
        if options is None or options.get("quoting") == csv.QUOTE_NONE:
            records = ((lineno, line.strip() == "") for lineno, line in enumerate(f, start=1))
        else:
            records = _csv_records(f, options["sep"])
        seen_record, blank_at = False, None
        for lineno, blank in records:
            if not blank:
                if seen_record and blank_at is not None:
                    return blank_at
                seen_record = True
            elif seen_record and blank_at is None:
                blank_at = lineno
    return None


def _csv_records(f, sep: str):
    """(first line number, whether it is a blank line) of each CSV record, quoted newlines kept inside."""
    last_line = ""

    def lines():
        nonlocal last_line
        for line in f:
            last_line = line
            yield line

    reader = csv.reader(lines(), delimiter=sep)
    lineno = 0
    try:
        for _ in reader:
            start, lineno = lineno + 1, reader.line_num
            yield start, lineno == start and last_line.strip() == ""
    except csv.Error:
        return  # the reader itself names what is wrong with the file


def _refuse_repeated_keys(p: Path, where: str, lines: bool) -> None:
    """UsageError naming a key that one JSON record repeats (``lines``: a JSON Lines file, else one array).

    Only called where the reader would not say so itself; a file that is not valid JSON is left to the reader.
    """

    def pairs(items):
        keys = [key for key, _ in items]
        repeated = next((key for key in keys if keys.count(key) > 1), None)
        if repeated is not None:
            at = f"line {lineno}: " if lines else ""
            kept = "" if lines else " (the reader would keep only its last value)"
            raise UsageError(
                f"{where}: {at}a record names column {repeated!r} more than once{kept}; give every column its own name"
            )
        return dict(items)

    lineno = 0
    with open(p, encoding="utf-8-sig") as f:
        try:
            if not lines:
                json.load(f, object_pairs_hook=pairs)
                return
            for lineno, line in enumerate(f, start=1):  # noqa: B007 (read by pairs)
                if line.strip():
                    json.loads(line, object_pairs_hook=pairs)
        except json.JSONDecodeError:
            return


def _is_json_array(p: Path) -> bool:
    """Whether a .json file holds one JSON array (its layout, blank lines included, is free) rather than lines."""
    with open(p, encoding="utf-8-sig") as f:
        while chunk := f.read(4096):
            text = chunk.lstrip()
            if text:
                return text.startswith("[")
    return False


def _csv_options(p: Path, where: str, options: dict) -> dict:
    """Builder options that read every cell as a string and keep only empty cells missing."""
    import datasets

    names, header_records = _read_header(p, where, options)
    # One more column than the header: a row with one field too many fills it (instead of
    # pandas moving that row's first field into an index), and we refuse it by its row.
    # skiprows counts records as pandas' tokenizer does (a quoted newline stays inside one).
    columns = [*names, _EXTRA_FIELD]
    features = datasets.Features({name: datasets.Value("string") for name in columns})
    return {
        **options,
        "column_names": columns,
        "header": None,
        "skiprows": header_records,
        "features": features,
        "keep_default_na": False,
        "na_values": [""],
    }


def _refuse_extra_fields(ds, where: str, header_fields: int, sep: str):
    import pyarrow.compute as pc

    column = ds.data.column(_EXTRA_FIELD)
    if column.null_count < len(column):
        row = int(pc.index(pc.is_valid(column), True).as_py())
        shown = "comma" if sep == "," else "tab" if sep == "\t" else repr(sep)
        raise UsageError(
            f"{where}: data row {row + 1} has more fields than the header's {header_fields} "
            f"(an unquoted {shown} in a text?); quote the fields that contain one"
        )
    return ds.remove_columns([_EXTRA_FIELD])


def _reader_error(cause: BaseException, where: str, suffix: str) -> UsageError:
    text = first_line(cause)
    if "corresponds to no data" in text:  # datasets' wording for "no rows"
        return UsageError(f"{where}: no data rows")
    fields = re.search(r"Expected (\d+) fields in line (\d+), saw (\d+)", text)
    if fields:  # counts include our extra column: say it in the header's terms
        expected, line, saw = int(fields.group(1)) - 1, fields.group(2), fields.group(3)
        return UsageError(
            f"{where}: line {line} has {saw} fields, the header {expected}; quote fields that contain the separator"
        )
    if "utf8" in text.lower().replace("-", "") or isinstance(cause, UnicodeDecodeError):
        return UsageError(f"{where}: cannot read as {suffix}: {text}; {_UTF8_HINT}")
    return UsageError(f"{where}: cannot read as {suffix}: {text}")


def load_data_file(path: str | os.PathLike, option: str = "--train-file"):
    """Read one data file into a ``datasets.Dataset`` (Arrow, cached by `datasets`), exactly as written.

    ``option`` names the flag in error messages (``--train-file`` / ``--validation-file``).
    Usage: ``ds = load_data_file("data/train.jsonl", "--train-file")``
    """
    where = f"{option} {path}"
    builder = file_format(path, option)
    p = Path(path).expanduser()
    if _check_regular_file(p, where) == 0:
        raise UsageError(f"{where}: file is empty (expected a header or records, then data rows)")
    resolved = str(p.resolve())
    if "::" in resolved:  # fsspec (under datasets) reads "a::b" as a chain of file systems
        raise UsageError(
            f"{where}: the datasets reader cannot open a path containing '::'; rename the file or a folder on its path"
        )
    suffix = p.suffix.lower()
    digest = _content_digest(p, where, text=suffix in _TEXT_SUFFIXES)

    import datasets

    options = FORMATS[suffix][1]
    if builder == "csv":
        options = _csv_options(p, where, {"sep": ",", **options})
    json_array = suffix == ".json" and _is_json_array(p)
    if json_array:
        # Its reader keeps the last of a repeated key in silence (a CSV header's repeat is refused, as here).
        _refuse_repeated_keys(p, where, lines=False)
    if builder == "csv" or suffix == ".jsonl" or (suffix == ".json" and not json_array):
        blank = _first_blank_line_between_rows(p, options if builder == "csv" else None)
        if blank is not None:
            raise UsageError(
                f"{where}: line {blank} is blank, between rows; remove blank lines (they often mark lost or "
                "pasted-together rows, and would shift every row after them off its line)"
            )
    try:
        with _quiet_datasets(), datasets_bars_off():
            # Escaped: datasets expands data_files as glob patterns ("tr[1].csv" would read tr1.csv). Named by
            # content: datasets knows a local file by its path and mtime alone, so a file replaced with its
            # mtime kept (cp -p, rsync -a, an archive) would be read from the old file's cache, and so would
            # everything tokenised from it.
            ds = datasets.load_dataset(
                builder,
                name=f"mixft-{digest[:32]}",
                data_files={"train": glob.escape(resolved)},
                split="train",
                **options,
            )
    except Exception as exc:  # every reader's error type: pandas, pyarrow, json, datasets
        if builder == "json" and not json_array:
            _refuse_repeated_keys(p, where, lines=True)  # pyarrow's word for it is "Trailing data at position N"
        raise _reader_error(_root_cause(exc), where, p.suffix[1:].upper()) from None
    if builder == "csv":
        ds = _refuse_extra_fields(ds, where, len(options["column_names"]) - 1, options["sep"])
    if ds.num_rows == 0:
        raise UsageError(f"{where}: no data rows")
    return ds
