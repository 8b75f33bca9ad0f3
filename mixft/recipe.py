"""The recipe contract (a typed Protocol) and what a recipe hands the trainer.

A recipe module (``recipes/<name>.py``, or any module a package registers under the
entry-point group ``mixft.recipes``, see mixft.registry) defines::

    NAME = "bert-sst2"
    USES = frozenset({"model", "data_dir", ...})     # the per-recipe RunConfig options it reads
    DEFAULTS = {"epochs": 2, "batch_size": 32, ...}   # RunConfig fields
    def prepare(cfg: RunConfig) -> Any                 # load + validate data, tokenise: runs once,
                                                       # before any training; bad input -> UsageError
    def build(cfg, prepared, precision, device, seed) -> TrainerParts   # fresh model per run
    def save_model(model, prepared, directory) -> None  # optional: what --save-model writes; --model reads it
    def probe_config(cfg) -> RunConfig                  # optional: shrink the data for the probe

``build`` must give identical initial weights and data order for the same seed, so runs
at different precisions are comparable. ``prepare``'s result may carry ``notices``
(one line each, shown once everything resolved).

Usage::

    from mixft.recipe import Recipe, SavesModel
    isinstance(module, Recipe)       # has NAME, USES, DEFAULTS, prepare, build
    isinstance(module, SavesModel)   # instead of hasattr(module, "save_model")
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, runtime_checkable


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


@runtime_checkable
class Recipe(Protocol):
    """What every recipe module provides (checked by mixft.registry when it loads one)."""

    NAME: str
    USES: frozenset[str]
    DEFAULTS: Mapping[str, Any]

    def prepare(self, cfg: Any) -> Any:
        """Read, check and tokenise once, before any training; bad input is a UsageError."""

    def build(self, cfg: Any, prepared: Any, precision: Any, device: Any, seed: int) -> TrainerParts:
        """A fresh model, optimizer, loss and loaders for one run."""


@runtime_checkable
class SavesModel(Protocol):
    """A recipe with a saved-model format (``--save-model`` writes it, ``--eval-only --model`` reads it)."""

    def save_model(self, model: Any, prepared: Any, directory: Path) -> None:
        """Write the trained model into ``directory``, whole or not at all."""


@runtime_checkable
class ConfiguresProbe(Protocol):
    """A recipe whose data size is not ``max_train_samples`` and so shrinks it for the probe itself."""

    def probe_config(self, cfg: Any) -> Any:
        """``cfg`` on the probe's budget."""


#: Attributes a Recipe must have, for one-line error messages (Protocol members are not listed at runtime).
REQUIRED = ("NAME", "USES", "DEFAULTS", "prepare", "build")
