"""mixft.recipe: recipes found through the "mixft.recipes" entry-point group, by name, and checked."""

from __future__ import annotations

import sys
import textwrap

import pytest

from mixft.errors import UsageError
from mixft.recipe import Recipe, SavesModel, get_recipe, recipe_names

BUILT_IN = ("bert-sst2", "glue", "mlp-synthetic", "text-classification")


def _install(tmp_path, monkeypatch, package: str, entry_points: str, modules: dict[str, str]) -> None:
    """A package on sys.path with dist-info metadata, as `pip install` would leave it."""
    dist = tmp_path / f"{package}-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 0.1\n", encoding="utf-8")
    (dist / "entry_points.txt").write_text(textwrap.dedent(entry_points), encoding="utf-8")
    pkg = tmp_path / package
    pkg.mkdir()
    (pkg / "__init__.py").write_text("", encoding="utf-8")
    for name, source in modules.items():
        (pkg / f"{name}.py").write_text(textwrap.dedent(source), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, package, raising=False)


PLUGIN_RECIPE = """
    NAME = "my-task"
    USES = frozenset({"model"})
    DEFAULTS = {"epochs": 1}

    def prepare(cfg):
        return None

    def build(cfg, prepared, precision, device, seed):
        raise NotImplementedError
"""


def test_built_in_recipes_are_registered_by_pyproject():
    assert set(BUILT_IN) <= set(recipe_names())
    for name in BUILT_IN:
        recipe = get_recipe(name)
        assert isinstance(recipe, Recipe) and recipe.NAME == name


def test_save_model_is_part_of_the_contract_where_a_recipe_has_one():
    assert isinstance(get_recipe("bert-sst2"), SavesModel)
    assert not isinstance(get_recipe("mlp-synthetic"), SavesModel)


def test_a_recipe_from_another_package_is_found_by_name(tmp_path, monkeypatch):
    _install(
        tmp_path,
        monkeypatch,
        "mixft_plugin_demo",
        "[mixft.recipes]\nmy-task = mixft_plugin_demo.my_recipe\n",
        {"my_recipe": PLUGIN_RECIPE},
    )
    assert "my-task" in recipe_names()
    recipe = get_recipe("my-task")
    assert recipe.__name__ == "mixft_plugin_demo.my_recipe" and recipe.DEFAULTS == {"epochs": 1}


def test_unknown_recipe_lists_the_available_ones(tmp_path, monkeypatch):
    _install(
        tmp_path,
        monkeypatch,
        "mixft_plugin_other",
        "[mixft.recipes]\nother-task = mixft_plugin_other.r\n",
        {"r": PLUGIN_RECIPE},
    )
    with pytest.raises(UsageError) as info:
        get_recipe("nope")
    message = str(info.value)
    assert message.startswith("unknown recipe 'nope'; available: ")
    listed = message.split("available: ")[1].split(", ")
    assert listed == sorted(listed) and set(BUILT_IN) | {"other-task"} <= set(listed)


def test_a_module_without_the_contract_is_refused_in_one_line(tmp_path, monkeypatch):
    _install(
        tmp_path,
        monkeypatch,
        "mixft_plugin_broken",
        "[mixft.recipes]\nbroken = mixft_plugin_broken.half\n",
        {"half": 'NAME = "broken"\nUSES = frozenset()\n'},
    )
    with pytest.raises(UsageError) as info:
        get_recipe("broken")
    assert str(info.value) == (
        "recipe 'broken' (mixft_plugin_broken.half) is not a mixft recipe: it lacks DEFAULTS, prepare, build"
    )


def test_cli_help_lists_the_registered_recipes():
    from mixft.cli.main import build_parser

    # Compared without whitespace: argparse wraps help lines, at hyphens too ("bert-" / "sst2").
    help_text = "".join(build_parser().format_help().split())
    assert "oneof:" + ",".join(recipe_names()) in help_text
