"""text-classification: any encoder or decoder-only model fine-tuned on the user's own data, files or a hub dataset.

Model: the model's own sequence-classification head (``AutoModelForSequenceClassification``
via ``mixft.models.classifiers.load_classifier``): N logits with softmax cross-entropy for two or more
classes, one output with MSE for regression. Encoders (BERT, RoBERTa, DistilBERT, ELECTRA,
DeBERTa-v2, XLM-R, MiniLM...) pool their first token; decoder-only models (GPT-2, Llama,
Qwen2, Mistral...) their last non-padding token, padded on the right with the end-of-text
token when the tokenizer has no padding token. Encoder-decoder checkpoints (T5, BART) are
refused. ``--lora`` trains LoRA adapters (peft) on the frozen model and the head in full;
``--save-model`` then writes the adapters + head only, which ``--eval-only --model DIR``
loads back onto the base model they record.
Data: ``--train-file`` (+ ``--validation-file`` or ``--validation-split``) in CSV, TSV,
JSON, JSON Lines or Parquet, or ``--dataset NAME [--dataset-config CFG]`` from the cache or
the hub; single texts or pairs, columns auto-detected; integer, string or float labels
(label names kept end to end). ``--eval-only --model DIR`` needs only ``--validation-file``
(or a dataset): the saved model's labels (its id2label) decide, the data's names are matched
to them by name in any order, and a name the model lacks is refused.
Metrics: accuracy + F1 (macro for more than two classes),
Pearson + Spearman for regression, through shipped ``evaluate`` modules.
Optimisation: AdamW, linear warm-up then decay, unless ``--lr-scheduler``,
``--warmup-ratio``/``--warmup-steps``, ``--weight-decay`` say otherwise; classification
takes ``--label-smoothing`` and ``--class-weights balanced`` (regression refuses both);
``--gradient-checkpointing`` recomputes activations in backward (LoRA models too).
Data the user brings is used whole unless ``--max-train-samples`` says otherwise.

Raises UsageError (before any training) for unreadable data, missing columns, label
problems, a model that is encoder-decoder or broken, LoRA target modules the model does
not have, a saved LoRA directory given for training, and --eval-only on a model without
a fine-tuned head.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from mixft.amp.precision import Precision
from mixft.atomic import atomic_directory
from mixft.config.run_config import RunConfig, describe_setting
from mixft.data.loaders import run_loaders
from mixft.data.shape_ladder import batch_shape_ladder, shapes_name
from mixft.errors import UsageError
from mixft.metrics.task import task_metrics
from mixft.recipe import TrainerParts
from mixft.train.optim import adamw_factory
from mixft.train.schedules import build_scheduler_factory

NAME = "text-classification"
LORA_OPTIONS = ("lora", "lora_r", "lora_alpha", "lora_dropout", "lora_target_modules")
# Length-grouped batching (mixft.data.batching), read by run_loaders below.
BATCHING_OPTIONS = ("group_by_length", "length_group_size", "batch_shapes")
OPTIMISATION_OPTIONS = (
    "lr_scheduler",
    "lr_cycles",
    "warmup_ratio",
    "warmup_steps",
    "weight_decay",
    "label_smoothing",
    "class_weights",
    "gradient_checkpointing",
)
USES = frozenset(
    {
        "model",
        "train_file",
        "validation_file",
        "dataset",
        "dataset_config",
        "eval_split",
        "task_kind",
        "text_column",
        "text_pair_column",
        "label_column",
        "validation_split",
        "max_train_samples",
        "max_eval_samples",
        "num_workers",
        "max_length",
        *LORA_OPTIONS,
        *OPTIMISATION_OPTIONS,
        *BATCHING_OPTIONS,
    }
)
# Hugging Face's own defaults for fine-tuning (run_glue.py / TrainingArguments): 3 epochs at 5e-5.
DEFAULTS = {
    "model": "bert-base-uncased",
    "epochs": 3,
    "batch_size": 32,
    "lr": 5e-5,
    "max_grad_norm": 1.0,
    # Exact shapes until the ladder is measured to pay in a whole bf16 step on a CPU with AMX
    # (--batch-shapes auto/ladder opt in; docs/benchmarks.md, "Shapes that repeat"): on AVX2 it costs fp32 4 %.
    "batch_shapes": "exact",
}
# Tokens per example unless --max-length says otherwise, capped at what the model reads
# (a user's --max-length past that is refused by the model check instead).
DEFAULT_MAX_LENGTH = 128


@dataclass
class Prepared:
    model_path: str
    model_description: str
    data: object  # mixft.data.user_data.TextData
    tokenizer: object
    train: object  # tokenised datasets.Dataset (Arrow)
    eval: object
    notices: list
    lora_dir: str | None = None  # --model is a saved LoRA directory (adapters + head); model_path is its base
    class_weights: torch.Tensor | None = None  # --class-weights balanced, from the training labels
    max_length: int | None = None  # tokens per example the data was cut to (--predict-file cuts its rows the same)


def prepare(cfg: RunConfig) -> Prepared:
    """Resolve and check the data and the model, tokenise once (cached by ``datasets``).

    ``--eval-only``: the saved model first, since its labels say what the data's label names
    mean (by name, in any order); no training data is needed then.
    """
    from mixft.data.synthetic.stand_ins import stand_in_for
    from mixft.data.user_data import load_text_data

    model = check_run_model(cfg) if cfg.eval_only else None
    data = load_text_data(
        train_file=cfg.train_file,
        validation_file=cfg.validation_file,
        dataset=cfg.dataset,
        dataset_config=cfg.dataset_config,
        eval_split=cfg.eval_split,
        task_kind=cfg.task_kind,
        text_column=cfg.text_column,
        text_pair_column=cfg.text_pair_column,
        label_column=cfg.label_column,
        validation_split=cfg.validation_split,
        max_train_samples=cfg.max_train_samples,
        max_eval_samples=cfg.max_eval_samples,
        seed=cfg.seeds[0],
        # Offline, glue/sst2, glue/mrpc and ag_news fall back to mixft's generated stand-ins (with a notice).
        stand_in=stand_in_for(cfg.dataset, cfg.dataset_config),
        model_labels=model.labels if model else None,
    )
    return prepare_model_and_tokens(cfg, data, model)


@dataclass
class CheckedRunModel:
    """The model of a run, checked (``check_run_model``): what tokenising and building need."""

    path: str  # what from_pretrained gets (a LoRA directory's base model)
    description: str
    notice: str | None
    checked: object  # mixft.models.check.CheckedModel
    tokenizer: object
    source: str  # "--model X" for messages
    lora_dir: str | None
    labels: object = None  # --eval-only: the saved model's mixft.data.labels.ModelLabels


def check_run_model(cfg: RunConfig) -> CheckedRunModel:
    """Resolve and check ``--model`` (LoRA directories included); ``--eval-only``: load the saved
    model once, refuse one without a fine-tuned head, and read its label space."""
    from mixft.models.check import check_model
    from mixft.models.classifiers import pad_for_classification
    from mixft.models.hub import resolve_model
    from mixft.models.lora import LORA_FILE, check_lora_targets, is_lora_directory, lora_base_model

    options = lora_options(cfg) if cfg.lora else None  # "--lora-target-modules q,,v" refused before any reading
    source = f"--model {cfg.model}"
    # A --save-model directory of a LoRA run holds adapters + head only: the weights
    # underneath come from the base model it records.
    lora_dir = str(Path(cfg.model).expanduser().resolve()) if is_lora_directory(Path(cfg.model).expanduser()) else None
    if lora_dir and not cfg.eval_only:
        raise UsageError(
            f"{source} is a saved LoRA adapter (on {lora_base_model(lora_dir)}): evaluate it with "
            "--eval-only, or train from its base model with --lora"
        )
    base = lora_base_model(lora_dir) if lora_dir else cfg.model
    try:
        resolved = resolve_model(base)
    except UsageError as err:
        if not lora_dir:
            raise
        # The path in the message is the one the adapters' file records, not one the user typed.
        raise UsageError(
            f"--model {cfg.model}: its LoRA adapters sit on the base model {LORA_FILE} records, which cannot be "
            f"loaded ({err}); put the base model back there"
        ) from None
    if lora_dir:
        source = f"--model {cfg.model} (LoRA on base model {base})"
    checked = check_model(
        resolved.path,
        max_length=cfg.max_length,
        source=source,
        decoders=True,
        max_length_shown=describe_setting(cfg, "max_length"),
    )
    # Before tokenising: a decoder's batches are padded (and pooled) as its tokenizer now says.
    tokenizer = pad_for_classification(checked.tokenizer, checked.config, source)
    if options:  # a target name the model lacks is refused now, not after tokenising
        check_lora_targets(checked.config, options)
    labels = _check_fine_tuned(cfg, resolved.path, tokenizer, lora_dir) if cfg.eval_only else None
    description = f"{cfg.model} (LoRA on {resolved.description})" if lora_dir else resolved.description
    return CheckedRunModel(
        path=resolved.path,
        description=description,
        notice=resolved.notice,
        checked=checked,
        tokenizer=tokenizer,
        source=source,
        lora_dir=lora_dir,
        labels=labels,
    )


def prepare_model_and_tokens(cfg: RunConfig, data, model: CheckedRunModel | None = None) -> Prepared:
    """The model half of ``prepare`` (shared with the glue recipe): check (unless ``model`` is
    already checked: ``check_run_model``), tokenise."""
    from mixft.data.tokenize import tokenize_text_data
    from mixft.models.classifiers import refuse_for_regression

    if cfg.lora:
        lora_options(cfg)  # "--lora-target-modules q,,v" refused before the model is read
    refuse_for_regression(data.task.kind == "regression", cfg.label_smoothing, cfg.class_weights)
    model = model or check_run_model(cfg)
    checked, tokenizer, lora_dir = model.checked, model.tokenizer, model.lora_dir
    max_length = cfg.max_length or min(DEFAULT_MAX_LENGTH, checked.max_length or DEFAULT_MAX_LENGTH)
    train, evaluation = tokenize_text_data(data, tokenizer, max_length)
    weights = None
    if cfg.class_weights == "balanced":
        from mixft.train.schedules import class_weights_balanced

        # numpy format: the label column in one array, not a Python object per row.
        weights = class_weights_balanced(torch.as_tensor(train.with_format("numpy")["labels"][:]), data.task.num_labels)
    return Prepared(
        model_path=model.path,
        model_description=model.description,
        data=data,
        tokenizer=tokenizer,
        train=train,
        eval=evaluation,
        notices=[n for n in (model.notice, data.notice) if n],
        lora_dir=lora_dir,
        class_weights=weights,
        max_length=max_length,
    )


def lora_options(cfg: RunConfig):
    """``--lora-*`` as a checked :class:`mixft.models.lora.LoraOptions`."""
    from mixft.models.lora import LoraOptions

    return LoraOptions(
        r=cfg.lora_r, alpha=cfg.lora_alpha, dropout=cfg.lora_dropout, target_modules=cfg.lora_target_modules
    )


def _load_saved(cfg: RunConfig, path: str, tokenizer, lora_dir: str | None, seed: int):
    """The model --eval-only evaluates: a --save-model directory, or a LoRA one on its base."""
    from mixft.models.classifiers import load_classifier
    from mixft.models.lora import load_lora_classifier

    if lora_dir:
        return load_lora_classifier(lora_dir, base_model=path, seed=seed, tokenizer=tokenizer)
    return load_classifier(path, seed=seed, source=f"--model {cfg.model}", tokenizer=tokenizer)


def _check_fine_tuned(cfg: RunConfig, path: str, tokenizer, lora_dir: str | None):
    """The saved model's label space (``ModelLabels``); a model without a fine-tuned head is refused."""
    from mixft.data.held_out import read_held_out
    from mixft.data.labels import ModelLabels

    # --eval-only on a bare encoder would report a random head's accuracy: refuse it.
    model = _load_saved(cfg, path, tokenizer, lora_dir, seed=0)
    if model.untrained:
        raise UsageError(
            f"--eval-only --model {cfg.model}: the model has no fine-tuned classification head, so its "
            "scores would be a random head's; pass a directory written by --save-model"
        )
    # The data's labels are matched to these by name (mixft.data.labels.labels_for_model); a
    # --validation-split evaluates on the rows its training held out (mixft.data.held_out).
    names = None if model.labels is None else tuple(model.labels)
    return ModelLabels(names, f"--model {cfg.model}", held_out=read_held_out(cfg.model))


