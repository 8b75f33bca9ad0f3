"""Recipes by name, found through the entry-point group ``mixft.recipes``; mixft names no recipe module.

A package adds a recipe without editing mixft, in its pyproject.toml::

    [project.entry-points."mixft.recipes"]
    my-task = "my_package.my_recipe"

Usage::

    from mixft.registry import get_recipe, recipe_names
    recipe = get_recipe("bert-sst2")   # the module, checked against mixft.recipe.Recipe
    recipe_names()                     # ["bert-sst2", "glue", "mlp-synthetic", "text-classification"]

Entry points are read fresh on every call (cheap: installed metadata only), so a package
installed or put on ``sys.path`` after import is found too.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points
from types import ModuleType

from .errors import UsageError
from .recipe import REQUIRED, Recipe

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
