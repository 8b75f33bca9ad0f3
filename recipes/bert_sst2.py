"""bert-sst2: the classic BERT sentence classifier fine-tuned on SST-2 sentiment.

Model: BERT encoder (``AutoModel``) -> dropout 0.1 -> Linear(hidden_size, 1) -> sigmoid,
trained with binary cross-entropy and AdamW (linear warm-up then decay). The classic
lr is 2e-5 (``--lr 2e-5``); the default budget uses 5e-5, see DEFAULTS. The optimisation
options change that: ``--lr-scheduler``, ``--warmup-ratio``/``--warmup-steps``,
``--weight-decay``, ``--label-smoothing`` and ``--class-weights balanced`` (both on the
BCE: smoothed targets, ``pos_weight``), ``--gradient-checkpointing`` (on the encoder).

Features: offline-first model and data (hub, cache, --data-dir, or the shipped MiniLM
BERT and mixft's generated sentiment set), length-grouped dynamic padding (multiples
of 8 on CUDA, for every precision alike), accuracy through a shipped `evaluate` metric.
Packed random batches by default (``--pack-sequences``) for the encoder families that pack
(``mixft.models.packed.PACKING_TYPES``); any other family's batches are padded, with a notice.

Raises UsageError (before any training) for missing/malformed data, a bad model path, or
``--pack-sequences`` asked for a model whose family does not pack.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from torch import nn

from mixft.amp.precision import Precision
from mixft.atomic import atomic_directory
from mixft.config.run_config import RunConfig, describe_setting, is_recipe_default
from mixft.data.loaders import run_loaders
from mixft.data.shape_ladder import batch_shape_ladder, shapes_name
from mixft.data.synthetic.stand_ins import SST2
from mixft.data.user_data import TextData, load_glue_data, load_text_data
from mixft.errors import UsageError
from mixft.log import logger
from mixft.metrics import load_metric
from mixft.models.classifiers import BertClassifier, logits_to_labels
from mixft.models.packed import PACKING_TYPES, packs
from mixft.recipe import TrainerParts
from mixft.train.optim import adamw_factory
from mixft.train.schedules import build_scheduler_factory

NAME = "bert-sst2"
# The per-recipe options this recipe reads (mixft.config.run_config refuses the others).
USES = frozenset(
    {
        "model",
        "data_dir",
        "max_train_samples",
        "max_eval_samples",
        "num_workers",
        "max_length",
        "lr_scheduler",
        "lr_cycles",
        "warmup_ratio",
        "warmup_steps",
        "weight_decay",
        "label_smoothing",
        "class_weights",
        "gradient_checkpointing",
        "group_by_length",
        "length_group_size",
        "pack_sequences",
        "batch_shapes",
    }
)
# The default budget finishes in minutes on a 2-core CPU (see README). Its lr is 5e-5,
# not the classic 2e-5: 126 steps at 2e-5 leave the shipped MiniLM underfit (measured
# here, bf16, seed 0: accuracy 0.679 at 2e-5 vs 0.982 at 5e-5 on the generated set).
DEFAULTS = {
    "model": "bert-base-uncased",
    "epochs": 2,
    "batch_size": 32,
    "lr": 5e-5,
    "max_grad_norm": 1.0,
    "max_length": 128,
    # Random batches without their padding: accuracy within noise of Trainer's default random sampling,
    # at about the cost per real token of length-grouped batches (docs/benchmarks.md, "Packing").
    "pack_sequences": True,
    # Exact shapes until the ladder is measured to pay in a whole bf16 step on a CPU with AMX
    # (--batch-shapes auto/ladder opt in; docs/benchmarks.md, "Shapes that repeat"): on AVX2 it costs fp32 4 %.
    "batch_shapes": "exact",
}
# The quick demo budget: the size of mixft's generated set when no real data is found.
# Data the user brings (--data-dir, GLUE from the cache or hub) is used whole unless
# --max-train-samples / --max-eval-samples say otherwise.
DEMO_TRAIN_SIZE, DEMO_EVAL_SIZE = 2000, 872
# The offline stand-in for GLUE SST-2, in this recipe's words (the notice the README shows).
STAND_IN = replace(
    SST2,
    label="GLUE SST-2",
    more_data="--data-dir",
    notice="notice: {label} is not reachable or cached; using mixft's generated sentiment set "
    "({train} train / {eval} eval, seed {seed})",
)


@dataclass
class Prepared:
    model_path: str
    model_description: str
    dataset_description: str
    tokenizer: object
    train: object  # tokenised datasets.Dataset (Arrow), labels float 0./1.
    eval: object
    notices: list
    pos_weight: torch.Tensor | None = None  # --class-weights balanced: n_negative / n_positive
    # Options decided once the model is known, {option: value}: the runner applies them to the run's
    # config (header, config.yaml, results.json, --resume's identity) and build() follows them.
    settled: dict = field(default_factory=dict)


def load_sst2(
    data_dir=None,
    *,
    max_train_samples: int | None = None,
    max_eval_samples: int | None = None,
    seed: int = 0,
    hub_timeout: float = 3.0,
) -> TextData:
    """SST-2 for a one-logit sentiment head: ``data_dir`` (GLUE layout), else GLUE SST-2 from the hub
    or the cache, else mixft's generated sentiment set (DEMO sizes unless capped) with a notice.

    Usage: ``data = load_sst2(max_train_samples=500); data.description, data.notice``
    """
    caps = dict(max_train_samples=max_train_samples, max_eval_samples=max_eval_samples, seed=seed)
    if data_dir is not None:
        return load_text_data(data_dir=data_dir, text_column="sentence", label_column="label", **caps)
    return load_glue_data(
        "sst2",
        stand_in=STAND_IN,
        hub_timeout=hub_timeout,
        demo_train_size=DEMO_TRAIN_SIZE,
        demo_eval_size=DEMO_EVAL_SIZE,
        **caps,
    )


def prepare(cfg: RunConfig) -> Prepared:
    """Resolve model and data, read and tokenise everything once, before any training."""
    from mixft.data.tokenize import tokenize_text_data
    from mixft.models.check import check_model
    from mixft.models.hub import resolve_model

    resolved = resolve_model(cfg.model)
    # Broken directories, a missing tokenizer, a decoder, --max-length past the model's
    # positions: one line now instead of a crash (or a silently useless run) later.
    checked = check_model(
        resolved.path,
        max_length=cfg.max_length,
        source=f"--model {cfg.model}",
        max_length_shown=describe_setting(cfg, "max_length"),
    )  # the default is not the user's
    settled, packing_notice = settle_packing(cfg, checked.config)  # before reading any data
    if cfg.eval_only and not (Path(resolved.path) / HEAD_FILE).is_file():
        raise UsageError(
            f"--eval-only --model {cfg.model}: no fine-tuned classifier head ({HEAD_FILE}) there, so "
            "the accuracy would be a random head's; pass a directory written by --save-model"
        )
    data = load_sst2(
        cfg.data_dir, max_train_samples=cfg.max_train_samples, max_eval_samples=cfg.max_eval_samples, seed=cfg.seeds[0]
    )
    tokenizer = checked.tokenizer
    # Float 0./1. labels: the head is one logit trained with binary cross-entropy.
    train, evaluation = tokenize_text_data(data, tokenizer, cfg.max_length, float_labels=True)
    pos_weight = None
    if cfg.class_weights == "balanced":
        from mixft.train.schedules import class_weights_balanced

        # Balanced weights w_c = n / (2 n_c) weigh the two terms of the BCE in the ratio
        # w_1 / w_0 = n_0 / n_1; BCE's pos_weight is that ratio (its overall scale, w_0, is
        # the learning rate's business). numpy format: the labels in one array.
        negative, positive = class_weights_balanced(torch.as_tensor(train.with_format("numpy")["labels"][:]), 2)
        pos_weight = (positive / negative).reshape(1)
    return Prepared(
        model_path=resolved.path,
        model_description=resolved.description,
        dataset_description=data.description,
        tokenizer=tokenizer,
        train=train,
        eval=evaluation,
        notices=[n for n in (resolved.notice, data.notice, packing_notice) if n],
        pos_weight=pos_weight,
        settled=settled,
    )


def settle_packing(cfg: RunConfig, config) -> tuple[dict, str | None]:
    """Whether this model's batches are packed: ``({}, None)`` as asked, or the recipe's default turned off.

    Packing is only exact for the families that pack (``mixft.models.packed.PACKING_TYPES``). For any
    other, the recipe's default (on) becomes ``{"pack_sequences": False}`` with a notice, and a user's
    ``--pack-sequences`` is refused (UsageError), before any data is read.

    Usage: ``settled, notice = settle_packing(cfg, AutoConfig.from_pretrained(path))``
    """
    if not cfg.pack_sequences or packs(config):
        return {}, None
    family, families = config.model_type, ", ".join(PACKING_TYPES)
    if not is_recipe_default(cfg, "pack_sequences"):
        raise UsageError(
            f"--pack-sequences: --model {cfg.model} is a {family} model, and packing is exact only for "
            f"{families} models; pass --no-pack-sequences"
        )
    notice = f"notice: {family} models are not packed (packing is exact only for {families}); batches are padded"
    return {"pack_sequences": False}, None if cfg.eval_only else notice  # eval-only trains no batch


HEAD_FILE = "classifier_head.pt"  # beside a saved encoder: a fine-tuned classifier


def build_model(model_path: str, seed: int) -> BertClassifier:
    """The README's classifier on the resolved encoder; the head's init depends on ``seed`` only.

    A directory written by ``save_model`` also restores the fine-tuned head.
    """
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the per-tensor "Loading weights" bar
    # Seed before loading: weights the checkpoint lacks (a pooler, say) are initialised
    # by from_pretrained, and must be the same in every run of one --compare.
    torch.manual_seed(seed)
    encoder = AutoModel.from_pretrained(model_path, dtype=torch.float32)  # fp32 master weights
    torch.manual_seed(seed)  # the head's init depends on the seed only, not on the encoder
    model = BertClassifier(encoder, dropout=0.1)
    head = Path(model_path) / HEAD_FILE
    if head.is_file():
        model.classifier.load_state_dict(torch.load(head, weights_only=True))
    return model


def save_model(model: BertClassifier, prepared: Prepared, directory: Path) -> None:
    """Encoder + tokenizer (``save_pretrained``) + head, swapped in whole: never half-written."""
    with atomic_directory(directory) as staging:
        model.encoder.save_pretrained(staging)
        prepared.tokenizer.save_pretrained(staging)
        torch.save(model.classifier.state_dict(), staging / HEAD_FILE)


def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    # Not sigmoid + BCELoss: autocast refuses that pair because in fp16 the sigmoid
    # saturates to exactly 0 or 1 and BCELoss then takes log(0). BCEWithLogitsLoss fuses
    # the two into a stable log-sum-exp and autocast runs it in fp32. Same maths.
    return nn.functional.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype))


def make_loss_fn(label_smoothing: float = 0.0, pos_weight: torch.Tensor | None = None):
    """The one-logit BCE with label smoothing and/or a positive-class weight; neither: ``loss_fn`` itself.

    BCE has no ``label_smoothing`` argument: smoothing is done on the targets, towards the
    uniform 0.5 of two classes (y * (1 - s) + 0.5 * s), which is what cross-entropy's
    label smoothing does with two classes. In fp32 with autocast disabled: a smoothed
    target such as 0.95 is not representable in bf16 (0.9492...), and BCE runs in fp32
    under autocast anyway.

    Usage: ``make_loss_fn(0.1, pos_weight=torch.tensor([3.0]))``
    """
    if not label_smoothing and pos_weight is None:
        return loss_fn

    def smoothed_weighted(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        with torch.autocast(logits.device.type, enabled=False):
            targets = labels.float() * (1 - label_smoothing) + 0.5 * label_smoothing
            weight = None if pos_weight is None else pos_weight.to(logits.device)
            return nn.functional.binary_cross_entropy_with_logits(logits.float(), targets, pos_weight=weight)

    return smoothed_weighted


def build(cfg: RunConfig, prepared: Prepared, precision: Precision, device: torch.device, seed: int) -> TrainerParts:
    from mixft.models.classifiers import enable_gradient_checkpointing

    model = build_model(prepared.model_path, seed)
    if cfg.gradient_checkpointing:
        enable_gradient_checkpointing(model)
    shapes = batch_shape_ladder(cfg.batch_shapes, precision, device, max_length=cfg.max_length)
    train_loader, eval_loader = run_loaders(
        prepared.train,
        prepared.eval,
        prepared.tokenizer,
        cfg.batch_size,
        device=device,
        seed=seed,
        num_workers=cfg.num_workers,
        group_size=cfg.length_group_size if cfg.group_by_length else 1,  # 1: random batches
        pack=prepared.settled.get("pack_sequences", cfg.pack_sequences),  # what prepare settled for this model
        shapes=shapes,
    )

    logger.debug("bert-sst2: %d train / %d eval examples", len(prepared.train), len(prepared.eval))
    return TrainerParts(
        model=model,
        optimizer=adamw_factory(cfg.lr, device, cfg.weight_decay, precision=precision),
        loss_fn=make_loss_fn(cfg.label_smoothing, prepared.pos_weight),
        train_loader=train_loader,
        eval_loader=eval_loader,
        lr_scheduler=build_scheduler_factory(cfg.lr_scheduler, cfg.warmup_ratio, cfg.warmup_steps, cfg.lr_cycles),
        predict_fn=logits_to_labels,
        metric=load_metric("accuracy"),
        run_info={
            "model": prepared.model_description,
            "dataset": prepared.dataset_description,
            "batch_shapes": shapes_name(shapes),
        },
    )
