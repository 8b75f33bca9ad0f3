"""--config FILE: round trip through config.yaml, unknown keys, bad values, command-line overrides."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import pytest

from mixft.config.file import config_values, given_fields, load_config_file, merge, write_config
from mixft.config.run_config import RunConfig
from mixft.errors import UsageError


def write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_written_config_loads_back_to_the_same_runconfig(tmp_path):
    cfg = RunConfig(
        recipe="bert-sst2",
        precisions=["fp32", "bf16"],
        seeds=[0, 7, 2**63],
        model="models/my bert",
        max_train_samples=500,
        lr=2e-5,
        max_grad_norm=0.0,
        epochs=3,
        resume=True,
        task_kind="regression",
        validation_split=0.1,
        detect_collapse=False,
        min_loss_scale=0.5,
        text_column="yes",
        extra={"hidden": [64, 32], "note": "on", "dropout": 0.1},
        output_dir=str(tmp_path / "out"),
    )
    path = write_config(cfg, tmp_path / "out" / "config.yaml")
    assert path.read_text().startswith("# mixft: the effective configuration")
    loaded = load_config_file(path)
    assert set(loaded) == {f.name for f in fields(RunConfig)}
    assert RunConfig(**loaded) == cfg
    assert type(loaded["lr"]) is float and loaded["text_column"] == "yes"  # not YAML's boolean
    # And a default RunConfig, where most fields are None; its paths are written absolute (issue 30).
    assert RunConfig(**load_config_file(write_config(RunConfig(), tmp_path / "d.yaml"))) == RunConfig(
        output_dir=str(Path("outputs/run").resolve())
    )


def test_json_and_yaml_with_cli_spellings(tmp_path):
    path = write(
        tmp_path,
        "run.json",
        json.dumps({"recipe": "mlp-synthetic", "compare": "fp32,bf16", "seed": 3, "max-steps": 5, "lr": 1}),
    )
    assert load_config_file(path) == {
        "recipe": "mlp-synthetic",
        "precisions": ["fp32", "bf16"],
        "seeds": [3],
        "max_steps": 5,
        "lr": 1.0,
    }
    path = write(tmp_path, "run.yaml", "amp: true\nseeds: 0,1,2\nlr: 2e-5\nbatch_size: '16'\n")
    assert load_config_file(path) == {"precisions": ["amp"], "seeds": [0, 1, 2], "lr": 2e-5, "batch_size": 16}
    assert load_config_file(write(tmp_path, "empty.yaml", "")) == {}


@pytest.mark.parametrize(
    "text, message",
    [
        ("max_step: 5\n", r"--config .*run.yaml: unknown option 'max_step' \(did you mean 'max_steps'\?\)"),
        ("zzz: 1\n", r"unknown option 'zzz' \(keys are RunConfig field names"),
        ("epochs: 0\n", r"run.yaml: epochs must be a positive integer, got 0$"),
        ("lr: -1e-3\n", r"lr must be a positive finite number up to float32's 3.4e38, got '-1e-3'"),
        ("lr: .nan\n", r"lr must be a positive finite number up to float32's 3.4e38, got nan"),
        ("batch_size: many\n", r"batch_size must be a positive integer, got 'many'"),
        ("resume: 'yes'\n", r"resume must be True or False, got 'yes'"),
        ("device: tpu\n", r"device must be one of: auto, cpu, cuda, got 'tpu'"),
        ("grad_accum: null\n", r"grad_accum cannot be null"),
        ("precision: fp8\n", r"precision: unknown precision 'fp8'"),
        ("seeds: [0, x]\n", r"seeds must be an integer in \[-2\*\*63, 2\*\*64\), got .x.$"),
        ("seed: 1\nseeds: [2]\n", r"'seed' and 'seeds' both set seeds: give one"),
        ("amp: 1\n", r"amp must be true or false"),
        ("extra: 3\n", r"extra must be a mapping"),
        ("- epochs\n", r"must hold a mapping of option names to values, got a list"),
        ("epochs: [1\n", r"not valid YAML \(line 2: "),
    ],
)
def test_bad_files_are_one_line_usage_errors(tmp_path, text, message):
    with pytest.raises(UsageError, match=message) as e:
        load_config_file(write(tmp_path, "run.yaml", text))
    assert "\n" not in str(e.value)


def test_unreadable_and_malformed_json(tmp_path):
    with pytest.raises(UsageError, match=r"--config .*missing.yaml: cannot read it \(No such file or directory\)"):
        load_config_file(tmp_path / "missing.yaml")
    with pytest.raises(UsageError, match=r"not valid JSON \(line 1: "):
        load_config_file(write(tmp_path, "bad.json", "{epochs: 2}"))
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(UsageError, match="not a text file"):
        load_config_file(tmp_path / "bin.yaml")


def test_command_line_flags_override_the_file(tmp_path):
    from mixft.cli.main import build_parser, config_from_args

    file_values = load_config_file(
        write(tmp_path, "run.yaml", "epochs: 3\nlr: 1e-4\ncompare: [fp32, bf16]\nmax_train_samples: 64\n")
    )
    parser = build_parser()
    argv = ["--recipe", "mlp-synthetic", "--epochs", "1", "--precision", "fp32"]
    given = given_fields(parser, argv)
    assert given == {"recipe", "epochs", "precisions"}
    cli_values = config_from_args(parser.parse_args(argv)).to_dict()
    cfg = RunConfig(**merge(file_values, cli_values, given))
    assert cfg.epochs == 1 and cfg.precisions == ["fp32"]  # the command line's
    assert cfg.lr == 1e-4 and cfg.max_train_samples == 64  # the file's
    assert cfg.grad_accum == 1  # neither: the default


def test_given_fields_counts_a_flag_that_repeats_the_default():
    from mixft.cli.main import build_parser

    parser = build_parser()
    assert given_fields(parser, ["--recipe", "x", "--grad-accum", "1", "--seeds", "0,1"]) == {
        "recipe",
        "grad_accum",
        "seeds",
    }
    assert given_fields(parser, ["--recipe", "x", "--no-collapse-check", "--amp"]) == {
        "recipe",
        "detect_collapse",
        "precisions",
    }


def test_non_plain_extra_is_refused(tmp_path):
    cfg = RunConfig(extra={"fn": print})
    with pytest.raises(UsageError, match="extra.fn is a builtin_function_or_method"):
        write_config(cfg, tmp_path / "config.yaml")
    assert not (tmp_path / "config.yaml").exists()


def test_config_values_from_a_mapping():
    assert config_values({"seed": 1, "epochs": 2}) == {"seeds": [1], "epochs": 2}


@pytest.mark.parametrize("value,notice", [("true", True), ("false", False)])
def test_a_retired_option_in_an_older_runs_file_is_skipped_with_a_notice_where_it_asked_for_what_is_gone(
    tmp_path, caplog, value, notice
):
    # An older run's config.yaml sets fast_dropout: it still reproduces the run (torch's masks now).
    path = write(tmp_path, "config.yaml", f"epochs: 2\nfast_dropout: {value}\n")
    with caplog.at_level("WARNING", logger="mixft"):
        assert load_config_file(path) == {"epochs": 2}
    said = [r.getMessage() for r in caplog.records]
    assert bool(said) is notice, said
    if notice:
        assert len(said) == 1 and "'fast_dropout' is ignored" in said[0] and "torch's dropout masks" in said[0]


def test_the_retired_flag_still_parses_and_is_not_listed():
    from mixft.cli.main import build_parser, config_from_args

    parser = build_parser()
    cfg = config_from_args(parser.parse_args(["--recipe", "mlp-synthetic", "--torch-dropout"]))
    assert cfg == config_from_args(parser.parse_args(["--recipe", "mlp-synthetic"]))  # what every run does now
    assert "--torch-dropout" not in parser.format_help()
