"""The bert-sst2 pieces the BERT benchmarks share: one preparation, one evaluator, one counter.

Everything goes through the ``bert-sst2`` recipe (looked up in the registry), so the
benchmarks measure the model, tokenisation and loaders that ``finetune.py`` trains.

Usage::

    setup = prepare_bert(BertSetup(train_samples=512, max_length=128))
    model = setup.recipe.build_model(setup.prepared.model_path, seed=0)
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

import torch

from mixft.config import RunConfig
from mixft.data.text import make_loader
from mixft.precision import Precision
from mixft.registry import get_recipe

RECIPE = "bert-sst2"


@dataclass
class BertSetup:
    """What to fine-tune: model name or path, data sizes, sequence cap, batch, seed."""

    model: str = "bert-base-uncased"  # offline: resolves to the shipped MiniLM (mixft.hub)
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
            recipe=RECIPE, model=self.model, data_dir=self.data_dir, max_train_samples=self.train_samples,
            max_eval_samples=self.eval_samples, max_length=self.max_length, batch_size=self.batch_size,
            epochs=self.epochs, lr=self.lr, max_grad_norm=self.max_grad_norm, seeds=[self.seed], device=self.device,
        )
        values.update(overrides)
        return RunConfig(**values)


@dataclass
class PreparedBert:
    recipe: ModuleType
    cfg: RunConfig  # with the recipe's defaults filled in
    prepared: object  # the recipe's Prepared: tokenizer, tokenised examples, descriptions


def prepare_bert(setup: BertSetup, **overrides) -> PreparedBert:
    """Resolve model and data, tokenise once (the recipe's ``prepare``)."""
    recipe = get_recipe(RECIPE)
    cfg = setup.run_config(**overrides).with_defaults(recipe.DEFAULTS).validate()
    return PreparedBert(recipe, cfg, recipe.prepare(cfg))


def pad_multiple(precision: Precision, device: torch.device) -> int | None:
    """The recipe's padding policy (multiples of 8 under mixed precision on CUDA, else the
    batch's longest): every framework in a comparison pads the way mixft's recipe does."""
    return get_recipe(RECIPE).pad_multiple(precision, device)


def eval_loader(bert: PreparedBert, precision: Precision, device: torch.device, batch_size: int | None = None):
    p = bert.prepared
    return make_loader(p.eval_examples, p.tokenizer, batch_size or bert.cfg.batch_size * 2, shuffle=False,
                       pad_to_multiple_of=pad_multiple(precision, device))


@torch.inference_mode()
def evaluate_accuracy(model: torch.nn.Module, loader, precision: Precision, device: torch.device) -> float:
    """Accuracy of a ``BertClassifier`` (logit > 0) over ``loader`` under ``precision``'s autocast.

    One evaluator for every framework, so accuracy differences come from training alone.
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
                logits = model(**batch)
            correct += int(((logits > 0).long() == labels.long()).sum())
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

    def __enter__(self) -> "WorkCounter":
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
        self._samples.append(int(ids.shape[0]))
        self._padded.append(int(ids.numel()))
        if mask is not None:
            self._real.append(mask.sum())

    def totals(self) -> dict[str, int]:
        real = int(torch.stack(self._real).sum()) if self._real else sum(self._padded)
        return {"forwards": len(self._samples), "samples": sum(self._samples), "real_tokens": real,
                "padded_tokens": sum(self._padded)}


def bert_matmul_flops(config, shapes) -> int:
    """Matmul FLOPs of one training step (forward + backward) of a ``BertClassifier``.

    ``shapes``: the padded ``(batch, length)`` of each micro-batch in the step. Counted:
    every encoder Linear on every (padded) token, the attention products ``QK^T`` and
    ``AV``, the pooler and classifier on the [CLS] tokens; 2 FLOPs per multiply-add,
    backward = 2 x forward (input and weight gradients). Not counted: embeddings
    (lookups), softmax, LayerNorm, GELU, dropout, the optimizer (no matmuls).
    """
    h, inter, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    per_token = layers * (4 * h * h + 2 * h * inter)  # Q, K, V, O + the two FFN matrices
    total = 0
    for batch, length in shapes:
        linear = per_token * batch * length + (h * h + h) * batch  # + pooler and classifier on [CLS]
        attention = layers * 2 * batch * length * length * h  # QK^T and AV, all heads together
        total += 2 * 3 * (linear + attention)
    return total
