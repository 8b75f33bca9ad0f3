"""Labels: what kind they are, their names, and their ids, checked before any training.

Usage::

    from mixft.data.labels import analyze_labels, check_eval_labels
    info = analyze_labels(train_ds, "label", where="--train-file train.csv")
    check_eval_labels(eval_ds, "label", info, where="--validation-file dev.csv")
    info.kind, info.id2label, info.encode(["Sports", "World"])   # "classification", {0: ...}, [1, 0]

Rules (every violation is one UsageError line, raised before any tokenisation):

- ``ClassLabel`` features (hub datasets) keep their ids and names; a negative id (GLUE's
  unlabelled -1) counts as a missing label.
- integers and booleans: classes, mapped to ids in sorted order (0..K-1 stays as it is);
  names are the values as text.
- strings: classes, ids in sorted order (numerically when every value is an integer
  written as text). Numbers mixed with words ("1", "pos") are mixed label types.
- floats: a regression target. A float column whose values are all whole numbers
  (what pandas makes of an integer column) is still regression unless the caller says
  ``task_kind="classification"``: a 1-5 rating may be either, only the user knows.
  ``task_kind="regression"`` likewise turns integer labels into a regression target.
- errors: missing (null) labels, mixed label types (within a file or between training and
  validation data), a single class in training, a constant regression target, a
  validation label never seen in training, more than MAX_CLASSES classes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from mixft.errors import UsageError

TASK_KINDS = ("classification", "regression")
MAX_CLASSES = 1000  # beyond this a "label" column is an id or a score, not classes
_SCAN_BATCH = 50_000  # rows per Arrow batch when scanning a column: bounded memory


@dataclass(frozen=True)
class LabelInfo:
    """The label space learned from the training data.

    ``value_type`` is the raw values' type: "classlabel", "int", "bool", "string" or "float".
    ``mapping`` maps a raw value to its id (None for ClassLabel ids and for regression).
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
            return [float(v) for v in values]
        if self.value_type == "classlabel":
            return [int(v) for v in values]
        if self.value_type == "float":  # whole-number floats taken as classes
            return [self.mapping[int(v)] for v in values]
        return [self.mapping[v] for v in values]


# ---------------------------------------------------------------------------------------
# Scanning a column in Arrow batches
# ---------------------------------------------------------------------------------------


@dataclass
class _Scan:
    value_type: str
    rows: int = 0
    missing: int = 0
    first_missing: int | None = None
    values: set | None = field(default_factory=set)  # None: more than MAX_CLASSES distinct
    all_integral: bool = True
    python_types: set = field(default_factory=set)


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


def _note_missing(scan: _Scan, mask, offset: int) -> None:
    import pyarrow.compute as pc

    count = int(pc.sum(mask).as_py() or 0)
    if count:
        if scan.first_missing is None:
            scan.first_missing = offset + int(pc.index(mask, True).as_py())
        scan.missing += count


def _add_values(scan: _Scan, values) -> None:
    if scan.values is None:
        return
    scan.values.update(values)
    if len(scan.values) > MAX_CLASSES:  # too many for classes; a regression target needs no set
        scan.values = None


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
        col = table.column(0)
        missing = pc.is_null(col, nan_is_null=True) if scan.value_type == "float" else pc.is_null(col)
        if scan.value_type == "classlabel":
            missing = pc.or_(missing, pc.fill_null(pc.less(col, 0), False))
        _note_missing(scan, missing, scan.rows)
        scan.rows += len(col)
        present = pc.filter(col, pc.invert(missing))
        if scan.value_type == "float" and len(present):
            scan.all_integral &= bool(pc.all(pc.equal(pc.floor(present), present)).as_py())
            _add_values(scan, pc.unique(present).to_pylist())
        elif len(present):
            chunk = present.combine_chunks() if isinstance(present, pa.ChunkedArray) else present
            _add_values(scan, pc.unique(chunk).to_pylist())
    return scan


# ---------------------------------------------------------------------------------------
# Analysis
# ---------------------------------------------------------------------------------------


def _is_int_text(value: str) -> bool:
    text = value.strip()
    return text.lstrip("+-").isdigit()


def _is_number_text(value: str) -> bool:
    try:
        number = float(value)
    except ValueError:
        return False
    return math.isfinite(number)  # "nan" and "inf" are words here, not numbers


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


def _too_many_classes(column: str, where: str) -> None:
    raise UsageError(
        f"{where}: label column {column!r} has more than {MAX_CLASSES} distinct values; "
        "is it the right column (an id?), or a regression target that should be floats?"
    )


def _string_kind(values: set[str], column: str, where: str) -> str:
    """"int" / "number" / "text" for a set of string labels; mixed numbers and words raise."""
    numbers = {v for v in values if _is_number_text(v)}
    if numbers and numbers != values:
        words = values - numbers
        raise UsageError(
            f"{where}: mixed label types in column {column!r}: numbers ({_show(numbers, 3)}) and text "
            f"({_show(words, 3)}); use one type for every label"
        )
    if numbers and all(_is_int_text(v) for v in values):
        return "int"
    return "number" if numbers else "text"


