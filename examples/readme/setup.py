"""The example's budget (:class:`ExampleConfig`) and what both loops share (:func:`prepare`).

Usage::

    prepared = prepare(ExampleConfig(max_train_samples=200))   # UsageError on bad input, before any work
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from mixft.amp.precision import Precision, precision_notice, resolve_device, resolve_precision
from mixft.errors import UsageError

README_EPOCHS = 5  # what the README trains for; the default here is smaller, see ExampleConfig
README_LR = 2e-5


@dataclass
class ExampleConfig:
    """The example's budget. The README trains 5 epochs on all of SST-2 (67k sentences) at
    lr 2e-5: hours on a CPU. The default (1000 sentences, 1 epoch, lr 1e-4, both
    precisions) takes minutes on a 2-core CPU; ``--epochs 5 --lr 2e-5`` with the full data
    is the README's run, for a GPU."""

    model: str = "bert-base-uncased"  # resolved offline-first (mixft.models.hub.resolve_model)
    data_dir: str | None = None  # GLUE layout train.tsv / dev.tsv; default: SST-2 or generated
    max_train_samples: int = 1000
    max_eval_samples: int = 500
    epochs: int = 1  # the README's 5 is --epochs 5
    batch_size: int = 32
    # The README's 2e-5 suits 5 epochs of all SST-2; in the default 32 steps it barely
    # moves (measured on the shipped MiniLM: accuracy 0.52 at 2e-5, 0.68 at 1e-4).
    lr: float = 1e-4
    max_length: int = 128  # tokens per sentence; longer ones are truncated
    seed: int = 0  # same initial head, data order and dropout draws for both loops
    device: str = "auto"
    amp: str = "auto"  # "auto": the device's AMP (fp16 on CUDA, bf16 on CPU), or fp16 / bf16

    def validate(self) -> ExampleConfig:
        for name in ("max_train_samples", "max_eval_samples", "epochs", "batch_size", "max_length"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be a positive integer, got {value!r}")
        if self.max_length < 8:
            raise UsageError(f"--max-length must be at least 8 tokens, got {self.max_length}")
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            raise UsageError(f"--lr must be a positive finite number, got {self.lr!r}")
        if self.amp not in ("auto", "fp16", "bf16"):
            raise UsageError(f"--amp must be auto, fp16 or bf16, got {self.amp!r}")
        return self

    def precisions(self, device: torch.device) -> tuple[Precision, Precision]:
        """(fp32, the AMP precision) for ``device``; UsageError where the device cannot run it."""
        return resolve_precision("fp32", device), resolve_precision(
            "amp" if self.amp == "auto" else self.amp, device, policy=False
        )  # a comparison measures AMP


@dataclass
class Prepared:
    """Everything loaded once, before any training, shared by both runs."""

    cfg: ExampleConfig
    device: torch.device
    fp32: Precision
    amp: Precision
    encoder: nn.Module  # pretrained weights, fp32; each run trains a deep copy
    tokenizer: Any
    train_examples: Any  # tokenised datasets.Dataset (Arrow), float 0./1. labels
    eval_examples: Any
    model_description: str
    dataset_description: str
    notices: list[str]


def prepare(cfg: ExampleConfig) -> Prepared:
    """Validate ``cfg``, resolve device, precisions, model and data; tokenise. UsageError on bad input.

    Usage: ``prepared = prepare(ExampleConfig(max_train_samples=200))``
    """
    from transformers import AutoModel, AutoTokenizer
    from transformers.utils import logging as hf_logging

    from mixft.data.tokenize import tokenize_text_data
    from mixft.models.hub import resolve_model
    from recipes.bert_sst2 import load_sst2

    cfg.validate()
    device = resolve_device(cfg.device)
    fp32, amp = cfg.precisions(device)
    # Data first: a bad --data-dir fails in milliseconds, before a model is looked up. The
    # same data path as the bert-sst2 recipe (GLUE dir, hub or cache, else generated).
    data = load_sst2(
        cfg.data_dir, max_train_samples=cfg.max_train_samples, max_eval_samples=cfg.max_eval_samples, seed=cfg.seed
    )
    resolved = resolve_model(cfg.model)
    hf_logging.disable_progress_bar()  # the per-tensor "Loading weights" bar
    try:
        tokenizer = AutoTokenizer.from_pretrained(resolved.path)
        encoder = AutoModel.from_pretrained(resolved.path, dtype=torch.float32)  # fp32 master weights
    except (OSError, ValueError) as exc:
        raise UsageError(f"--model {cfg.model}: cannot load a tokenizer and encoder ({exc})") from None
    if getattr(getattr(encoder, "config", None), "hidden_size", None) is None:
        raise UsageError(f"--model {cfg.model}: not an encoder with a hidden_size (a BERT-like model)")
    notices = [n for n in (resolved.notice, data.notice, precision_notice(amp, device)) if n]
    train, evaluation = tokenize_text_data(data, tokenizer, cfg.max_length, float_labels=True)
    return Prepared(
        cfg=cfg,
        device=device,
        fp32=fp32,
        amp=amp,
        encoder=encoder,
        tokenizer=tokenizer,
        # The README's loops take plain batches: the lengths column is for mixft's length grouping.
        train_examples=train.remove_columns(["lengths"]),
        eval_examples=evaluation.remove_columns(["lengths"]),
        model_description=resolved.description,
        dataset_description=data.description,
        notices=notices,
    )