def describe_task(task) -> str:
    """For the run header: ``"classification, 4 labels (Business, Sci/Tech, Sports, World), text"``."""
    texts = " + ".join(task.text_columns)
    if task.kind == "regression":
        return f"regression on {task.label_column!r}, texts {texts}"
    names = ", ".join(task.label_names[:8]) + (", ..." if len(task.label_names) > 8 else "")
    # Binary F1 scores label id 1: the name that sorts second (or the dataset's second class), said here.
    scored = f"; F1 scores {task.label_names[1]!r}" if task.num_labels == 2 and len(task.label_names) == 2 else ""
    return f"classification, {task.num_labels} labels ({names}), texts {texts}{scored}"


def length_group_size(cfg: RunConfig) -> int:
    """Batches per length group of the training sampler: 1 (every batch drawn at random, the default) unless
    ``--group-by-length``, which pads less but cost accuracy at small budgets (docs/benchmarks.md)."""
    return cfg.length_group_size if cfg.group_by_length else 1


def build(cfg: RunConfig, prepared: Prepared, precision: Precision, device: torch.device, seed: int) -> TrainerParts:
    from mixft.models.classifiers import enable_gradient_checkpointing, load_classifier, task_loss
    from mixft.models.lora import apply_lora, trainable_parameters

    task = prepared.data.task
    if cfg.eval_only:  # the saved model brings its own head and labels (checked in prepare)
        model = _load_saved(cfg, prepared.model_path, prepared.tokenizer, prepared.lora_dir, seed)
    else:
        regression = task.kind == "regression"
        model = load_classifier(
            prepared.model_path,
            seed=seed,
            labels=None if regression else list(task.label_names),
            regression=regression,
            source=f"--model {cfg.model}",
            tokenizer=prepared.tokenizer,
        )
        if cfg.lora:
            model = apply_lora(model, lora_options(cfg), seed=seed)
        if cfg.gradient_checkpointing:
            enable_gradient_checkpointing(model)
    trainable, total = trainable_parameters(model)
    shapes = batch_shape_ladder(cfg.batch_shapes, precision, device, max_length=prepared.max_length)
    train_loader, eval_loader = run_loaders(
        prepared.train,
        prepared.eval,
        prepared.tokenizer,
        cfg.batch_size,
        device=device,
        seed=seed,
        num_workers=cfg.num_workers,
        group_size=length_group_size(cfg),
        shapes=shapes,
    )
    return TrainerParts(
        model=model,
        optimizer=adamw_factory(cfg.lr, device, cfg.weight_decay, precision=precision),
        # An --eval-only model's own task decides (the loss options are refused there: nothing trains).
        loss_fn=task_loss(model.is_regression, cfg.label_smoothing, prepared.class_weights),
        train_loader=train_loader,
        eval_loader=eval_loader,
        lr_scheduler=build_scheduler_factory(cfg.lr_scheduler, cfg.warmup_ratio, cfg.warmup_steps, cfg.lr_cycles),
        predict_fn=model.predict_fn,
        metric=task_metrics(task.kind, task.num_labels, task.glue_task),
        run_info={
            "model": prepared.model_description,
            "dataset": prepared.data.description,
            "task": describe_task(task),
            "batch_shapes": shapes_name(shapes),
            "parameters": {"trainable": trainable, "total": total},
            "lora": describe_lora(model),
            "labels": {
                "kind": task.kind,
                "names": list(task.label_names) if task.kind == "classification" else None,
                "text_columns": list(task.text_columns),
                "label_column": task.label_column,
                "glue_task": task.glue_task,
            },
        },
    )


def describe_lora(model) -> dict | None:
    """``{"r", "alpha", "dropout", "target_modules"}`` of a LoRA model (None for any other)."""
    from mixft.models.lora import LoraClassifier

    if not isinstance(model, LoraClassifier):
        return None
    config = model.model.peft_config["default"]
    targets = config.target_modules
    short = sorted({name.rpartition(".")[2] for name in targets}) if not isinstance(targets, str) else [targets]
    return {"r": config.r, "alpha": config.lora_alpha, "dropout": config.lora_dropout, "target_modules": short}


def save_model(model, prepared: Prepared, directory: Path) -> None:
    """Model (its config carries id2label/label2id; a LoRA model: adapters + head) + tokenizer, and the rows a
    --validation-split held out (what --eval-only evaluates it on), swapped in whole."""
    from mixft.data.held_out import write_held_out

    held_out = getattr(prepared.data, "held_out", None)
    with atomic_directory(directory) as staging:
        model.save_pretrained(staging)
        prepared.tokenizer.save_pretrained(staging)
        if held_out is not None:
            write_held_out(staging, held_out)
