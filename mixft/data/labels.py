"""Labels: what kind they are, their names, and their ids, checked before any training.

Usage::

    from mixft.data.labels import ModelLabels, analyze_labels, check_eval_labels, label_key, labels_for_model
    info = analyze_labels(train_ds, "label", where="--train-file train.csv")
    check_eval_labels(eval_ds, "label", info, where="--validation-file dev.csv")
    info = labels_for_model(eval_ds, "label", ModelLabels(("neg", "pos"), "--model out/model"), where="dev.csv")
    info.kind, info.id2label, info.encode(["Sports", "World"])   # "classification", {0: ...}, [1, 0]
    label_key(" 007 ")   # 7: mixft's one rule for what class a written label is

One rule reads every label, whatever the file format (:func:`label_key`): surrounding
whitespace is not part of a label; a label that is a number is that number, so ``1``,
``01``, ``+1``, ``1.0`` and ``" 1 "`` are one class, named ``1``; any other text is
itself, case kept (``Pos`` and ``pos`` are two classes). A cell that is empty (or only
whitespace) has no label.

Rules (every violation is one UsageError line, raised before any tokenisation):

- ``ClassLabel`` features (hub datasets) keep their ids and names; a negative id (GLUE's
  unlabelled -1) counts as a missing label.
- integers (in an integer column or written as text) and booleans: classes, mapped to ids
  in numeric order (0..K-1 stays as it is); names are the numbers as text.
- words: classes, ids in sorted order. Numbers mixed with words ("1", "pos") are mixed
  label types.
- numbers written with a fraction or exponent (``0.5``, ``1.0``, ``2e3``, in a float column
  or as text alike): a regression target. When every value is whole, ``task_kind=
  "classification"`` makes them classes: a 1-5 rating may be either, only the user knows.
  ``task_kind="regression"`` likewise turns integer labels into a regression target.
- errors: missing labels, mixed label types (within a file or between training and
  validation data), a label that is not a finite number (``nan``, ``inf``), a regression
  target too large for the float32 squared-error loss, a single class in training, a
  constant regression target, a validation label never seen in training, more than
  MAX_CLASSES classes, regression asked of words or booleans.

A saved, fine-tuned model (``--eval-only``) brings its own label space (:class:`ModelLabels`:
its id2label names in id order). Evaluation data is then read against it by name
(:func:`labels_for_model`): no training data is needed, the same names in any order (or
stored as a ``ClassLabel`` in another order) get the model's ids, and a name the model was
not fine-tuned for is one UsageError line naming it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mixft.data.label_key import INT_TEXT, NUMBER_TEXT, label_key
from mixft.errors import UsageError

if TYPE_CHECKING:
    from mixft.data.held_out import HeldOut

TASK_KINDS = ("classification", "regression")
MAX_CLASSES = 1000  # beyond this a "label" column is an id or a score, not classes
# The regression loss squares (target - prediction) in float32: past sqrt(float32 max) even
# a perfect start overflows to inf, which the run would report as a numeric collapse.
MAX_REGRESSION_TARGET = math.sqrt(3.4028234663852886e38)
_SCAN_BATCH = 50_000  # rows per Arrow batch when scanning a column: bounded memory


@dataclass(frozen=True)
class LabelInfo:
    """The label space learned from the training data.

    ``value_type`` is what the values are once read by :func:`label_key`: "classlabel",
    "bool", "int" (whole numbers), "float" (numbers written with a fraction or exponent)
    or "string" (words). ``mapping`` maps a label key to its id (for ClassLabel, the ids
    seen in training; empty for regression).
    """

    kind: str
    value_type: str
    names: tuple[str, ...] = ()
    mapping: dict = field(default_factory=dict, compare=False)

    @property
    def num_labels(self) -> int:
        return len(self.names) if self.kind == "classification" else 1

    @property
    def id2label(self) -> dict[int, str]:
        return dict(enumerate(self.names))

    @property
    def label2id(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.names)}

    def encode(self, values) -> list:
        """Raw label values -> ids (int) for classification, floats for regression."""
        if self.kind == "regression":
            return [float(v) for v in values]  # float() itself ignores surrounding whitespace
        if self.value_type == "classlabel":  # the ids of the data's ClassLabel -> this label space's
            return [self.mapping[int(v)] for v in values]
        return [self.mapping[label_key(v)] for v in values]


# ---------------------------------------------------------------------------------------
# Scanning a column in Arrow batches
# ---------------------------------------------------------------------------------------


@dataclass
class _Scan:
    value_type: str  # the column's type: classlabel, bool, int, float, string, json, unsupported:...
    rows: int = 0
    missing: int = 0
    first_missing: int | None = None
    keys: set | None = field(default_factory=set)  # label_key of each value; None: more than MAX_CLASSES
    all_integral: bool = True
    python_types: set = field(default_factory=set)
    # String columns: how many values are integers, other numbers, words (with a few of each).
    ints: int = 0
    fractions: int = 0
    words: int = 0
    number_examples: set = field(default_factory=set)
    word_examples: set = field(default_factory=set)
    first_word: int | None = None
    first_number: int | None = None
    # Numbers: the first that is not finite, and the first past MAX_REGRESSION_TARGET.
    not_finite: tuple | None = None
    too_large: tuple | None = None

    @property
    def kind(self) -> str:
        """The values' type once read by label_key (see LabelInfo.value_type)."""
        if self.value_type != "string":
            return self.value_type
        if self.words:
            return "string"
        return "float" if self.fractions else "int"