def analyze_labels(ds, column: str, *, where: str, task_kind: str | None = None) -> LabelInfo:
    """The label kind, names and id mapping of the training data's ``column`` (see module rules).

    ``task_kind`` (None, "classification", "regression") overrides what the values suggest
    where both readings make sense. Usage: ``info = analyze_labels(train, "label", where="train.csv")``
    """
    if task_kind is not None and task_kind not in TASK_KINDS:
        raise UsageError(f"unknown task kind {task_kind!r}; task kinds: {', '.join(TASK_KINDS)}")
    scan = _scan(ds, column)
    _check_scan(scan, column, where)
    values = scan.values
    vt = scan.value_type
    regression = (vt == "float" and task_kind != "classification") or (vt == "int" and task_kind == "regression")
    if values is None and not regression:
        _too_many_classes(column, where)

    if vt == "string":
        string_kind = _string_kind(values, column, where)
        if string_kind == "number" or (string_kind == "int" and task_kind == "regression"):
            if task_kind == "classification":
                raise UsageError(f"{where}: labels in column {column!r} are fractional numbers; cannot be classes")
            info = LabelInfo(kind="regression", value_type="string")
            return _checked_regression(info, {float(v) for v in values}, column, where)
        if task_kind == "regression":
            raise UsageError(
                f"{where}: labels in column {column!r} are text ({_show(values, 3)}); cannot regress on them"
            )
        key = (lambda v: int(v)) if string_kind == "int" else None
        names = tuple(sorted(values, key=key))
        return _checked_classes(LabelInfo("classification", "string", names, {n: i for i, n in enumerate(names)}),
                                column, where)

    if vt == "classlabel":
        if task_kind == "regression":
            raise UsageError(f"{where}: label column {column!r} holds named classes; cannot regress on them")
        names = tuple(ds.features[column].names)
        if len(values) < 2:
            _single_class(column, where, names[next(iter(values))] if values else None)
        # The mapping holds the ids seen in training, so an unseen validation id is caught.
        return LabelInfo("classification", "classlabel", names, {i: i for i in sorted(values)})

    if regression:
        return _checked_regression(LabelInfo(kind="regression", value_type=vt), values, column, where)
    if vt == "float" and not scan.all_integral:
        raise UsageError(
            f"{where}: labels in column {column!r} have fractional values; classes must be whole numbers or text"
        )
    if vt == "bool":
        ordered = sorted(values)  # False before True
        names = tuple(str(v).lower() for v in ordered)
        return _checked_classes(LabelInfo("classification", "bool", names, {v: i for i, v in enumerate(ordered)}),
                                column, where)
    ordered = sorted(int(v) for v in values)
    names = tuple(str(v) for v in ordered)
    mapping = {v: i for i, v in enumerate(ordered)}
    return _checked_classes(LabelInfo("classification", vt, names, mapping), column, where)


def _single_class(column: str, where: str, name) -> None:
    raise UsageError(
        f"{where}: the training data has a single class ({name!r}) in column {column!r}; "
        "classification needs at least two"
    )


def _checked_classes(info: LabelInfo, column: str, where: str) -> LabelInfo:
    if len(info.names) < 2:
        _single_class(column, where, info.names[0] if info.names else None)
    return info


def _checked_regression(info: LabelInfo, values: set | None, column: str, where: str) -> LabelInfo:
    if values is not None and len(values) < 2:
        raise UsageError(f"{where}: every training label in column {column!r} is the same value; nothing to learn")
    return info


def _compatible(train_type: str, eval_type: str) -> bool:
    # JSON writes 1 or 1.0 and pandas reads a whole-number column as float when it must: ints
    # and floats mix freely (fractional values where classes are expected are caught below).
    return train_type == eval_type or {train_type, eval_type} <= {"int", "float"}


def check_eval_labels(ds, column: str, info: LabelInfo, *, where: str) -> None:
    """Raise unless the evaluation data's labels fit ``info`` (same type, classes seen in training).

    Usage: ``check_eval_labels(eval_ds, "label", info, where="--validation-file dev.csv")``
    """
    scan = _scan(ds, column)
    _check_scan(scan, column, where)
    if not _compatible(info.value_type, scan.value_type):
        raise UsageError(
            f"{where}: mixed label types: validation labels in column {column!r} are {scan.value_type} "
            f"but training labels are {info.value_type}; use one type for every label"
        )
    if info.kind == "regression":
        if scan.value_type == "string" and scan.values is not None:
            _string_kind(scan.values, column, where)
            if not all(_is_number_text(v) for v in scan.values):
                raise UsageError(f"{where}: validation labels in column {column!r} are text, training labels numbers")
        return
    if scan.values is None:
        _too_many_classes(column, where)
    if info.value_type == "classlabel":
        names = tuple(ds.features[column].names)
        if names != info.names:
            raise UsageError(
                f"{where}: validation label names {list(names)} differ from training label names {list(info.names)}"
            )
    if info.value_type == "string":
        _string_kind(scan.values, column, where)  # numbers mixed with words in the validation data
    if scan.value_type == "float" and not scan.all_integral:
        raise UsageError(f"{where}: validation labels in column {column!r} have fractional values")
    values = {int(v) for v in scan.values} if scan.value_type == "float" else scan.values
    unseen = values - set(info.mapping)
    if info.value_type == "classlabel":
        unseen = {info.names[i] if 0 <= i < len(info.names) else i for i in unseen}
    if unseen:
        raise UsageError(
            f"{where}: validation label{'s' if len(unseen) > 1 else ''} {_show(unseen, 5)} never seen in training "
            f"(training labels: {_show(info.names, 10)})"
        )
