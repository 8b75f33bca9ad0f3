"""What a recipe hands the trainer, and the two-phase recipe protocol.

A recipe module (``recipes/<name>.py``) defines::

    NAME = "bert-sst2"
    DEFAULTS = {"epochs": 2, "batch_size": 32, ...}   # RunConfig fields
    def prepare(cfg: RunConfig) -> Any                 # load + validate data, tokenise: runs once,
                                                       # before any training; bad input -> UsageError
    def build(cfg, prepared, precision, device, seed) -> TrainerParts   # fresh model per run
    def save_model(model, prepared, directory) -> None  # what --save-model writes; --model reads it

``build`` must give identical initial weights and data order for the same seed, so runs
at different precisions are comparable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass
class TrainerParts:
    model: Any
    optimizer: Any  # optimizer or factory f(params) -> optimizer
    loss_fn: Callable
    train_loader: Any
    eval_loader: Any = None
    lr_scheduler: Any = None  # scheduler or factory f(optimizer, total_steps)
    predict_fn: Callable | None = None
    metric: Any = None
    run_info: dict[str, Any] = field(default_factory=dict)  # model / dataset descriptions
