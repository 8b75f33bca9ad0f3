"""Which columns hold the text (or text pair) and the label: given, or detected by their usual names.

Usage::

    from mixft.data.columns import resolve_columns
    cols = resolve_columns(["sentence1", "sentence2", "label", "idx"], where="--train-file train.csv")
    cols.text, cols.text_pair, cols.label    # "sentence1", "sentence2", "label"

Pairs are looked for before single texts (an MRPC file also matches nothing single, but a
QNLI file has ``sentence`` *and* ``question``). Every failure is one UsageError line that
lists the data's columns, so the user can pick the right ``--*-column`` at once.
"""

from __future__ import annotations

from dataclasses import dataclass

from mixft.errors import UsageError

# The usual names, as GLUE and most Hugging Face text-classification datasets use them.
PAIR_NAMES = (
    ("sentence1", "sentence2"),
    ("question1", "question2"),
    ("premise", "hypothesis"),
    ("question", "sentence"),
)
TEXT_NAMES = ("sentence", "text")
LABEL_NAMES = ("label", "labels")


@dataclass(frozen=True)
class Columns:
    text: str
    text_pair: str | None
    label: str

    @property
    def text_columns(self) -> tuple[str, ...]:
        return (self.text,) if self.text_pair is None else (self.text, self.text_pair)


def _listing(columns) -> str:
    return "columns: " + (", ".join(repr(c) for c in columns) or "none")


def _need(column: str, option: str, columns, where: str, hint: str = "") -> str:
    if column not in columns:
        raise UsageError(f"{where}: no column {column!r} ({option}){hint}; {_listing(columns)}")
    return column


def _detect_text(columns, where: str) -> tuple[str, str | None]:
    pairs = [p for p in PAIR_NAMES if p[0] in columns and p[1] in columns]
    if len(pairs) == 1:
        return pairs[0]
    if len(pairs) > 1:
        shown = " or ".join(f"{a}/{b}" for a, b in pairs)
        raise UsageError(
            f"{where}: text columns are ambiguous ({shown}); pass --text-column and --text-pair-column; "
            f"{_listing(columns)}"
        )
    singles = [c for c in TEXT_NAMES if c in columns]
    if len(singles) == 1:
        return singles[0], None
    if len(singles) > 1:
        raise UsageError(
            f"{where}: text column is ambiguous ({' or '.join(singles)}); pass --text-column; {_listing(columns)}"
        )
    raise UsageError(
        f"{where}: found no text column (looked for {', '.join(TEXT_NAMES)} or a pair such as sentence1/sentence2); "
        f"pass --text-column; {_listing(columns)}"
    )


def _detect_label(columns, where: str) -> str:
    found = [c for c in LABEL_NAMES if c in columns]
    if len(found) == 1:
        return found[0]
    if found:
        raise UsageError(
            f"{where}: label column is ambiguous (label or labels); pass --label-column; {_listing(columns)}"
        )
    raise UsageError(
        f"{where}: found no label column (looked for {', '.join(LABEL_NAMES)}); pass --label-column; "
        f"{_listing(columns)}"
    )


def resolve_columns(
    columns,
    *,
    where: str,
    text_column: str | None = None,
    text_pair_column: str | None = None,
    label_column: str | None = None,
) -> Columns:
    """The text, text-pair and label columns among ``columns`` (names given win over detection).

    ``text_column`` given alone means single texts (no pair is guessed beside it);
    ``text_pair_column`` given alone takes its partner from the usual pairs.
    ``where`` names the data in error messages ("--train-file train.csv").

    Usage: ``resolve_columns(ds.column_names, where="glue/mrpc train split")``
    """
    columns = list(columns)
    if text_pair_column is not None:
        _need(text_pair_column, "--text-pair-column", columns, where, " (single-text data?)")
    if text_column is not None:
        text = _need(text_column, "--text-column", columns, where)
        pair = text_pair_column
    elif text_pair_column is not None:
        partners = [a for a, b in PAIR_NAMES if b == text_pair_column and a in columns]
        if len(partners) != 1:
            raise UsageError(
                f"{where}: cannot tell the first text column for --text-pair-column {text_pair_column}; "
                f"pass --text-column; {_listing(columns)}"
            )
        text, pair = partners[0], text_pair_column
    else:
        text, pair = _detect_text(columns, where)
    if pair is not None and pair == text:
        raise UsageError(f"{where}: --text-pair-column {pair} is also the text column; {_listing(columns)}")
    label = _need(label_column, "--label-column", columns, where) if label_column else _detect_label(columns, where)
    if label in (text, pair):
        raise UsageError(f"{where}: column {label!r} cannot be both text and label; {_listing(columns)}")
    return Columns(text=text, text_pair=pair, label=label)


def check_columns(columns, chosen: Columns, *, where: str) -> None:
    """Raise unless ``columns`` (e.g. the validation file's) hold every chosen column.

    Usage: ``check_columns(eval_ds.column_names, cols, where="--validation-file dev.csv")``
    """
    columns = list(columns)
    missing = [c for c in (*chosen.text_columns, chosen.label) if c not in columns]
    if missing:
        raise UsageError(
            f"{where}: no column {' or '.join(repr(m) for m in missing)} (found in the training data); "
            f"{_listing(columns)}"
        )


def check_text_columns(ds, chosen: Columns, *, where: str) -> None:
    """Raise unless every chosen text column holds strings and none is missing: null, empty, or only whitespace
    (one rule for every format: a CSV's empty cell is null, a JSON ``""`` or a cell of spaces is text that
    reaches the model as ``[CLS] [SEP]``, a pair's second text as nothing).

    Usage: ``check_text_columns(train_ds, cols, where="--train-file train.csv")``
    """
    import datasets
    import pyarrow.compute as pc

    for column in chosen.text_columns:
        feature = ds.features[column]
        if not (isinstance(feature, datasets.Value) and feature.dtype in ("string", "large_string")):
            shown = feature.dtype if isinstance(feature, datasets.Value) else type(feature).__name__
            raise UsageError(
                f"{where}: column {column!r} holds {shown} values, not text; pick the text with --text-column; "
                f"{_listing(ds.column_names)}"
            )
        missing, first, offset = 0, None, 0
        for table in ds.select_columns([column]).with_format("arrow").iter(batch_size=50_000):
            texts = table.column(0)
            blank = pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(texts)), 0)
            nulls = pc.or_kleene(pc.is_null(texts), pc.fill_null(blank, False))
            count = int(pc.sum(nulls).as_py() or 0)
            if count and first is None:
                first = offset + int(pc.index(nulls, True).as_py())
            missing += count
            offset += table.num_rows
        if missing:
            raise UsageError(
                f"{where}: {missing} of {offset} rows have no text (empty or only whitespace) in column {column!r} "
                f"(first: data row {first + 1}); fill them in or remove those rows"
            )
