"""RunConfig is the one source of truth for options: the CLI is generated from it."""

from __future__ import annotations

import dataclasses
from dataclasses import fields

import pytest

from mixft.cli.main import build_parser, config_from_args
from mixft.config.run_config import RunConfig
from mixft.errors import UsageError
from mixft.options import flag_of


def _parse(*argv: str) -> RunConfig:
    return config_from_args(build_parser().parse_args(["--recipe", "bert-sst2", *argv]))


def test_every_cli_field_has_a_flag_with_the_dataclass_default():
    parser = build_parser()
    by_dest = {a.dest: a for a in parser._actions}
    for f in fields(RunConfig):
        if not f.metadata.get("cli"):
            continue
        action = by_dest[f.name]
        assert flag_of(f) in action.option_strings
        assert action.default == f.default, f.name
        assert action.help and f.metadata["help"] in action.help


def test_no_flags_give_the_dataclass_defaults():
    assert _parse() == RunConfig(recipe="bert-sst2")


def test_flags_fill_their_fields():
    cfg = _parse(
        "--epochs",
        "3",
        "--lr",
        "1e-4",
        "--no-collapse-check",
        "--train-file",
        "t.csv",
        "--validation-split",
        "0.1",
        "--compare",
        "fp32,bf16",
        "--seeds",
        "1,2",
    )
    assert (cfg.epochs, cfg.lr, cfg.detect_collapse, cfg.train_file, cfg.validation_split) == (
        3,
        1e-4,
        False,
        "t.csv",
        0.1,
    )
    assert cfg.precisions == ["fp32", "bf16"] and cfg.seeds == [1, 2]
    assert _parse("--amp").precisions == ["amp"]


@pytest.mark.parametrize(
    "kwargs, flag",
    [
        ({"epochs": 0}, "--epochs"),
        ({"epochs": 2.5}, "--epochs"),
        ({"epochs": True}, "--epochs"),
        ({"lr": float("inf")}, "--lr"),
        ({"max_grad_norm": -1.0}, "--max-grad-norm"),
        ({"inject_nonfinite": 1.5}, "--inject-nonfinite"),
        ({"device": "tpu"}, "--device"),
        ({"validation_split": 0.0}, "--validation-split"),
        ({"resume": "yes"}, "--resume"),
        ({"detect_collapse": 1}, "--no-collapse-check"),
        ({"seeds": [2**64]}, "--seed"),
        ({"num_workers": -1}, "--num-workers"),
        ({"text_column": " "}, "--text-column"),
    ],
)
def test_python_values_get_the_same_rules_as_flags(kwargs, flag):
    with pytest.raises(UsageError) as err:
        RunConfig(**kwargs).validate()
    assert str(err.value).startswith(flag) and "\n" not in str(err.value)


def test_per_recipe_options_are_refused_by_recipes_that_ignore_them():
    RunConfig(data_dir="d").check_recipe_options("bert-sst2", {"data_dir"})  # used: fine
    with pytest.raises(UsageError, match="--data-dir: not used by recipe mlp-synthetic"):
        RunConfig(data_dir="d").check_recipe_options("mlp-synthetic", set())
    RunConfig().check_recipe_options("mlp-synthetic", set())  # defaults are never "set"


def test_a_config_with_the_recipes_defaults_applied_passes_the_check():
    # mixft.run(cfg.with_defaults(DEFAULTS)) is a normal call: the defaults are not the user's.
    from recipes import mlp_synthetic

    cfg = RunConfig(recipe="mlp-synthetic").with_defaults(mlp_synthetic.DEFAULTS)
    cfg.check_recipe_options("mlp-synthetic", mlp_synthetic.USES, mlp_synthetic.DEFAULTS)
    with pytest.raises(UsageError, match="--model"):
        RunConfig(recipe="mlp-synthetic", model="bert-base-uncased").check_recipe_options(
            "mlp-synthetic", mlp_synthetic.USES, mlp_synthetic.DEFAULTS
        )


