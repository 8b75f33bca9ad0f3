"""``--data-dir DIR`` in GLUE SST-2's layout (train.tsv, dev.tsv: ``sentence<TAB>label``), read strictly into Arrow.

Usage::

    from mixft.data.glue_dir import read_glue_dir, read_glue_tsv
    train, dev = read_glue_dir("glue/SST-2")      # datasets.Dataset: sentence, label (negative/positive)
    ds = read_glue_tsv("glue/SST-2/dev.tsv")

One of the formats ``mixft.data.user_data.load_text_data`` reads (``data_dir=``); its rows
then go through the same columns, labels and tokenisation as every other source. The
label column is a ``ClassLabel`` (0 negative, 1 positive), the schema of GLUE SST-2 on the hub.

Every problem with the input raises :class:`mixft.errors.UsageError` with a one-line
message naming the file (and line, where there is one) and what would be accepted.
The lines are checked in pure Python before any model or tokenizer is loaded (a bad data
file fails in milliseconds, not after a model download), with line numbers a generic
CSV reader cannot give: blank lines, labels other than 0/1, empty sentences, NUL bytes.
"""

from __future__ import annotations

import os
from pathlib import Path

from mixft.errors import UsageError

# The SST-2 columns we need; GLUE's test.tsv has an extra `index` column and other
# exports add ids, so extra columns are accepted and ignored.
REQUIRED_COLUMNS = ("sentence", "label")
_LABELS = {"0": 0, "1": 1}
LABEL_NAMES = ("negative", "positive")  # GLUE SST-2's, in id order
_EXPECTED_HEADER = "a header line with tab-separated columns 'sentence' and 'label'"
_BOM = "\ufeff"


def _show(value: str, limit: int = 40) -> str:
    """repr() of a user value, shortened so the error message stays one readable line."""
    if len(value) > limit:
        return repr(value[:limit]) + f"... ({len(value)} characters)"
    return repr(value)


def _read_bytes(path: Path) -> bytes:
    where = str(path)
    if not path.exists():
        raise UsageError(f"{where}: file not found (expected a GLUE SST-2 TSV file)")
    if path.is_dir():
        raise UsageError(f"{where}: is a directory, expected a GLUE SST-2 TSV file")
    try:
        return path.read_bytes()
    except OSError as exc:  # permissions, special files, I/O errors
        raise UsageError(f"{where}: cannot read file: {exc.strerror or exc}") from None


def _decode_line(raw: bytes, where: str, lineno: int) -> str:
    # NUL bytes usually mean a binary or UTF-16 file; report them explicitly because
    # they would otherwise decode "successfully" into invisible junk in the text.
    if b"\x00" in raw:
        col = raw.index(b"\x00") + 1
        raise UsageError(
            f"{where} line {lineno}: contains a NUL byte at byte {col}"
            " (expected UTF-8 text; is this a binary or UTF-16 file?)"
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"{where} line {lineno}: invalid UTF-8 at byte {exc.start + 1}"
            f" ({raw[exc.start : exc.start + 4]!r}); expected UTF-8 text"
        ) from None


