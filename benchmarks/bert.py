"""The bert-sst2 pieces the BERT benchmarks share: one preparation, the recipe's parts, one evaluator.

Everything goes through the ``bert-sst2`` recipe's protocol (``get_recipe``, ``prepare``,
``build``): the benchmarks measure the model, tokenisation, loaders, optimizer and
schedule that ``finetune.py`` trains, and copy none of the recipe's constants. A peer
framework gets its optimizer and scheduler from the same factories (``make_optimizer``,
``make_scheduler``), so what is held equal is equal by construction.

Usage::

    bert = prepare_bert(BertSetup(train_samples=512, max_length=128))
    parts = bert.recipe.build(bert.cfg, bert.prepared, precision, device, seed=0)
    optimizer = make_optimizer(parts, parts.model)
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch

from mixft.amp.precision import Precision
from mixft.config.run_config import RunConfig
from mixft.data.packing import PackingCollator, samples_in
from mixft.recipe import TrainerParts, get_recipe

RECIPE = "bert-sst2"


@dataclass
class BertSetup:
    """What to fine-tune: model name or path, data sizes, sequence cap, batch, seed."""

    model: str = "bert-base-uncased"  # offline: resolves to the shipped MiniLM (mixft.models.hub)
    train_samples: int = 1000
    eval_samples: int = 500
    max_length: int = 128
    batch_size: int = 32
    epochs: int = 1
    lr: float = 2e-5
    max_grad_norm: float = 1.0
    seed: int = 0
    device: str = "auto"
    data_dir: str | None = None

    def run_config(self, **overrides) -> RunConfig:
        values = dict(
            recipe=RECIPE,
            model=self.model,
            data_dir=self.data_dir,
            max_train_samples=self.train_samples,
            max_eval_samples=self.eval_samples,
            max_length=self.max_length,
            batch_size=self.batch_size,
            epochs=self.epochs,
            lr=self.lr,
            max_grad_norm=self.max_grad_norm,
            seeds=[self.seed],
            device=self.device,
        )
        values.update(overrides)
        return RunConfig(**values)


@dataclass
class PreparedBert:
    recipe: ModuleType
    cfg: RunConfig  # with the recipe's defaults filled in
    prepared: Any  # whatever the recipe's prepare returned; handed back to its build, never read here


def prepare_bert(setup: BertSetup, **overrides) -> PreparedBert:
    """Resolve model and data, tokenise once (the recipe's ``prepare``)."""
    recipe = get_recipe(RECIPE)
    cfg = setup.run_config(**overrides).with_defaults(recipe.DEFAULTS).validate()
    return PreparedBert(recipe, cfg, recipe.prepare(cfg))


def make_optimizer(parts: TrainerParts, model: torch.nn.Module) -> torch.optim.Optimizer:
    """The recipe's optimizer for ``model``'s parameters (its factory, or the optimizer it built).

    Build it after the model is on its device (the optimizer's state follows the tensors).
    """
    opt = parts.optimizer
    return opt if isinstance(opt, torch.optim.Optimizer) else opt(model.parameters())


def make_scheduler(parts: TrainerParts, optimizer: torch.optim.Optimizer, total_steps: int):
    """The recipe's learning-rate schedule over ``total_steps`` optimizer steps (None if it has none)."""
    sched = parts.lr_scheduler
    if sched is None or not callable(sched) or hasattr(sched, "step"):
        return sched
    return sched(optimizer, total_steps)


def optimizer_groups(optimizer: torch.optim.Optimizer, model: torch.nn.Module) -> list[dict[str, Any]]:
    """Each param group's weight decay, initial lr and parameter names (sorted): what a run optimised how.

    Two frameworks fed the same factory give equal lists; a peer that decays every
    parameter (or forgets the recipe's no-decay group) does not.
    Usage: ``optimizer_groups(opt, model) == optimizer_groups(reference_opt, reference_model)``
    """
    names = {id(p): n for n, p in model.named_parameters()}
    return [
        {
            "weight_decay": group.get("weight_decay", 0.0),
            "lr": group.get("initial_lr", group["lr"]),  # schedulers move "lr"; "initial_lr" stays
            "params": sorted(names.get(id(p), "?") for p in group["params"]),
        }
        for group in optimizer.param_groups
    ]


def pad_description(collate) -> str:
    """How a collate function pads: ``"x8"`` style multiples, ``"longest"``, or ``"packed"`` (none computed)."""
    multiple = getattr(collate, "pad_to_multiple_of", None)
    if isinstance(collate, PackingCollator):
        return f"packed rows x{multiple}" if multiple else "packed"
    return f"x{multiple}" if multiple else "longest"


def padding_collator(collate):
    """The padding collator under a ``PackingCollator`` (a peer's model takes padded batches); else ``collate``."""
    return collate.padding_collator if isinstance(collate, PackingCollator) else collate


def packing_collator(collate) -> PackingCollator:
    """A collator that packs as mixft does: ``collate`` itself when it packs, else it wrapped in a
    ``PackingCollator`` (padding id from its tokenizer: ``DataCollatorWithPadding.tokenizer``)."""
    if isinstance(collate, PackingCollator):
        return collate
    return PackingCollator(collate, getattr(getattr(collate, "tokenizer", None), "pad_token_id", None))


def sampling_description(cfg: RunConfig) -> str:
    """mixft's training batches in words: ``"random batches"`` or ``"length-grouped batches (50 per group)"``."""
    if cfg.group_by_length:
        return f"length-grouped batches ({cfg.length_group_size} per group)"
    return "random batches"


@torch.inference_mode()
def evaluate_accuracy(model: torch.nn.Module, loader, predict_fn, precision: Precision, device: torch.device) -> float:
    """Accuracy of ``model`` over ``loader`` under ``precision``'s autocast, labels from ``predict_fn``.

    One evaluator (the recipe's eval loader and ``predict_fn``) for every framework, so
    accuracy differences come from training alone.
    """
    was_training = model.training
    model.eval()
    correct = total = 0
    dtype = precision.autocast_dtype or torch.float32
    try:
        for batch in loader:
            batch = {k: v.to(device) for k, v in batch.items()}
            labels = batch.pop("labels")
            with torch.autocast(device.type, dtype=dtype, enabled=precision.autocast_enabled):
                outputs = model(**batch)
            correct += int((predict_fn(outputs).long() == labels.long()).sum())
            total += int(labels.numel())
    finally:
        model.train(was_training)
    return correct / total if total else float("nan")


class WorkCounter:
    """Counts what a model really computed while training: samples, real and padded tokens.

    A forward pre-hook on the model: identical in every framework, so padding differences
    between their collators/samplers show up as a different ``padded_tokens``. The sums
    stay on the device until ``totals()``.

    Usage: ``with WorkCounter(model) as work: train(...); work.totals()["real_tokens"]``
    """

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self._samples: list[int] = []
        self._real: list[torch.Tensor] = []
        self._padded: list[int] = []
        self._handle = None

    def __enter__(self) -> WorkCounter:
        self._handle = self.model.register_forward_pre_hook(self._count, with_kwargs=True)
        return self

    def __exit__(self, *exc) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def _count(self, module, args, kwargs) -> None:
        if not module.training:
            return
        ids = kwargs.get("input_ids", args[0] if args else None)
        mask = kwargs.get("attention_mask", args[1] if len(args) > 1 else None)
        if ids is None:
            return
        self._samples.append(samples_in({"input_ids": ids, **kwargs}))  # packed rows hold several sentences
        self._padded.append(int(ids.numel()))
        if mask is not None:
            self._real.append(mask.sum())

    def totals(self) -> dict[str, int]:
        real = int(torch.stack(self._real).sum()) if self._real else sum(self._padded)
        return {
            "forwards": len(self._samples),
            "samples": sum(self._samples),
            "real_tokens": real,
            "padded_tokens": sum(self._padded),
        }


def encoder_config(model: torch.nn.Module):
    """The Hugging Face config of the first submodule that has one (the BERT encoder)."""
    for module in model.modules():
        config = getattr(module, "config", None)
        if config is not None and hasattr(config, "hidden_size"):
            return config
    raise ValueError(f"{type(model).__name__} holds no module with a Hugging Face config")


def bert_matmul_flops(config, shapes) -> int:
    """Matmul FLOPs of one training step (forward + backward) of a ``BertClassifier``.

    ``shapes``: per micro-batch of the step, its ``(rows, length)`` (a padded batch: one sentence
    per row) or ``(rows, length, sentences)`` (a packed batch: ``mixft.data.packing``). Counted, as
    ``BertClassifier`` computes them (``mixft.models.first_token_encoder``): every Linear of
    every layer but the last on every computed token (rows x length), with the attention products
    ``QK^T`` and ``AV`` over each row; in the last layer the keys and values of every token and the
    rest (query, attention output, feed-forward, ``QK^T`` and ``AV``) for the sentences' [CLS]
    tokens only; the pooler and classifier on the [CLS] tokens. 2 FLOPs per multiply-add,
    backward = 2 x forward (input and weight gradients). Not counted: embeddings (lookups),
    softmax, LayerNorm, GELU, dropout, the optimizer (no matmuls).
    """
    h, inter, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    per_token = 4 * h * h + 2 * h * inter  # Q, K, V, O + the two FFN matrices
    total = 0
    for shape in shapes:
        rows, length = shape[0], shape[1]
        sentences = shape[2] if len(shape) > 2 else rows  # one [CLS] each
        tokens = rows * length
        linear = (layers - 1) * per_token * tokens + 2 * h * h * tokens  # the last layer: K and V of every token
        linear += (per_token - 2 * h * h) * sentences + (h * h + h) * sentences  # its Q, O, FFN; pooler, head
        attention = (layers - 1) * 2 * rows * length * length * h + 2 * sentences * length * h
        total += 2 * 3 * (linear + attention)
    return total