def _value_type(feature) -> str:
    import datasets

    if isinstance(feature, datasets.ClassLabel):
        return "classlabel"
    if isinstance(feature, datasets.Value):
        dtype = feature.dtype
        if dtype == "bool":
            return "bool"
        if dtype.startswith(("int", "uint")):
            return "int"
        if dtype.startswith("float"):
            return "float"
        if dtype in ("string", "large_string"):
            return "string"
        return f"unsupported:{dtype}"
    if type(feature).__name__ == "Json":  # datasets' type for a JSON field of changing types
        return "json"
    return f"unsupported:{type(feature).__name__}"


def _first_true(mask) -> int | None:
    import pyarrow.compute as pc

    index = pc.index(mask, True).as_py()
    return None if index is None or index < 0 else int(index)


def _note_missing(scan: _Scan, mask, offset: int) -> None:
    import pyarrow.compute as pc

    count = int(pc.sum(mask).as_py() or 0)
    if count:
        if scan.first_missing is None:
            scan.first_missing = offset + _first_true(mask)
        scan.missing += count


def _add_keys(scan: _Scan, values) -> None:
    if scan.keys is None:
        return
    scan.keys.update(label_key(v) for v in values)
    if len(scan.keys) > MAX_CLASSES:  # too many for classes; a regression target needs no set
        scan.keys = None


def _note_numbers(scan: _Scan, numbers, offset: int) -> None:
    """Non-finite and too-large values of a float64 array aligned with the batch (nulls ignored)."""
    import pyarrow.compute as pc

    if scan.not_finite is None:
        row = _first_true(pc.fill_null(pc.invert(pc.is_finite(numbers)), False))
        if row is not None:
            scan.not_finite = (offset + row, numbers[row].as_py())
    if scan.too_large is None:
        row = _first_true(pc.fill_null(pc.greater(pc.abs(numbers), MAX_REGRESSION_TARGET), False))
        if row is not None:
            scan.too_large = (offset + row, numbers[row].as_py())


def _scan_strings(scan: _Scan, col, offset: int) -> None:
    import pyarrow as pa
    import pyarrow.compute as pc

    text = pc.utf8_trim_whitespace(col)
    missing = pc.or_kleene(pc.is_null(text), pc.equal(text, ""))
    _note_missing(scan, pc.fill_null(missing, True), offset)
    present = pc.invert(pc.fill_null(missing, True))
    is_int = pc.and_(present, pc.match_substring_regex(text, INT_TEXT))
    is_number = pc.and_(present, pc.match_substring_regex(text, NUMBER_TEXT, ignore_case=True))
    is_word = pc.and_(present, pc.invert(is_number))
    ints, numbers, words = (int(pc.sum(m).as_py() or 0) for m in (is_int, is_number, is_word))
    scan.ints += ints
    scan.fractions += numbers - ints
    scan.words += words
    if words:
        scan.first_word = scan.first_word if scan.first_word is not None else offset + _first_true(is_word)
        if len(scan.word_examples) < 3:
            scan.word_examples.update(pc.unique(pc.filter(text, is_word)).slice(0, 3).to_pylist())
    if numbers:
        scan.first_number = scan.first_number if scan.first_number is not None else offset + _first_true(is_number)
        if len(scan.number_examples) < 3:
            scan.number_examples.update(pc.unique(pc.filter(text, is_number)).slice(0, 3).to_pylist())
        _note_numbers(scan, pc.cast(pc.if_else(is_number, text, None), pa.float64()), offset)
        as_float = pc.filter(pc.cast(pc.if_else(is_number, text, None), pa.float64()), is_number)
        scan.all_integral &= bool(pc.all(pc.equal(pc.floor(as_float), as_float)).as_py() is not False)
    _add_keys(scan, pc.unique(pc.filter(text, present)).to_pylist())


