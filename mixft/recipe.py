"""The recipe contract (a typed Protocol) and what a recipe hands the trainer.

A recipe module (``recipes/<name>.py``, or any module a package registers under the
entry-point group ``mixft.recipes``, see mixft.recipe) defines::

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

Also here: the registry (``get_recipe``, ``recipe_names``), recipes found by the entry-point group ``mixft.recipes``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol, runtime_checkable

from mixft.errors import UsageError


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
    """What every recipe module provides (checked by mixft.recipe when it loads one)."""

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


# ------------------------------------------------------------------------------------------
# The registry: recipes by entry point (was mixft/registry.py)
#
# Recipes by name, found through the entry-point group ``mixft.recipes``; mixft names no recipe module.
#
# A package adds a recipe without editing mixft, in its pyproject.toml::
#
#     [project.entry-points."mixft.recipes"]
#     my-task = "my_package.my_recipe"
#
# Usage::
#
#     from mixft.recipe import get_recipe, recipe_names
#     recipe = get_recipe("bert-sst2")   # the module, checked against mixft.recipe.Recipe
#     recipe_names()                     # ["bert-sst2", "glue", "mlp-synthetic", "text-classification"]
#
# Entry points are read fresh on every call (cheap: installed metadata only), so a package
# installed or put on ``sys.path`` after import is found too.
# ------------------------------------------------------------------------------------------

GROUP = "mixft.recipes"


def _entry_points() -> dict[str, EntryPoint]:
    # Two distributions registering one name (an editable install beside an old one):
    # the first on sys.path wins, as Python's own imports would.
    found: dict[str, EntryPoint] = {}
    for ep in entry_points(group=GROUP):
        found.setdefault(ep.name, ep)
    return found


def recipe_names() -> list[str]:
    """The names of every registered recipe, sorted. Usage: ``", ".join(recipe_names())``"""
    return sorted(_entry_points())


def get_recipe(name: str) -> Recipe:
    """The recipe module registered as ``name``. Usage: ``get_recipe("bert-sst2").DEFAULTS``

    Raises UsageError listing the available recipes for an unknown name, and for a
    registered module that does not provide the recipe contract (mixft.recipe.Recipe).
    """
    found = _entry_points()
    if name not in found:
        available = ", ".join(sorted(found)) or "none (is mixft installed? pip install -e .)"
        raise UsageError(f"unknown recipe {name!r}; available: {available}")
    module: ModuleType = found[name].load()
    if not isinstance(module, Recipe):
        missing = [attr for attr in REQUIRED if not hasattr(module, attr)]
        raise UsageError(f"recipe {name!r} ({found[name].value}) is not a mixft recipe: it lacks {', '.join(missing)}")
    return module
