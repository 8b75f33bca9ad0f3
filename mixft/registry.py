"""The one place that knows recipes by name (the arrows point scripts -> recipes -> mixft)."""

from __future__ import annotations

import importlib
from types import ModuleType

from .errors import UsageError

RECIPES: dict[str, str] = {
    "bert-sst2": "recipes.bert_sst2",
    "mlp-synthetic": "recipes.mlp_synthetic",
    "text-classification": "recipes.text_classification",
    "glue": "recipes.glue",
}


def get_recipe(name: str) -> ModuleType:
    """The recipe module for ``name``. Usage: ``get_recipe("bert-sst2").DEFAULTS``"""
    if name not in RECIPES:
        raise UsageError(f"unknown recipe {name!r}; available: {', '.join(sorted(RECIPES))}")
    return importlib.import_module(RECIPES[name])
