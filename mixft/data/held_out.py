"""``--validation-split F``: the rows of the training data a run holds out to evaluate on, and the
record a saved model keeps of them.

The hold-out is seeded: the same data, fraction and seed give the same rows. Every run of a
``--seeds 1,2`` command holds out the rows of the first seed (one evaluation set for all), so a
saved model's hold-out cannot be told from the seed it trained with. ``--save-model`` therefore
writes the hold-out beside the weights (``held-out.json``), and ``--eval-only`` with the same
training data evaluates on exactly those rows, the ones that model never trained on, whatever
``--seed`` says now; another fraction, or training data with another number of rows or whose
rows were edited or reordered (the held-out rows' digest differs), would mix in rows it trained
on and is refused.

Usage::

    held_out = HeldOut(fraction=0.1, seed=1, rows=len(train))
    train, evaluation = carve(train, held_out, where="--train-file t.csv", kind="classification", label_column="label")
    write_held_out(model_dir, held_out)       # with the saved model
    read_held_out(model_dir)                  # HeldOut(...), or None for a model saved without one
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from mixft.data.label_key import label_key
from mixft.errors import UsageError

#: The record's file in a saved model's directory.
RECORD_NAME = "held-out.json"
_FORMAT = 1


@dataclass(frozen=True)
class HeldOut:
    """What ``--validation-split`` held out: ``fraction`` of the training data's ``rows``, drawn with ``seed``;
    ``rows_sha256``, once carved (``carve``), the held-out rows' own digest (``rows_digest``), which tells
    them apart from the rows the same fraction and seed pick in data edited or reordered since."""

    fraction: float
    seed: int
    rows: int
    rows_sha256: str | None = None


def rows_digest(ds, columns) -> str:
    """SHA-256 of ``ds``'s ``columns``, row by row in order (the values as read, before any label mapping).

    Usage: ``rows_digest(held, ["text", "label"])``
    """
    digest = hashlib.sha256()
    for batch in ds.select_columns(list(columns)).iter(batch_size=10_000):
        digest.update(json.dumps([batch[c] for c in columns], default=str).encode("utf-8"))
    return digest.hexdigest()


def carve(train, held_out: HeldOut, where: str, kind: str, label_column: str):
    """(the rows kept for training, the rows held out); the same data, fraction and seed give the same rows.

    Classification data is split per class (stratified), so every class keeps its share in
    both parts and a rare class is not lost to validation alone; regression data is split
    by one seeded permutation. Both parts keep the file's row order.
    """
    import numpy as np
    import pyarrow.compute as pc

    fraction = held_out.fraction
    # numpy takes seeds >= 0 only; the CLI allows [-2**63, 2**64). Modulo 2**64 keeps every
    # non-negative seed as it was and gives each negative one its own stream.
    rng = np.random.default_rng(held_out.seed % 2**64)
    column = train.select_columns([label_column]).with_format("arrow")[:].column(0)
    if kind == "classification":
        # One group per class, not per spelling: "1", "01" and "+1" are one class (label_key), split together.
        # label_key reads each distinct value once (Arrow's dictionary, in order of first appearance), so the
        # classes keep that order and a file of one spelling per class holds out the same rows as before.
        encoded = pc.dictionary_encode(column.combine_chunks())
        classes: dict = {}
        class_of = [classes.setdefault(label_key(v), len(classes)) for v in encoded.dictionary.to_pylist()]
        codes = np.asarray(class_of, dtype=np.int64)[encoded.indices.to_numpy(zero_copy_only=False)]
        groups = [np.flatnonzero(codes == code) for code in range(len(classes))]
    else:
        groups = [np.arange(len(train))]
    held = []
    for group in groups:
        group = rng.permutation(group)
        held.append(group[: min(int(round(fraction * len(group))), len(group) - 1)])
    held = np.sort(np.concatenate(held)) if held else np.array([], dtype=np.int64)
    if len(held) == 0:
        raise UsageError(
            f"{where}: --validation-split {fraction} of {len(train)} rows holds out no row; "
            "pass a larger fraction or --validation-file"
        )
    keep = np.setdiff1d(np.arange(len(train)), held, assume_unique=True)
    return train.select(keep), train.select(held)


def write_held_out(directory: str | os.PathLike, held_out: HeldOut) -> None:
    """The record, into a saved model's directory (still its staging copy: the directory is swapped in whole)."""
    record = {"format": _FORMAT, **asdict(held_out)}
    (Path(directory) / RECORD_NAME).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


def read_held_out(directory: str | os.PathLike) -> HeldOut | None:
    """A saved model's hold-out record; None where it has none (saved before the record, or trained
    on a validation file). A record that cannot be read is a one-line UsageError naming it."""
    path = Path(directory) / RECORD_NAME
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        if record.pop("format") != _FORMAT:
            raise ValueError("an unknown format")
        held_out = HeldOut(**record)
        if not (0 < float(held_out.fraction) < 1 and int(held_out.rows) > 0):
            raise ValueError("values out of range")
        digest = held_out.rows_sha256
        if digest is not None and not isinstance(digest, str):
            raise ValueError("rows_sha256 is not a digest")
        return HeldOut(float(held_out.fraction), int(held_out.seed), int(held_out.rows), digest)
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise UsageError(
            f"{path}: unreadable record of the rows the model's training held out ({exc}); restore it "
            "from the directory --save-model wrote, or evaluate with --validation-file"
        ) from None
