"""``--predict-file FILE``: label a file with the trained (or ``--eval-only``) model, in input order.

The file is read and checked once, before any training (``read_predict_file``): any format
the data layer reads, the training data's text columns, a label column optional. After each
(precision, seed) run, ``predict_and_write`` writes ``OUTPUT_DIR/predictions[-<prec>-seed<k>]
.csv|jsonl`` (``mixft.runs.predictions_file``: label names, probabilities, the id column) and, when
the file has labels, evaluates on it too (results.json ``predict.metrics``).

Recipes whose prepared data carries a ``data.task`` (``mixft.data.user_data.TextTask``) and a
``tokenizer`` can predict: text-classification and glue.

Usage::

    source = read_predict_file(cfg, prepared)            # UsageError now, not after training
    result.predict = predict_and_write(trainer, source, out / "predictions.csv", batch_size=64)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mixft.config.run_config import RunConfig
from mixft.data.columns import Columns, check_text_columns
from mixft.data.files import load_data_file
from mixft.data.labels import (
    LabelInfo,
    ModelLabels,
    UnscorableLabels,
    check_eval_labels,
    labels_for_model,
    read_as_class_labels,
)
from mixft.data.loaders import make_loader
from mixft.data.tokenize import tokenize_dataset
from mixft.errors import UsageError
from mixft.log import logger
from mixft.runs.predictions_file import find_id_column, write_predictions

# Tokens per example when the run does not say (the text recipes' own default).
DEFAULT_MAX_LENGTH = 128
_PLACEHOLDER = "__mixft_no_label__"  # a label column for a file without one: the model's outputs ignore it


@dataclass
class PredictSource:
    """A checked, tokenised ``--predict-file``: what every run of the invocation labels."""

    path: str
    examples: Any  # tokenised datasets.Dataset, in input order
    tokenizer: Any
    kind: str  # "classification" | "regression"
    label_names: list[str] | None
    ids: list | None
    id_column: str | None
    has_labels: bool
    metrics_skipped: str | None = None  # why the file's labels are not scored (results.json predict.metrics_skipped)

    @property
    def rows(self) -> int:
        return len(self.examples)


def read_predict_file(cfg: RunConfig, prepared) -> PredictSource:
    """Read and check ``cfg.predict_file`` against the training data's task; tokenise it.

    Usage: ``read_predict_file(cfg, recipe.prepare(cfg)).rows``
    """
    where = f"--predict-file {cfg.predict_file}"
    task = getattr(getattr(prepared, "data", None), "task", None)
    tokenizer = getattr(prepared, "tokenizer", None)
    if task is None or tokenizer is None:
        raise UsageError(f"--predict-file: recipe {cfg.recipe} cannot label a file (text-classification and glue can)")
    ds = load_data_file(cfg.predict_file, "--predict-file")
    missing = [c for c in task.text_columns if c not in ds.column_names]
    if missing:
        raise UsageError(
            f"{where}: no column {' or '.join(repr(m) for m in missing)} (the training data's text); "
            f"columns: {', '.join(repr(c) for c in ds.column_names)}"
        )
    check_text_columns(ds, Columns(task.text_column, task.text_pair_column, task.label_column), where=where)
    has_labels = task.label_column in ds.column_names
    skipped = None
    if has_labels and cfg.eval_only:
        # A saved model's label space: the file's labels are matched to its names, as the validation data's are.
        names = tuple(task.label_names) if task.kind == "classification" else None
        label_column = task.label_column
        labels = labels_for_model(ds, label_column, ModelLabels(names, f"--model {cfg.model}"), where=where)
    elif has_labels:
        ds = read_as_class_labels(ds, task.label_column, task.labels)  # a GLUE task's file: 0/1 are its classes
        try:
            check_eval_labels(ds, task.label_column, task.labels, where=where, role="--predict-file")
        except UnscorableLabels as e:
            # A predict file's labels are optional: labels that cannot be scored cost the metrics, not the run.
            skipped = str(e).removeprefix(f"{where}: ")
            logger.warning("%s: its labels cannot be scored (%s): predicting without metrics", where, skipped)
            has_labels = False
    if has_labels and not cfg.eval_only:
        label_column, labels = task.label_column, task.labels
    elif not has_labels:
        ds = ds.add_column(_PLACEHOLDER, [0.0] * len(ds))
        label_column, labels = _PLACEHOLDER, LabelInfo(kind="regression", value_type="float")
    id_column = find_id_column(ds.column_names)
    # The length the training data was cut to: the recipe capped it by what the model reads.
    max_length = getattr(prepared, "max_length", None) or cfg.max_length or DEFAULT_MAX_LENGTH
    examples = tokenize_dataset(
        ds, tokenizer, text_columns=task.text_columns, label_column=label_column, labels=labels, max_length=max_length
    )
    return PredictSource(
        path=str(cfg.predict_file),
        examples=examples,
        tokenizer=tokenizer,
        kind=task.kind,
        label_names=list(task.label_names) if task.kind == "classification" else None,
        ids=list(ds[id_column]) if id_column else None,
        id_column=id_column,
        has_labels=has_labels,
        metrics_skipped=skipped,
    )


def predict_and_write(trainer, source: PredictSource, path: Path, batch_size: int) -> dict[str, Any]:
    """Label ``source`` with ``trainer``'s model; write ``path``; return results.json's ``predict``.

    ``{"file", "output", "rows", "metrics"}`` (``metrics`` null when the file has no labels).

    Usage: ``result.predict = predict_and_write(trainer, source, out / "predictions.csv", 64)``
    """
    loader = make_loader(source.examples, source.tokenizer, batch_size, shuffle=False)
    # The loader batches by length (longest first); predict puts the outputs back in input order.
    write_predictions(
        path,
        trainer.predict(loader),
        source.kind,
        source.label_names,
        ids=source.ids,
        id_column=source.id_column or "id",
    )
    metrics = None
    if source.has_labels:
        metrics = trainer.evaluate(loader)
    record = {"file": source.path, "output": str(path), "rows": source.rows, "metrics": metrics}
    if source.metrics_skipped:
        record["metrics_skipped"] = source.metrics_skipped
    return record