def _scan(ds, column: str) -> _Scan:
    import pyarrow as pa
    import pyarrow.compute as pc

    scan = _Scan(_value_type(ds.features[column]))
    if scan.value_type.startswith("unsupported"):
        return scan
    subset = ds.select_columns([column])
    if scan.value_type == "json":  # rare: mixed JSON values are only readable as Python objects
        for batch in subset.iter(batch_size=_SCAN_BATCH):
            for i, v in enumerate(batch[column]):
                if v is None:
                    scan.missing += 1
                    scan.first_missing = scan.rows + i if scan.first_missing is None else scan.first_missing
                else:
                    scan.python_types.add(type(v).__name__)
            scan.rows += len(batch[column])
        return scan
    for table in subset.with_format("arrow").iter(batch_size=_SCAN_BATCH):
        col = table.column(0).combine_chunks()
        offset = scan.rows
        scan.rows += len(col)
        if scan.value_type == "string":
            _scan_strings(scan, col, offset)
            continue
        missing = pc.is_null(col)  # NaN is a number here: refused below as not finite, by its row
        if scan.value_type == "classlabel":
            missing = pc.or_(missing, pc.fill_null(pc.less(col, 0), False))
        _note_missing(scan, missing, offset)
        present = pc.filter(col, pc.invert(missing))
        if scan.value_type in ("int", "float"):
            numbers = col.cast(pa.float64())  # float16 (Parquet) has no Arrow kernels of its own
            _note_numbers(scan, numbers, offset)
            if scan.value_type == "float":
                finite = pc.filter(numbers, pc.fill_null(pc.is_finite(numbers), False))
                scan.all_integral &= bool(pc.all(pc.equal(pc.floor(finite), finite)).as_py() is not False)
                present = pc.filter(numbers, pc.fill_null(pc.is_finite(numbers), False))
        if len(present):
            _add_keys(scan, pc.unique(present).to_pylist())
    return scan


def _show(values, limit: int = 8) -> str:
    shown = sorted(values, key=str)[:limit]
    more = f", ... ({len(values)} in all)" if len(values) > limit else ""
    return ", ".join(repr(v) for v in shown) + more


def _check_scan(scan: _Scan, column: str, where: str) -> None:
    if scan.value_type.startswith("unsupported"):
        kind = scan.value_type.split(":", 1)[1]
        raise UsageError(
            f"{where}: label column {column!r} holds {kind} values; labels must be integers, strings or floats"
        )
    if scan.missing:
        raise UsageError(
            f"{where}: {scan.missing} of {scan.rows} rows have no label in column {column!r} "
            f"(first: data row {scan.first_missing + 1}); fill them in or remove those rows"
        )
    if scan.value_type == "json" and len(scan.python_types) > 1:
        raise UsageError(
            f"{where}: mixed label types in column {column!r} ({' and '.join(sorted(scan.python_types))}); "
            "use one type for every label"
        )
    if scan.value_type == "json":
        raise UsageError(
            f"{where}: label column {column!r} holds {', '.join(sorted(scan.python_types))} values; "
            "labels must be integers, strings or floats"
        )
    if scan.words and (scan.ints or scan.fractions):
        minority = (
            f"first text: data row {scan.first_word + 1}"
            if scan.words <= scan.ints + scan.fractions
            else f"first number: data row {scan.first_number + 1}"
        )
        raise UsageError(
            f"{where}: mixed label types in column {column!r}: numbers ({_show(scan.number_examples, 3)}) and text "
            f"({_show(scan.word_examples, 3)}); use one type for every label ({minority})"
        )
    if scan.not_finite is not None:
        row, value = scan.not_finite
        raise UsageError(
            f"{where}: data row {row + 1}: label {value!r} in column {column!r} is not a finite number; "
            "fix or remove that row"
        )


def _too_many_classes(column: str, where: str) -> None:
    raise UsageError(
        f"{where}: label column {column!r} has more than {MAX_CLASSES} distinct values; "
        "is it the right column (an id?), or a regression target that should be floats?"
    )


# ---------------------------------------------------------------------------------------
# Analysis
# ---------------------------------------------------------------------------------------