def test_for_recipe_checks_the_options_against_the_recipe_then_applies_its_defaults_and_rules():
    from recipes import mlp_synthetic

    cfg = RunConfig(recipe="mlp-synthetic", extra={"width": 8}).for_recipe(mlp_synthetic)
    assert cfg.lr == mlp_synthetic.DEFAULTS["lr"] and cfg.extra == {"width": 8}
    assert cfg.for_recipe(mlp_synthetic) == cfg  # applied twice (a notebook's cfg, then mixft.run): the same
    with pytest.raises(UsageError, match="--data-dir: not used by recipe mlp-synthetic"):
        RunConfig(recipe="mlp-synthetic", data_dir="d").for_recipe(mlp_synthetic)
    with pytest.raises(UsageError, match="extra.depth: not an option of recipe mlp-synthetic"):
        RunConfig(recipe="mlp-synthetic", extra={"depth": 2}).for_recipe(mlp_synthetic)
    with pytest.raises(UsageError, match="--seeds"):  # the rules run after the defaults
        RunConfig(recipe="mlp-synthetic", seeds=[1, 1]).for_recipe(mlp_synthetic)


def test_length_grouping_is_off_by_default_and_opt_in():
    # Random batches by default: grouping by length cost accuracy on real SST-2 at a small budget.
    from recipes.text_classification import length_group_size

    assert _parse().group_by_length is False and length_group_size(_parse()) == 1
    assert length_group_size(_parse("--group-by-length")) == 50
    assert length_group_size(_parse("--group-by-length", "--length-group-size", "8")) == 8
    assert length_group_size(_parse("--no-group-by-length")) == 1


def test_a_length_group_size_without_grouping_is_one_line():
    with pytest.raises(UsageError, match="--length-group-size .* add --group-by-length") as err:
        _parse("--length-group-size", "8").validate()
    assert "\n" not in str(err.value)


def test_bert_sst2_packs_by_default_and_the_other_recipes_refuse_packing():
    from recipes import bert_sst2, text_classification

    def for_recipe(recipe, module, *argv):
        cfg = _parse(*argv)
        cfg = dataclasses.replace(cfg, recipe=recipe)
        cfg.check_recipe_options(recipe, module.USES, module.DEFAULTS)
        return cfg.with_defaults(module.DEFAULTS)

    assert for_recipe("bert-sst2", bert_sst2).pack_sequences is True
    assert for_recipe("bert-sst2", bert_sst2, "--no-pack-sequences").pack_sequences is False
    assert for_recipe("text-classification", text_classification).pack_sequences is None
    with pytest.raises(UsageError, match="--pack-sequences") as err:
        for_recipe("text-classification", text_classification, "--pack-sequences")
    assert "\n" not in str(err.value)


# Values other than the defaults for every option only training reads (one per ``trains=True`` field).
TRAINING_ONLY = {
    "epochs": 3,
    "max_steps": 5,
    "lr": 0.5,
    "max_grad_norm": 0.001,
    "grad_accum": 4,
    "save_total_limit": 2,
    "checkpoint_minutes": 1.0,
    "checkpoint_every": 1,
    "inject_nonfinite": 0.5,
    "detect_collapse": False,
    "min_loss_scale": 4.0,
    "max_consecutive_skips": 3,
    "init_loss_scale": 8.0,
    # Evaluation during training and what the run keeps and logs (was: --eval-only --report-to tensorboard,
    # --metric-for-best loss or --no-load-best: exit 0, no tracker built, no best kept, the value recorded).
    "eval_steps": 2,
    "metric_for_best": "loss",
    "load_best": False,
    "early_stopping_patience": 2,
    "report_to": "tensorboard",
}


def test_every_training_only_option_is_listed_here():
    assert {f.name for f in fields(RunConfig) if f.metadata.get("trains")} == set(TRAINING_ONLY)


@pytest.mark.parametrize("name", sorted(TRAINING_ONLY))
def test_eval_only_refuses_an_option_only_training_reads(name):
    # Was: --eval-only --lr 0.5 --max-grad-norm 0.001 --inject-nonfinite 0.5 ... exit 0, every value recorded in
    # results.json's config as if in force, none read.
    flag = flag_of(next(f for f in fields(RunConfig) if f.name == name))
    with pytest.raises(UsageError, match=f"^--eval-only trains nothing: {flag} cannot be combined with it$"):
        RunConfig(eval_only=True, **{name: TRAINING_ONLY[name]}).validate()
    RunConfig(**{name: TRAINING_ONLY[name]}).validate()  # a training run takes it


def test_eval_only_keeps_the_recipes_own_training_defaults():
    from mixft.recipe import get_recipe

    cfg = RunConfig(recipe="bert-sst2", eval_only=True, model="m").for_recipe(get_recipe("bert-sst2"))
    assert cfg.lr is not None and cfg.epochs is not None  # filled by the recipe, not given: no refusal