def read_glue_tsv(path: str | os.PathLike):
    """Read one GLUE SST-2 TSV file into a ``datasets.Dataset`` (``sentence``, ``label``), in file order.

    Usage: ``ds = read_glue_tsv("SST-2/dev.tsv")``

    Format: UTF-8, first line a header containing ``sentence`` and ``label`` (any order,
    extra columns ignored), one row per line split on tabs, labels ``0`` or ``1``.
    Quotes are *not* special: SST-2 sentences contain ``"`` and ``'`` literally, so the
    csv module's quoting would corrupt them. Raises ``UsageError`` on any problem.
    """
    path = Path(path)
    where = str(path)
    data = _read_bytes(path)
    if not data:
        raise UsageError(f"{where}: file is empty (expected {_EXPECTED_HEADER}, then data rows)")

    # Split on b"\n" before decoding so a bad byte can be reported with its line number.
    raw_lines = data.split(b"\n")
    if raw_lines[-1] == b"":
        # The file ended with a newline: that is normal, not a blank last line.
        raw_lines.pop()

    sentences: list[str] = []
    labels: list[int] = []
    sentence_idx = label_idx = n_fields = -1
    for lineno, raw in enumerate(raw_lines, start=1):
        line = _decode_line(raw, where, lineno)
        if line.endswith("\r"):  # files written on Windows
            line = line[:-1]

        if lineno == 1:
            if line.startswith(_BOM):  # Excel and some editors prepend a BOM
                line = line[len(_BOM) :]
            columns = [c.strip() for c in line.split("\t")]
            missing = [c for c in REQUIRED_COLUMNS if c not in columns]
            if missing:
                found = ", ".join(repr(c) for c in columns[:10] if c) or "none"
                raise UsageError(
                    f"{where} line 1: header has no {' or '.join(repr(m) for m in missing)}"
                    f" column (found columns: {found}); expected {_EXPECTED_HEADER}"
                )
            for name in REQUIRED_COLUMNS:
                if columns.count(name) > 1:
                    raise UsageError(
                        f"{where} line 1: header has column {name!r} more than once; expected {_EXPECTED_HEADER}"
                    )
            sentence_idx = columns.index("sentence")
            label_idx = columns.index("label")
            n_fields = len(columns)
            continue

        if line.strip() == "":
            # A blank line usually means a truncated or hand-concatenated file; silently
            # skipping it could hide lost rows, so it is an error wherever it appears.
            raise UsageError(
                f"{where} line {lineno}: blank line (expected a data row"
                f" with {n_fields} tab-separated fields; remove blank lines)"
            )
        fields = line.split("\t")
        if len(fields) != n_fields:
            raise UsageError(
                f"{where} line {lineno}: expected {n_fields} tab-separated fields like the header, got {len(fields)}"
            )
        label_text = fields[label_idx]
        if label_text not in _LABELS:
            raise UsageError(f"{where} line {lineno}: label must be 0 or 1, got {_show(label_text)}")
        sentence = fields[sentence_idx]
        if sentence.strip() == "":
            raise UsageError(f"{where} line {lineno}: sentence is empty (expected non-empty text)")
        sentences.append(sentence)
        labels.append(_LABELS[label_text])

    if not sentences:
        raise UsageError(f"{where}: no data rows after the header (expected at least one 'sentence<TAB>label' row)")
    return _arrow(sentences, labels)


def _arrow(sentences: list[str], labels: list[int]):
    import datasets

    features = datasets.Features(
        {"sentence": datasets.Value("string"), "label": datasets.ClassLabel(names=list(LABEL_NAMES))}
    )
    return datasets.Dataset.from_dict({"sentence": sentences, "label": labels}, features=features)


def read_glue_dir(data_dir: str | os.PathLike):
    """Read ``DIR/train.tsv`` and ``DIR/dev.tsv`` (GLUE SST-2 layout) -> ``(train, dev)`` datasets.

    Usage: ``train, dev = read_glue_dir(args.data_dir)``

    Meant to be called before any training work (model download, tokenization) so a
    wrong ``--data-dir`` fails immediately. Raises ``UsageError`` on any problem.
    """
    d = Path(data_dir)
    layout = "expected GLUE SST-2 layout: train.tsv and dev.tsv with header 'sentence<TAB>label'"
    if not d.exists():
        raise UsageError(f"--data-dir {d}: directory not found ({layout})")
    if not d.is_dir():
        raise UsageError(f"--data-dir {d}: not a directory ({layout})")
    # Check both files before reading either, so the user sees every missing file at
    # once instead of fixing them one run at a time.
    missing = [name for name in ("train.tsv", "dev.tsv") if not (d / name).exists()]
    if missing:
        raise UsageError(f"--data-dir {d}: missing {' and '.join(missing)} ({layout})")
    return read_glue_tsv(d / "train.tsv"), read_glue_tsv(d / "dev.tsv")