def analyze_labels(ds, column: str, *, where: str, task_kind: str | None = None) -> LabelInfo:
    """The label kind, names and id mapping of the training data's ``column`` (see module rules).

    ``task_kind`` (None, "classification", "regression") overrides what the values suggest
    where both readings make sense. Usage: ``info = analyze_labels(train, "label", where="train.csv")``
    """
    if task_kind is not None and task_kind not in TASK_KINDS:
        raise UsageError(f"unknown task kind {task_kind!r}; task kinds: {', '.join(TASK_KINDS)}")
    scan = _scan(ds, column)
    _check_scan(scan, column, where)
    keys, kind = scan.keys, scan.kind

    if kind == "classlabel":
        if task_kind == "regression":
            raise UsageError(f"{where}: label column {column!r} holds named classes; cannot regress on them")
        names = tuple(ds.features[column].names)
        if len(keys) < 2:
            _single_class(column, where, names[next(iter(keys))] if keys else None)
        # The mapping holds the ids seen in training, so an unseen validation id is caught.
        return LabelInfo("classification", "classlabel", names, {i: i for i in sorted(keys)})
    if task_kind == "regression" and kind in ("string", "bool"):
        shown = _show(keys, 3) if keys is not None else _show(scan.word_examples, 3)
        raise UsageError(
            f"{where}: --task-kind regression, but the labels in column {column!r} are "
            f"{'text' if kind == 'string' else 'true/false'} ({shown}); regression needs numbers"
        )
    if (kind == "float" and task_kind != "classification") or (kind == "int" and task_kind == "regression"):
        return _checked_regression(scan, kind, column, where)

    if keys is None:
        _too_many_classes(column, where)
    if kind == "float" and not scan.all_integral:
        raise UsageError(
            f"{where}: labels in column {column!r} have fractional values; classes must be whole numbers or text"
        )
    ordered = sorted(keys)  # numbers in numeric order, words in text order, False before True
    names = tuple(str(k).lower() if kind == "bool" else str(k) for k in ordered)
    mapping = {k: i for i, k in enumerate(ordered)}
    return _checked_classes(
        LabelInfo("classification", "int" if kind == "float" else kind, names, mapping), column, where
    )


def _single_class(column: str, where: str, name) -> None:
    raise UsageError(
        f"{where}: the training data has a single class ({name!r}) in column {column!r}; "
        "classification needs at least two"
    )


def _checked_classes(info: LabelInfo, column: str, where: str) -> LabelInfo:
    if len(info.names) < 2:
        _single_class(column, where, info.names[0] if info.names else None)
    return info


def _refuse_too_large(scan: _Scan, column: str, where: str) -> None:
    if scan.too_large is not None:
        row, value = scan.too_large
        raise UsageError(
            f"{where}: data row {row + 1}: regression target {value!r} in column {column!r} is too "
            f"large (beyond {MAX_REGRESSION_TARGET:.3g}, its squared error overflows float32); "
            "rescale the targets"
        )


def _checked_regression(scan: _Scan, kind: str, column: str, where: str) -> LabelInfo:
    _refuse_too_large(scan, column, where)
    if scan.keys is not None and len(scan.keys) < 2:
        raise UsageError(f"{where}: every training label in column {column!r} is the same value; nothing to learn")
    return LabelInfo(kind="regression", value_type=kind)


def _compatible(train_type: str, eval_type: str) -> bool:
    # JSON writes 1 or 1.0 and a column may hold "1" in one file and 1.0 in another: whole
    # numbers mix freely (fractional values where classes are expected are caught below).
    return train_type == eval_type or {train_type, eval_type} <= {"int", "float"}


def read_as_class_labels(ds, column: str, info: LabelInfo):
    """``ds`` with ``column`` read as the training labels' ClassLabel, where the training labels are one (a hub
    GLUE task, its stand-in) and the file writes them as its class ids (GLUE's own TSV files: 0, 1) or its
    names; ``ds`` unchanged otherwise, for :func:`check_eval_labels` to judge. Ids out of range stay ids,
    which that check names as never seen in training.

    Usage: ``check_eval_labels(read_as_class_labels(ds, "label", info), "label", info, where=where)``
    """
    import datasets

    if info.value_type != "classlabel" or isinstance(ds.features[column], datasets.ClassLabel):
        return ds
    try:
        return ds.cast_column(column, datasets.ClassLabel(names=list(info.names)))
    except (ValueError, TypeError):  # a value that is neither an id nor a name: "mixed label types", as before
        return ds


class UnscorableLabels(UsageError):
    """Well-formed evaluation labels that cannot be scored against the training labels (another type,
    names or classes). Validation data needs scoring (a refusal); a predict file can go on without metrics."""


