"""Label a file with a trained model: ``predictions.csv`` or ``predictions.jsonl``, one row per input.

Rows keep the input order. Classification rows hold the predicted label's *name* and its
probability; regression rows hold the predicted value. The input's id column (``id`` or
``idx``) comes first when the input has one, so rows can be joined back.

Usage::

    logits = trainer.predict(loader)                      # fp32, CPU, in input order
    write_predictions(out / predictions_filename("new.jsonl"), logits, "classification",
                      ["negative", "positive"], ids=rows["idx"], id_column="idx")
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from mixft.atomic import write_text

#: The id columns recognised in an input file, in order of preference.
ID_COLUMNS = ("id", "idx")
FORMATS = ("csv", "jsonl")
KINDS = ("classification", "regression")


def predictions_filename(input_file: str | os.PathLike | None = None, fmt: str | None = None) -> str:
    """``predictions.jsonl`` for JSON / JSON Lines inputs, else ``predictions.csv``; ``fmt`` chooses.

    Usage: ``predictions_filename("test.json")  # "predictions.jsonl"``
    """
    if fmt is None:
        suffix = Path(input_file).suffix.lower() if input_file is not None else ""
        fmt = "jsonl" if suffix in (".json", ".jsonl") else "csv"
    if fmt not in FORMATS:
        raise ValueError(f"predictions format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    return f"predictions.{fmt}"


def find_id_column(column_names: Sequence[str]) -> str | None:
    """The input's id column (``id``, else ``idx``), or None.

    Usage: ``find_id_column(["idx", "sentence"])  # "idx"``
    """
    return next((name for name in ID_COLUMNS if name in column_names), None)


def probabilities_from_logits(logits: torch.Tensor, num_labels: int) -> torch.Tensor:
    """``[n, num_labels]`` class probabilities: softmax over several logits, sigmoid over one.

    A single logit per input is a binary head (``BCEWithLogitsLoss``): its sigmoid is the
    probability of label 1, so the result is ``[1 - p, p]``.

    Usage: ``probabilities_from_logits(logits, len(label_names)).argmax(-1)``
    """
    logits = logits.detach().float().cpu()
    if logits.dim() == 1 or logits.shape[-1] == 1:
        if num_labels != 2:
            raise ValueError(f"one logit per input is a binary head, but there are {num_labels} labels")
        p = torch.sigmoid(logits.reshape(-1))
        return torch.stack([1 - p, p], dim=-1)
    if logits.dim() != 2 or logits.shape[-1] != num_labels:
        raise ValueError(f"expected logits of shape [n, {num_labels}], got {list(logits.shape)}")
    return torch.softmax(logits, dim=-1)


def prediction_rows(
    outputs: torch.Tensor,
    kind: str,
    label_names: Sequence[str] | None = None,
    ids: Sequence[Any] | None = None,
    id_column: str = "id",
) -> list[dict[str, Any]]:
    """The rows ``write_predictions`` writes: ``{id_column?, "label", "probability"}`` or ``{id_column?, "value"}``.

    ``label_names`` is indexed by class id (without names, the class id is written).

    Usage: ``prediction_rows(logits, "classification", ["neg", "pos"])[0]  # {"label": "pos", "probability": 0.93}``
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    outputs = outputs.detach().float().cpu()
    if kind == "classification":
        num_labels = (
            len(label_names) if label_names is not None else max(outputs.shape[-1] if outputs.dim() > 1 else 1, 2)
        )
        probs = probabilities_from_logits(outputs, num_labels)
        # The label from the logits, as the metrics count it (argmax; one logit: > 0): two logits within ~6e-8
        # give equal probabilities, whose max would pick the first class where the metrics counted the other.
        binary = outputs.dim() == 1 or outputs.shape[-1] == 1
        label = (outputs.reshape(-1) > 0).long() if binary else outputs.argmax(dim=-1)
        prob = probs.gather(-1, label[:, None]).squeeze(-1)
        names = list(label_names) if label_names is not None else [str(i) for i in range(num_labels)]
        cells = [{"label": names[i], "probability": p} for i, p in zip(label.tolist(), prob.tolist())]
    else:
        if outputs.dim() > 1 and outputs.shape[-1] != 1:
            raise ValueError(f"regression outputs must hold one value per input, got shape {list(outputs.shape)}")
        cells = [{"value": v} for v in outputs.reshape(-1).tolist()]
    if ids is None:
        return cells
    ids = list(ids)
    if len(ids) != len(cells):
        raise ValueError(f"{len(ids)} ids for {len(cells)} predictions")
    return [{id_column: _plain(i), **row} for i, row in zip(ids, cells)]


def write_predictions(
    path: str | os.PathLike,
    outputs: torch.Tensor,
    kind: str,
    label_names: Sequence[str] | None = None,
    ids: Sequence[Any] | None = None,
    id_column: str = "id",
    fmt: str | None = None,
) -> Path:
    """Write one row per input, in input order, to ``path`` (CSV or JSON Lines by its suffix), atomically.

    ``outputs`` are the model's outputs in input order (``Trainer.predict``): logits for
    classification, values for regression.

    Usage: ``write_predictions("out/predictions.csv", logits, "classification", ["neg", "pos"])``
    """
    path = Path(path)
    fmt = fmt or ("jsonl" if path.suffix.lower() in (".jsonl", ".json") else "csv")
    if fmt not in FORMATS:
        raise ValueError(f"predictions format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    rows = prediction_rows(outputs, kind, label_names, ids, id_column)
    write_text(path, _jsonl(rows) if fmt == "jsonl" else _csv(rows, kind, id_column if ids is not None else None))
    return path


def _csv(rows: list[dict[str, Any]], kind: str, id_column: str | None) -> str:
    header = ([id_column] if id_column else []) + (["label", "probability"] if kind == "classification" else ["value"])
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=header, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def _jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def _plain(value):
    # Ids read through datasets / pandas may be numpy or torch scalars: JSON needs Python ones.
    return value.item() if hasattr(value, "item") else value
