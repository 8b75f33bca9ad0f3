"""A text-classification (or regression) data set from the user's files, a GLUE directory or a hub dataset, checked.

Usage::

    from mixft.data.user_data import load_glue_data, load_text_data
    data = load_text_data(train_file="topics_train.csv", validation_file="topics_validation.csv")
    data = load_text_data(data_dir="glue/SST-2")        # train.tsv + dev.tsv (mixft.data.glue_dir)
    data = load_text_data(dataset="ag_news", validation_split=0.1, max_train_samples=5000)
    data = load_text_data(dataset="ag_news", stand_in=AG_NEWS)   # a recipe's offline fallback
    data = load_text_data(validation_file="dev.csv", model_labels=ModelLabels(("neg", "pos"), "--model out/model"))
    data = load_glue_data("mrpc")
    data.train, data.eval          # datasets.Dataset (Arrow), the source's own columns
    data.task.kind, data.task.id2label, data.task.text_columns, data.description

Everything a run needs to know about its data is settled here, before a model or
tokenizer is loaded: the source, the columns, the label kind and names, the validation
data, the sample caps. Every problem is one UsageError line. Data the user brings is
used whole unless ``max_train_samples`` / ``max_eval_samples`` say otherwise; only a
generated stand-in (``stand_in=``, passed by a recipe for when the hub is out of reach;
see mixft.data.synthetic) has a default size, ``demo_train_size`` / ``demo_eval_size``.
This module never imports a generator: which stand-in may replace a dataset is the
caller's decision.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from dataclasses import dataclass
from typing import Any

from mixft.data.columns import check_columns, check_text_columns, resolve_columns
from mixft.data.held_out import HeldOut, carve, rows_digest
from mixft.data.labels import TASK_KINDS, LabelInfo, ModelLabels, analyze_labels, check_eval_labels, labels_for_model
from mixft.errors import UsageError
from mixft.log import logger
from mixft.options import FRACTION, POSITIVE_INT

DEMO_TRAIN_SIZE = 2000
DEMO_EVAL_SIZE = 872  # SST-2's dev size
# Advice for a GLUE task that cannot be had: --recipe glue takes no data files of its own.
GLUE_OTHER_DATA = (
    "train on your own copy of the task's files with --recipe text-classification --train-file/--validation-file"
)
# Split names that hold validation data on the hub, in order of preference.
VALIDATION_SPLITS = ("validation", "validation_matched", "dev", "valid")


@dataclass(frozen=True)
class TextTask:
    """What the model, loss and metrics need to know about the data."""

    text_column: str
    text_pair_column: str | None
    label_column: str
    labels: LabelInfo
    glue_task: str | None = None  # the GLUE task name when the data is GLUE's (official metrics)

    @property
    def kind(self) -> str:
        """ "classification" or "regression"."""
        return self.labels.kind

    @property
    def num_labels(self) -> int:
        """Classes for classification, 1 for regression."""
        return self.labels.num_labels

    @property
    def label_names(self) -> tuple[str, ...]:
        return self.labels.names

    @property
    def id2label(self) -> dict[int, str]:
        return self.labels.id2label

    @property
    def label2id(self) -> dict[str, int]:
        return self.labels.label2id

    @property
    def text_columns(self) -> tuple[str, ...]:
        return (self.text_column,) if self.text_pair_column is None else (self.text_column, self.text_pair_column)

    @property
    def is_pair(self) -> bool:
        return self.text_pair_column is not None


@dataclass(frozen=True)
class TextData:
    """Training and evaluation data (Arrow datasets in the source's columns) and their task."""

    train: object  # datasets.Dataset
    eval: object  # datasets.Dataset
    task: TextTask
    name: str  # "data/train.csv", "glue/SST-2" (a data dir), "glue/mrpc", "mixft-generated-paraphrase"
    source: str  # "files" | "data-dir" | "hub" | "cache" | "generated"
    notice: str | None = None  # one line for the user (a stand-in was used), or None
    held_out: HeldOut | None = None  # --validation-split: the rows eval holds (a saved model records them)

    @property
    def description(self) -> str:
        """For run headers and results: ``"glue/mrpc (3668 train / 408 eval)"``; ``"dev.csv (408 eval)"``
        for evaluation data alone (a saved model's, ``model_labels``)."""
        if len(self.train) == 0:
            return f"{self.name} ({len(self.eval)} eval)"
        return f"{self.name} ({len(self.train)} train / {len(self.eval)} eval)"


# ---------------------------------------------------------------------------------------
# Argument checks: all of them before any file is opened
# ---------------------------------------------------------------------------------------


def _check_arguments(
    train_file,
    validation_file,
    data_dir,
    dataset,
    dataset_config,
    eval_split,
    task_kind,
    validation_split,
    max_train_samples,
    max_eval_samples,
    evaluation_only: bool = False,
) -> None:
    if data_dir is not None:
        given = [
            flag
            for flag, value in (
                ("--train-file", train_file),
                ("--dataset", dataset),
                ("--validation-split", validation_split),
            )
            if value is not None
        ]
        if given:
            raise UsageError(f"--data-dir brings its own train.tsv and dev.tsv; drop {', '.join(given)}")
    elif evaluation_only and train_file is None and dataset is None:
        # A saved model is evaluated: its labels come from the model, no training data is needed.
        if validation_file is None:
            raise UsageError(
                "pass --validation-file (the data to evaluate on), or --train-file with "
                "--validation-split, or --dataset NAME"
            )
    elif (train_file is None) == (dataset is None):
        raise UsageError("pass either --train-file (with --validation-file or --validation-split) or --dataset NAME")
    if validation_file is not None and train_file is None:
        if not evaluation_only:
            raise UsageError("--validation-file needs --train-file")
        if dataset is not None:  # its evaluation split would be read, the file silently not
            raise UsageError("--validation-file and --dataset both name the data to evaluate on: pass one")
    if dataset is None and (dataset_config is not None or eval_split is not None):
        raise UsageError(f"--{'dataset-config' if dataset_config is not None else 'eval-split'} needs --dataset")
    if task_kind is not None and task_kind not in TASK_KINDS:
        raise UsageError(f"unknown task kind {task_kind!r}; task kinds: {', '.join(TASK_KINDS)}")
    # The same rules as RunConfig's (mixft.options): one rule per option, from any caller.
    if validation_split is not None:
        FRACTION.validate("--validation-split", validation_split)
        if validation_file is not None:
            raise UsageError("pass --validation-file or --validation-split, not both")
    for flag, count in (("--max-train-samples", max_train_samples), ("--max-eval-samples", max_eval_samples)):
        if count is not None:
            POSITIVE_INT.validate(flag, count)


# ---------------------------------------------------------------------------------------
# Sources
# ---------------------------------------------------------------------------------------


def _pick_eval_split(splits, eval_split: str | None, shown: str, flag: str) -> str | None:
    names = list(splits)
    if eval_split is not None:
        if eval_split not in splits:
            raise UsageError(f"{shown}: no split {eval_split!r}{flag}; splits: {', '.join(names)}")
        return eval_split
    return next((s for s in VALIDATION_SPLITS if s in splits), None)


def _from_hub(
    dataset, config, eval_split, user_eval_split, seed, hub_timeout, stand_in, demo_train, demo_eval, shown, other_data
):
    """(train, eval or None, name, source, notice, where, eval_where, splits listing)."""
    from mixft.data.hubdata import OTHER_DATA, DatasetUnavailable, dataset_label, fetch_hub_dataset

    label = dataset_label(dataset, config)
    shown = shown or f"--dataset {label}"
    try:
        splits, source = fetch_hub_dataset(
            dataset, config, hub_timeout=hub_timeout, shown=shown, other_data=other_data or OTHER_DATA
        )
        name, notice = label, None
    except DatasetUnavailable as unavailable:
        if stand_in is None:
            raise
        splits, notice = _stand_in(stand_in, label, seed, demo_train, demo_eval)
        name, source = stand_in.name, "generated"
        logger.debug("%s (%s)", notice, unavailable)  # returned to the caller, who shows it
    if "train" not in splits:
        raise UsageError(f"{shown}: no 'train' split; splits: {', '.join(splits)}")
    # "(--eval-split)" only where the user passed it: a GLUE task's split is the table's choice.
    chosen = _pick_eval_split(splits, eval_split, shown, " (--eval-split)" if user_eval_split else "")
    where = f"{shown} (train split)"
    eval_where = f"{shown} ({chosen} split)"
    eval_ds = splits[chosen] if chosen is not None else None
    return splits["train"], eval_ds, name, source, notice, where, eval_where, ", ".join(splits)


def _stand_in(stand_in, label: str, seed: int, train_size: int, eval_size: int):
    """(the stand-in's splits, its notice); sizes past what it offers are refused before any is made."""
    label = stand_in.label or label
    for flag, what, size in (
        ("--max-train-samples", "training", train_size),
        ("--max-eval-samples", "evaluation", eval_size),
    ):
        if size > stand_in.max_size:
            raise UsageError(
                f"{flag} {size}: {stand_in.described} offers at most {stand_in.max_size} {what} "
                f"{stand_in.unit} ({label} is not reachable or cached here); pass {stand_in.more_data} "
                "for more data"
            )
    splits = stand_in.build(train_size=train_size, eval_size=eval_size, seed=seed)
    notice = stand_in.notice.format(
        label=label, name=stand_in.name, train=len(splits["train"]), eval=len(splits[stand_in.eval_split]), seed=seed
    )
    return splits, notice


@contextlib.contextmanager
def _blamed_on_the_cap(capped: bool, max_train_samples: int | None):
    """A label error that only the --max-train-samples cap caused says so."""
    try:
        yield
    except UsageError as exc:
        if not capped:
            raise
        raise UsageError(
            f"{exc} (after --max-train-samples {max_train_samples} kept the first "
            f"{max_train_samples} training rows; raise it, or shuffle the file)"
        ) from None


def _same_file(a, b) -> bool:
    try:
        return os.path.samefile(os.path.expanduser(a), os.path.expanduser(b))
    except OSError:
        return False


def _first(ds, n: int | None):
    return ds if n is None or n >= len(ds) else ds.select(range(n))


def load_text_data(
    *,
    train_file: str | os.PathLike | None = None,
    validation_file: str | os.PathLike | None = None,
    data_dir: str | os.PathLike | None = None,
    dataset: str | None = None,
    dataset_config: str | None = None,
    eval_split: str | None = None,
    text_column: str | None = None,
    text_pair_column: str | None = None,
    label_column: str | None = None,
    task_kind: str | None = None,
    validation_split: float | None = None,
    max_train_samples: int | None = None,
    max_eval_samples: int | None = None,
    seed: int = 0,
    hub_timeout: float = 3.0,
    stand_in=None,
    demo_train_size: int = DEMO_TRAIN_SIZE,
    demo_eval_size: int = DEMO_EVAL_SIZE,
    glue_task: str | None = None,
    dataset_shown: str | None = None,
    other_data: str | None = None,
    model_labels: ModelLabels | None = None,
) -> TextData:
    """Read, check and cap the data of a text-classification or regression run.

    Source: ``train_file`` (+ ``validation_file``) in CSV/TSV/JSON/JSON Lines/Parquet,
    ``data_dir`` in GLUE SST-2's layout (mixft.data.glue_dir), or ``dataset`` (+
    ``dataset_config``) from the local cache or the hub; the evaluation split of a hub
    dataset is ``eval_split`` or the first of VALIDATION_SPLITS present. When the hub
    dataset cannot be had, ``stand_in`` (a mixft.data.synthetic StandIn, the caller's
    choice) replaces it, ``demo_train_size`` / ``demo_eval_size`` rows unless capped.
    With no validation data, ``validation_split=F`` holds out a seeded fraction of train.
    Columns are given or detected (see mixft.data.columns); ``task_kind`` forces
    "classification" or "regression" where the labels allow both (see mixft.data.labels).
    The first ``max_train_samples`` / ``max_eval_samples`` rows are kept (after any hold-out).
    ``glue_task`` marks the data as that GLUE task (``load_glue_data`` sets it; a
    ``dataset="glue"`` with a GLUE config sets it too). ``dataset_shown`` is how the user
    asked for the hub dataset, for messages (default ``--dataset NAME/CONFIG``);
    ``other_data`` the advice when it cannot be had (default: pass --train-file/--validation-file):
    a recipe that refuses those flags says what it accepts instead.

    ``model_labels``: the data is for evaluating a saved model (``--eval-only``), whose label
    space this is. ``validation_file`` alone is then enough (no ``train_file``); the
    validation labels are read against the model's names (mixft.data.labels.labels_for_model:
    by name, in any order), the task's labels are the model's, and ``train`` is empty (the
    training data, when given, is read only for ``validation_split`` to hold out the same rows).

    Usage: ``data = load_text_data(train_file="train.csv", validation_split=0.1, seed=0)``
    """
    # First statement: locals() holds the arguments alone here, as one value for the steps below.
    req = _Request(**locals())
    _check_request(req)
    req = _with_glue_defaults(req)
    if req.evaluation_only and train_file is None and data_dir is None and dataset is None:  # evaluation data alone
        return _validation_file_for_model(validation_file, req.columns, model_labels, max_eval_samples, req.glue_task)
    src = _read_source(req)
    _check_validation_source(src, validation_split)
    cols = _checked_columns(src, req.columns)
    if req.evaluation_only:  # the model's labels, not the training data's, say what each name means
        return _held_out_for_model(src, cols, req)
    train, eval_ds, labels, held_out = _labelled_and_capped(
        src, cols, req.task_kind, validation_split, seed, max_train_samples, max_eval_samples
    )
    task = _text_task(cols, labels, req.glue_task)
    notice = _notice(src, train_file, validation_file, train, eval_ds, cols)
    return TextData(
        train=train, eval=eval_ds, task=task, name=src.name, source=src.source, notice=notice, held_out=held_out
    )


# The steps of load_text_data, in its order. ---------------------------------------------------
@dataclass(frozen=True)
class _Request:
    """load_text_data's arguments, name for name (it builds this from its ``locals()``: a parameter
    missing here fails every call at once), plus what its steps settle from them."""

    train_file: Any
    validation_file: Any
    data_dir: Any
    dataset: str | None
    dataset_config: str | None
    eval_split: str | None
    text_column: str | None
    text_pair_column: str | None
    label_column: str | None
    task_kind: str | None
    validation_split: float | None
    max_train_samples: int | None
    max_eval_samples: int | None
    seed: int
    hub_timeout: float
    stand_in: Any
    demo_train_size: int
    demo_eval_size: int
    glue_task: str | None
    dataset_shown: str | None
    other_data: str | None
    model_labels: ModelLabels | None
    # Whether the user named the evaluation split: a GLUE task's default split is the table's choice.
    user_eval_split: bool = False

    @property
    def evaluation_only(self) -> bool:
        """The data is for evaluating a saved model (``model_labels``)."""
        return self.model_labels is not None

    @property
    def columns(self) -> dict:
        """The column arguments, as mixft.data.columns.resolve_columns takes them."""
        return dict(
            text_column=self.text_column, text_pair_column=self.text_pair_column, label_column=self.label_column
        )


def _check_request(req: _Request) -> None:
    """Every check of the arguments alone, in order, before any file is opened."""
    _check_arguments(
        req.train_file,
        req.validation_file,
        req.data_dir,
        req.dataset,
        req.dataset_config,
        req.eval_split,
        req.task_kind,
        req.validation_split,
        req.max_train_samples,
        req.max_eval_samples,
        req.evaluation_only,
    )
    if req.evaluation_only and req.task_kind is not None and req.task_kind != req.model_labels.kind:
        raise UsageError(
            f"--task-kind {req.task_kind}: {req.model_labels.source} is a {req.model_labels.kind} model; drop "
            "--task-kind (a saved model's task is its own)"
        )


def _with_glue_defaults(req: _Request) -> _Request:
    """The request with its GLUE task named (a ``dataset="glue"`` with a GLUE config is one) and,
    for a GLUE task, the task's kind, evaluation split and text columns where the user named none."""
    req = dataclasses.replace(req, user_eval_split=req.eval_split is not None)
    if req.dataset is not None and req.glue_task is None:
        req = dataclasses.replace(req, glue_task=_glue_config(req.dataset, req.dataset_config))
    if req.glue_task is None:
        return req
    task_kind, eval_split, text_column, text_pair_column = _glue_defaults(
        req.glue_task, req.dataset is not None, req.task_kind, req.eval_split, req.text_column, req.text_pair_column
    )
    return dataclasses.replace(
        req, task_kind=task_kind, eval_split=eval_split, text_column=text_column, text_pair_column=text_pair_column
    )


def _glue_defaults(glue_task: str, from_hub: bool, task_kind, eval_split, text_column, text_pair_column):
    """A GLUE task's own kind, evaluation split and text columns, where the user named none."""
    from mixft.data.glue import glue_task as lookup

    table = lookup(glue_task)
    task_kind = task_kind or table.kind
    eval_split = eval_split or (table.validation_split if from_hub else None)
    if text_column is None and text_pair_column is None:
        text_column, text_pair_column = table.text_columns[0], (table.text_columns[1:] or (None,))[0]
    elif text_pair_column is not None and not table.is_pair:
        raise UsageError(
            f"GLUE {table.name} is single-text data (column {table.text_columns[0]!r}); "
            f"--text-pair-column {text_pair_column} does not apply"
        )
    return task_kind, eval_split, text_column, text_pair_column


def _validation_file_for_model(
    validation_file, columns: dict, model_labels: ModelLabels, max_eval_samples: int | None, glue_task: str | None
) -> TextData:
    """``--eval-only`` with ``--validation-file`` alone: that file, read against the model's labels."""
    from mixft.data.files import load_data_file

    eval_ds = load_data_file(validation_file, "--validation-file")
    eval_where = f"--validation-file {validation_file}"
    cols = resolve_columns(eval_ds.column_names, where=eval_where, **columns)
    check_text_columns(eval_ds, cols, where=eval_where)
    return _for_model(
        eval_ds,
        cols,
        model_labels,
        eval_where,
        max_eval_samples,
        glue_task,
        name=str(validation_file),
        source="files",
        notice=None,
    )


@dataclass
class _Source:
    """The data as read, before any check: where each split came from, for messages."""

    train: Any
    eval: Any  # None: no validation split in the source
    name: str
    source: str  # "files" | "data-dir" | "hub" | "generated"
    notice: str | None
    where: str
    eval_where: str
    listing: str | None  # a hub dataset's split names (for the message when none is the evaluation split)


def _read_source(req: _Request) -> _Source:
    """Files, a GLUE directory, or a hub dataset (or its generated stand-in), read whole."""
    train_file, validation_file, data_dir = req.train_file, req.validation_file, req.data_dir
    if train_file is not None:
        from mixft.data.files import load_data_file

        train = load_data_file(train_file, "--train-file")
        eval_ds = load_data_file(validation_file, "--validation-file") if validation_file is not None else None
        return _Source(
            train,
            eval_ds,
            str(train_file),
            "files",
            None,
            f"--train-file {train_file}",
            f"--validation-file {validation_file}",
            None,
        )
    if data_dir is not None:
        from mixft.data.glue_dir import read_glue_dir

        train, eval_ds = read_glue_dir(data_dir)
        return _Source(
            train,
            eval_ds,
            str(data_dir),
            "data-dir",
            None,
            f"--data-dir {data_dir} (train.tsv)",
            f"--data-dir {data_dir} (dev.tsv)",
            None,
        )
    train, eval_ds, name, source, notice, where, eval_where, listing = _from_hub(
        req.dataset,
        req.dataset_config,
        req.eval_split,
        req.user_eval_split,
        req.seed,
        req.hub_timeout,
        req.stand_in,
        req.max_train_samples or req.demo_train_size,
        req.max_eval_samples or req.demo_eval_size,
        req.dataset_shown,
        req.other_data,
    )
    return _Source(train, eval_ds, name, source, notice, where, eval_where, listing)


def _check_validation_source(src: _Source, validation_split: float | None) -> None:
    """Exactly one source of validation data: a split of the data, or ``--validation-split``'s hold-out."""
    if src.eval is not None and validation_split is not None:
        raise UsageError(f"{src.where}: the data has a validation split already; drop --validation-split")
    if src.eval is None and validation_split is None:
        # --validation-file goes with --train-file only: a hub dataset is offered what it accepts.
        choices = (
            f"its splits are {src.listing}: pass --eval-split NAME"
            if src.listing is not None
            else "pass --validation-file"
        )
        raise UsageError(
            f"{src.where}: no validation data; {choices}, or --validation-split F "
            "(0 < F < 1) to hold out a fraction of the training data"
        )


def _checked_columns(src: _Source, columns: dict):
    """The columns, resolved on train and checked on every row of both splits."""
    cols = resolve_columns(src.train.column_names, where=src.where, **columns)
    # Checked whole, before any hold-out or cap, so a bad row is reported by its row in the file.
    check_text_columns(src.train, cols, where=src.where)
    if src.eval is not None:
        check_columns(src.eval.column_names, cols, where=src.eval_where)
        check_text_columns(src.eval, cols, where=src.eval_where)
    return cols


def _labelled_and_capped(src: _Source, cols, task_kind, validation_split, seed, max_train_samples, max_eval_samples):
    """(train, eval, labels, the hold-out or None): the label space read from train, the hold-out carved (and
    its rows' digest taken, before any cap), the caps applied, eval checked."""
    train, eval_ds, where, eval_where = src.train, src.eval, src.where, src.eval_where
    labels = analyze_labels(train, cols.label, where=where, task_kind=task_kind)
    held_out = None
    if eval_ds is None:
        held_out = HeldOut(validation_split, seed, len(train))
        train, eval_ds = carve(train, held_out, where, labels.kind, cols.label)
        held_out = dataclasses.replace(held_out, rows_sha256=rows_digest(eval_ds, _read_columns(cols)))
        eval_where = f"{where} (rows held out by --validation-split {validation_split})"
    capped = max_train_samples is not None and max_train_samples < len(train)
    all_labels = labels
    if capped or validation_split is not None:
        # What is trained on decides the classes: a cap may drop one, a hold-out may take one.
        train = _first(train, max_train_samples)
        with _blamed_on_the_cap(capped, max_train_samples):
            labels = analyze_labels(train, cols.label, where=where, task_kind=task_kind)
    eval_ds = _first(eval_ds, max_eval_samples)
    if labels != all_labels:  # checked against all the labels first: only what the cap caused blames the cap
        check_eval_labels(eval_ds, cols.label, all_labels, where=eval_where)
    with _blamed_on_the_cap(capped, max_train_samples):
        check_eval_labels(eval_ds, cols.label, labels, where=eval_where)
    return train, eval_ds, labels, held_out


def _read_columns(cols) -> list[str]:
    """The columns a run reads (its texts, its label): what a hold-out's digest covers."""
    return [*cols.text_columns, cols.label]


def _held_out_for_model(src: _Source, cols, req: _Request) -> TextData:
    """``--eval-only`` with training data: its validation split, or the rows the training run held out
    (the model's record of them: mixft.data.held_out), read against the model's labels."""
    eval_ds, eval_where, notice = src.eval, src.eval_where, src.notice
    if eval_ds is None:  # the rows the training run held out: the same file, fraction and seed
        held_out, notice = _models_hold_out(src, req)
        _, eval_ds = carve(src.train, held_out, src.where, req.model_labels.kind, cols.label)
        if held_out.rows_sha256 is not None and rows_digest(eval_ds, _read_columns(cols)) != held_out.rows_sha256:
            raise UsageError(
                f"{src.where}: the rows --validation-split {held_out.fraction} (seed {held_out.seed}) holds out now are "
                f"not those {req.model_labels.source} was held out from (the data was edited or reordered since), "
                "so some were trained on; evaluate on the file it was trained with, or pass --validation-file"
            )
        eval_where = f"{src.where} (rows held out by --validation-split {held_out.fraction}, seed {held_out.seed})"
    return _for_model(
        eval_ds,
        cols,
        req.model_labels,
        eval_where,
        req.max_eval_samples,
        req.glue_task,
        name=src.name,
        source=src.source,
        notice=notice,
    )


def _models_hold_out(src: _Source, req: _Request) -> tuple[HeldOut, str | None]:
    """(the hold-out to evaluate a saved model on, a line for the user or ``src.notice``).

    The model's record when it has one: its seed whatever ``--seed`` is now (a ``--seeds`` run's
    models all held out the first seed's rows); another fraction, or data with another number of
    rows, would mix in rows it trained on and is refused. A model saved without a record (before
    mixft kept one) gets ``--validation-split`` and ``--seed`` as given.
    """
    model = req.model_labels
    record, rows = model.held_out, len(src.train)
    if record is None:
        return HeldOut(req.validation_split, req.seed, rows), src.notice
    if record.fraction != req.validation_split:
        raise UsageError(
            f"--validation-split {req.validation_split}: {model.source} held out {record.fraction} of its training "
            f"data; another fraction would evaluate on rows it trained on: pass --validation-split {record.fraction}"
        )
    if record.rows != rows:
        raise UsageError(
            f"{src.where}: {rows} rows, but {model.source} held out its evaluation rows from {record.rows}: "
            "the data changed since, so the rows held out now would include rows it trained on"
        )
    if record.seed != req.seed:
        notice = (
            f"--eval-only: evaluating on the rows {model.source} was held out from in training "
            f"(--validation-split {record.fraction} with seed {record.seed}), not those --seed {req.seed} would hold out"
        )
        return record, notice
    return record, src.notice


def _notice(src: _Source, train_file, validation_file, train, eval_ds, cols) -> str | None:
    """The lines for the user: the source's, and a warning when the validation file is the training file or,
    otherwise, when evaluation rows repeat training rows."""
    if train_file is not None and validation_file is not None and _same_file(train_file, validation_file):
        # Allowed (an overfitting check is a real use), never silent: the scores measure fit, not generalisation.
        return (
            f"warning: --validation-file {validation_file} is the --train-file: the evaluation measures how "
            "well the model fits its training data, not how it does on unseen data"
        )
    return "\n".join(n for n in (src.notice, _repeated_rows_notice(train, eval_ds, cols)) if n) or None


def _repeated_rows_notice(train, eval_ds, cols) -> str | None:
    """A warning when evaluation rows repeat training rows' text (whitespace runs aside): a file with duplicates
    split by --validation-split, or two files that share rows. Their scores measure memory, not unseen text."""
    if train is None or eval_ds is None or len(train) == 0 or len(eval_ds) == 0:
        return None

    def texts(ds) -> list[tuple[str, ...]]:
        return list(zip(*(((" ".join(str(v).split())) for v in ds[c]) for c in cols.text_columns)))

    seen = set(texts(train))
    repeated = sum(row in seen for row in texts(eval_ds))
    if not repeated:
        return None
    return (
        f"warning: {repeated} of {len(eval_ds)} evaluation rows have the text of a training row: on those the "
        "evaluation measures what the model memorised, not how it does on unseen text; remove the repeats from "
        "the data to score unseen text only"
    )


def _text_task(cols, labels: LabelInfo, glue_task: str | None) -> TextTask:
    return TextTask(
        text_column=cols.text,
        text_pair_column=cols.text_pair,
        label_column=cols.label,
        labels=labels,
        glue_task=glue_task,
    )


def _for_model(
    eval_ds,
    cols,
    model_labels: ModelLabels,
    eval_where: str,
    max_eval_samples: int | None,
    glue_task: str | None,
    *,
    name: str,
    source: str,
    notice: str | None,
) -> TextData:
    """Evaluation data for a saved model: its labels read against the model's, no training rows."""
    eval_ds = _first(eval_ds, max_eval_samples)
    labels = labels_for_model(eval_ds, cols.label, model_labels, where=eval_where)
    task = _text_task(cols, labels, glue_task)
    return TextData(train=eval_ds.select([]), eval=eval_ds, task=task, name=name, source=source, notice=notice)


def _glue_config(dataset: str, config: str | None) -> str | None:
    from mixft.data.glue import GLUE_REPO, GLUE_TASKS
    from mixft.data.hubdata import canonical_name

    if canonical_name(dataset) == GLUE_REPO and config in GLUE_TASKS:
        return config
    return None


def load_glue_data(
    task: str,
    *,
    max_train_samples: int | None = None,
    max_eval_samples: int | None = None,
    seed: int = 0,
    hub_timeout: float = 3.0,
    stand_in=None,
    demo_train_size: int = DEMO_TRAIN_SIZE,
    demo_eval_size: int = DEMO_EVAL_SIZE,
    shown: str | None = None,
    other_data: str | None = None,
    model_labels: ModelLabels | None = None,
) -> TextData:
    """A GLUE task's train and official validation split (``validation_matched`` for MNLI).

    When the hub is out of reach and nothing is cached, ``stand_in`` (the caller's choice,
    e.g. mixft.data.synthetic.stand_ins.stand_in_for("glue", task)) replaces the data;
    without one that is a one-line UsageError naming the data as ``shown`` (default
    ``glue/mnli``: no flag, since the caller knows which one the user passed, e.g. ``--task
    mnli``) and advising ``other_data`` (default GLUE_OTHER_DATA: the GLUE recipes take no
    data files, so the advice names the recipe that does).
    ``data.task.glue_task`` names the task, so ``mixft.metrics.task`` picks its official metrics.
    ``model_labels``: evaluating a saved model (see :func:`load_text_data`).

    Usage: ``data = load_glue_data("stsb"); data.task.kind  # "regression"``
    """
    from mixft.data.glue import glue_task

    table = glue_task(task)
    return load_text_data(
        dataset="glue",
        dataset_config=table.name,
        glue_task=table.name,
        max_train_samples=max_train_samples,
        max_eval_samples=max_eval_samples,
        seed=seed,
        hub_timeout=hub_timeout,
        stand_in=stand_in,
        demo_train_size=demo_train_size,
        demo_eval_size=demo_eval_size,
        dataset_shown=shown or f"glue/{table.name}",
        other_data=other_data or GLUE_OTHER_DATA,
        model_labels=model_labels,
    )