def check_eval_labels(ds, column: str, info: LabelInfo, *, where: str, role: str = "validation") -> None:
    """Raise unless the evaluation data's labels fit ``info`` (same type, classes seen in training).

    ``role`` names the labels in messages (``"validation"``, ``"--predict-file"``). Malformed
    labels raise ``UsageError``; labels that are fine but cannot be scored raise its subclass
    ``UnscorableLabels``.

    Usage: ``check_eval_labels(eval_ds, "label", info, where="--validation-file dev.csv")``
    """
    scan = _scan(ds, column)
    _check_scan(scan, column, where)
    kind = scan.kind
    if info.kind == "regression":
        if kind not in ("int", "float"):
            raise UnscorableLabels(
                f"{where}: mixed label types: {role} labels in column {column!r} are {kind}, "
                "training labels numbers (regression); use one type for every label"
            )
        _refuse_too_large(scan, column, where)
        return
    if not _compatible(info.value_type, kind):
        raise UnscorableLabels(
            f"{where}: mixed label types: {role} labels in column {column!r} are {kind} "
            f"but training labels are {info.value_type}; use one type for every label"
        )
    if scan.keys is None:
        _too_many_classes(column, where)
    if info.value_type == "classlabel":
        names = tuple(ds.features[column].names)
        if names != info.names:
            raise UnscorableLabels(
                f"{where}: {role} label names {list(names)} differ from training label names {list(info.names)}"
            )
    if kind == "float" and not scan.all_integral:
        raise UnscorableLabels(f"{where}: {role} labels in column {column!r} have fractional values")
    unseen = scan.keys - set(info.mapping)
    if info.value_type == "classlabel":
        unseen = {info.names[i] if 0 <= i < len(info.names) else i for i in unseen}
    if unseen:
        raise UnscorableLabels(
            f"{where}: {role} label{'s' if len(unseen) > 1 else ''} {_show(unseen, 5)} never seen in training "
            f"(training labels: {_show(info.names, 10)})"
        )


# ---------------------------------------------------------------------------------------
# A saved model's labels (--eval-only)
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelLabels:
    """The label space a fine-tuned model predicts: its label names in id order (its
    ``id2label``), or None for a regression model; ``source`` names the model in messages.
    ``held_out``: the rows of its training data its training held out (mixft.data.held_out.HeldOut),
    where it recorded them: what ``--eval-only --validation-split`` evaluates it on."""

    names: tuple[str, ...] | None
    source: str
    held_out: HeldOut | None = None

    @property
    def kind(self) -> str:
        return "regression" if self.names is None else "classification"


def label_name(key) -> str:
    """The name of a label read by :func:`label_key`, as :func:`analyze_labels` names classes
    (and so as a model trained by mixft saved it): ``1`` -> ``"1"``, ``True`` -> ``"true"``."""
    return str(key).lower() if isinstance(key, bool) else str(key)


def labels_for_model(ds, column: str, model: ModelLabels, *, where: str) -> LabelInfo:
    """The labels of ``ds`` (evaluation data) in ``model``'s label space, matched by name.

    Every label is read by :func:`label_key` and named as training names it
    (:func:`label_name`; a ``ClassLabel`` by its own names), then given the model's id for
    that name: the same names in another order evaluate exactly as in the model's order.
    Raises UsageError (one line) for a name the model lacks, and for text or true/false
    labels given to a regression model.

    Usage: ``info = labels_for_model(dev, "label", ModelLabels(("neg", "pos"), "--model out"), where="dev.csv")``
    """
    scan = _scan(ds, column)
    _check_scan(scan, column, where)
    kind = scan.kind
    if model.names is None:
        if kind not in ("int", "float"):
            raise UsageError(
                f"{where}: {model.source} is a regression model, but the labels in column {column!r} "
                f"are {'text' if kind == 'string' else kind}; it needs numbers"
            )
        _refuse_too_large(scan, column, where)
        return LabelInfo(kind="regression", value_type=kind)
    if scan.keys is None:
        _too_many_classes(column, where)
    if kind == "classlabel":
        data_names = ds.features[column].names
        named = {key: str(data_names[key]) for key in scan.keys}
    else:
        named = {key: label_name(key) for key in scan.keys}
    ids = {name: i for i, name in enumerate(model.names)}
    unknown = {name for name in named.values() if name not in ids}
    if unknown:
        raise UsageError(
            f"{where}: label{'s' if len(unknown) > 1 else ''} {_show(unknown, 5)} in column {column!r} "
            f"{'are' if len(unknown) > 1 else 'is'} not among the labels {model.source} was fine-tuned for "
            f"({', '.join(model.names[:10])}{', ...' if len(model.names) > 10 else ''}); evaluate it on data "
            "with those labels"
        )
    value_type = "int" if kind == "float" else kind
    return LabelInfo("classification", value_type, tuple(model.names), {key: ids[name] for key, name in named.items()})
