"""The fp16 preflight wired end to end: --preflight / --no-preflight / auto before fp16, --fp32-modules,
--init-loss-scale, results.json and report.md, through the real CLI in-process on tiny models (CPU).

The planted model is a tiny BERT saved with one feed-forward output projection's weights
scaled up, so that its outputs pass fp16's 65504 from the first batch.
"""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path

import pytest
import torch

from mixft.amp.precision import resolve_precision
from mixft.cli.main import build_parser, config_from_args, main
from mixft.config.run_config import RunConfig
from mixft.errors import UsageError
from mixft.report.markdown import render_markdown, render_preflight
from mixft.runs.checks import preflight_due
from mixft.runs.identity import TRAJECTORY_OPTIONS
from tests.tiny_models import TOY_ROWS, make_tiny_model_dir

# text-classification wraps the Hugging Face classifier as `model`: these are the names the run sees.
PLANTED = "model.bert.encoder.layer.0.output.dense"
CONTAINER = "model.bert.encoder.layer.0.output"  # dense + dropout + residual LayerNorm


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    from transformers import AutoModel

    root = tmp_path_factory.mktemp("preflight-run")
    healthy = make_tiny_model_dir("bert", root / "healthy")
    planted = root / "planted"
    shutil.copytree(healthy, planted)
    model = AutoModel.from_pretrained(healthy)
    with torch.no_grad():
        # Its outputs are ~0.02 at initialisation: x1e7 puts them past 65504 on every batch.
        model.get_submodule("encoder.layer.0.output.dense").weight.mul_(1e7)
    model.save_pretrained(planted)
    rows = [(text, label % 2) for text, label, _ in TOY_ROWS]
    for name, copies in (("train.csv", 2), ("dev.csv", 1)):
        with (root / name).open("w", newline="", encoding="utf-8") as f:
            csv.writer(f).writerows([("text", "label"), *rows * copies])
    return {"healthy": healthy, "planted": planted, "train": root / "train.csv", "dev": root / "dev.csv"}


def run(files, out: Path, model: str, *args: str) -> tuple[int, dict]:
    code = main(
        [
            "--recipe",
            "text-classification",
            "--model",
            str(files[model]),
            "--train-file",
            str(files["train"]),
            "--validation-file",
            str(files["dev"]),
            "--batch-size",
            "4",
            "--max-steps",
            "3",
            "--output-dir",
            str(out),
            "--no-progress",
            *args,
        ]
    )
    doc = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else {}
    return code, doc


def preflight_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith(("preflight:", "  "))]


# ------------------------------------------------------------------ options
def _parse(*argv: str) -> RunConfig:
    return config_from_args(build_parser().parse_args(["--recipe", "bert-sst2", *argv]))


def test_flags_spell_the_three_preflight_states_names_and_scale():
    assert _parse().preflight is None and _parse("--preflight").preflight is True
    assert _parse("--no-preflight").preflight is False
    cfg = _parse("--fp32-modules", "a.b, c,a.b", "--init-loss-scale", "1024")
    assert cfg.fp32_modules == ["a.b", "c"] and cfg.init_loss_scale == 1024.0
    assert {"fp32_modules", "init_loss_scale"} <= set(TRAJECTORY_OPTIONS) and "preflight" not in TRAJECTORY_OPTIONS


@pytest.mark.parametrize(
    "argv",
    [["--fp32-modules", "a,,b"], ["--fp32-modules", " "], ["--init-loss-scale", "0"], ["--init-loss-scale", "nan"]],
)
def test_bad_flag_values_exit_2_in_one_line(argv, capsys):
    assert main(["--recipe", "bert-sst2", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and argv[0] in err


@pytest.mark.parametrize(
    "kwargs, flag",
    [
        ({"fp32_modules": "a,b"}, "--fp32-modules"),
        ({"fp32_modules": []}, "--fp32-modules"),
        ({"init_loss_scale": -1.0}, "--init-loss-scale"),
        ({"preflight": "yes"}, "--preflight"),
    ],
)
def test_python_values_get_the_flag_rules(kwargs, flag):
    with pytest.raises(UsageError) as err:
        RunConfig(**kwargs).validate()
    assert str(err.value).startswith(flag)


def test_preflight_is_due_before_fp16_or_when_asked_and_never_with_eval_only():
    cpu = torch.device("cpu")
    fp32, fp16 = resolve_precision("fp32", cpu), resolve_precision("fp16", cpu)
    assert preflight_due(RunConfig(), [fp32, fp16]) and not preflight_due(RunConfig(), [fp32])
    assert preflight_due(RunConfig(preflight=True), [fp32]) and not preflight_due(RunConfig(preflight=False), [fp16])
    assert not preflight_due(RunConfig(preflight=True, eval_only=True), [fp16])


# ------------------------------------------------------------------ the planted overflow
def test_preflight_names_the_planted_layer_and_the_real_fp16_run_fails_there(files, tmp_path, capsys):
    code, doc = run(
        files, tmp_path / "out", "planted", "--precision", "fp16", "--preflight", "--max-consecutive-skips", "2"
    )
    err = capsys.readouterr().err
    assert code == 3, err  # the fp16 run collapsed, as the preflight said it would
    lines = preflight_lines(err)
    assert lines[0].startswith("preflight: 2 module(s) at fp16 risk; first: " + PLANTED)
    assert any(f"--fp32-modules {CONTAINER} " in line for line in lines)
    pre = doc["preflight"]
    top = pre["modules_at_risk"][0]
    assert (top["name"], top["kind"], top["tensor"], top["origin"]) == (PLANTED, "overflow", "activation", True)
    assert top["value"] > 65504 and pre["fp32_modules"] == [CONTAINER] and pre["kept_in_fp32"] == []
    # The real fp16 run: every step skipped from the first, and the collapse diagnosis names the same module.
    (r,) = doc["runs"]
    assert r["history"]["skipped"] == [True, True] and r["skipped_steps"] == 2
    assert f"first non-finite output: {PLANTED} (Linear) under fp16" in r["stopped_early"]


def test_fp32_modules_from_the_preflight_removes_the_overflow_in_a_real_fp16_run(files, tmp_path, capsys):
    code, doc = run(files, tmp_path / "out", "planted", "--precision", "fp16", "--fp32-modules", CONTAINER)
    err = capsys.readouterr().err
    assert code == 0, err
    (r,) = doc["runs"]
    assert r["skipped_steps"] == 0 and r["steps"] == 3 and r["final_loss_scale"] == 65536
    assert all(math.isfinite(x) for x in r["history"]["loss"]) and r["stopped_early"] is None
    assert r["config"]["fp32_modules"] == [CONTAINER]
    # The auto preflight still measures the values, and says they now run in fp32.
    assert doc["preflight"]["handled_by_fp32_modules"] == [PLANTED, "model.bert.encoder.layer.0.output.dropout"]
    assert f"preflight: --fp32-modules {CONTAINER} runs 2 of these module(s) in fp32" in err


def test_an_unknown_module_name_exits_2_in_one_line_before_any_training(files, tmp_path, capsys):
    out = tmp_path / "out"
    code, doc = run(files, out, "healthy", "--precision", "fp16", "--fp32-modules", CONTAINER + "s")
    err = capsys.readouterr().err
    assert code == 2 and doc == {} and not any(out.glob("*"))  # no results, checkpoint or lock
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"finetune.py: error: --fp32-modules: the model has no module named '{CONTAINER}s'")
    assert "closest: " + CONTAINER in last
    assert "preflight:" not in err  # names are checked before the preflight runs


def test_init_loss_scale_without_fp16_exits_2(files, tmp_path, capsys):
    code, _ = run(files, tmp_path / "out", "healthy", "--precision", "bf16", "--init-loss-scale", "1024")
    assert code == 2 and "--init-loss-scale: only fp16 uses a loss scale" in capsys.readouterr().err


# ------------------------------------------------------------------ a healthy model
def test_auto_preflight_on_a_healthy_model_is_quiet_cheap_and_leaves_the_run_unchanged(files, tmp_path, capsys):
    code, doc = run(files, tmp_path / "auto", "healthy", "--precision", "fp16")
    err = capsys.readouterr().err
    assert code == 0, err
    pre = doc["preflight"]
    assert pre["at_risk"] is False and pre["modules_at_risk"] == [] and pre["batches"] == 3
    assert pre["seconds"] < 5  # three tiny batches (a loaded shared CPU: a generous bound)
    (line,) = preflight_lines(err)  # one line when there is nothing to say
    assert line.startswith("preflight: no module at fp16 risk (")
    code, off = run(files, tmp_path / "off", "healthy", "--precision", "fp16", "--no-preflight")
    err = capsys.readouterr().err
    assert code == 0 and "preflight" not in off and "preflight" not in err
    # The preflight restores every RNG and builds its own model: the run draws what it would without it.
    assert doc["runs"][0]["history"]["loss"] == off["runs"][0]["history"]["loss"]


def test_forced_preflight_at_fp32_checks_then_trains(files, tmp_path, capsys):
    code, doc = run(files, tmp_path / "out", "healthy", "--preflight")
    assert code == 0, capsys.readouterr().err
    assert doc["preflight"]["at_risk"] is False and doc["runs"][0]["steps"] == 3


def test_init_loss_scale_reaches_the_scaler_and_the_preflight(files, tmp_path, capsys):
    code, doc = run(files, tmp_path / "out", "healthy", "--precision", "fp16", "--init-loss-scale", "1024")
    assert code == 0, capsys.readouterr().err
    assert doc["preflight"]["init_scale"] == 1024.0
    assert (
        doc["runs"][0]["history"]["loss_scale"][0] == 1024.0 and doc["runs"][0]["config"]["init_loss_scale"] == 1024.0
    )


def test_compare_report_has_the_before_fp16_section(files, tmp_path, capsys):
    code, doc = run(files, tmp_path / "out", "healthy", "--compare", "fp32,fp16")
    assert code == 0, capsys.readouterr().err
    report = (tmp_path / "out" / "report.md").read_text()
    assert "## Before the fp16 run" in report and "The preflight found no module at fp16 risk" in report
    assert [r["precision"] for r in doc["runs"]] == ["fp32", "fp16"] and "preflight" in doc


def test_report_section_lists_the_modules_at_risk_and_the_advice():
    pre = {
        "batches": 3,
        "init_scale": 65536.0,
        "seconds": 0.02,
        "modules_checked": 32,
        "at_risk": True,
        "modules_at_risk": [
            {
                "name": PLANTED,
                "module_type": "Linear",
                "kind": "overflow",
                "tensor": "activation",
                "level": "exceeds",
                "value": 233372.875,
                "ratio": 3.56,
                "origin": True,
            },
            {
                "name": "x",
                "module_type": "Linear",
                "kind": "overflow",
                "tensor": "activation",
                "level": "exceeds",
                "value": None,
                "ratio": None,
                "origin": False,
            },
            {
                "name": "y",
                "module_type": "Embedding",
                "kind": "underflow",
                "tensor": "gradient",
                "level": "exceeds",
                "value": 0.25,
                "ratio": 2.5,
                "origin": False,
            },
        ],
        "recommendations": [f"keep {CONTAINER} in fp32 (outside autocast): --fp32-modules {CONTAINER}"],
        "kept_in_fp32": [CONTAINER],
        "handled_by_fp32_modules": [PLANTED],
    }
    text = render_preflight(pre)
    assert text.startswith("## Before the fp16 run\n\nThe preflight found 3 module(s) at fp16 risk (3 training batch")
    assert f"| `{PLANTED}` | Linear | overflow (activation), starts here | 2.334e+05 | 3.56 |" in text
    assert "| `x` | Linear | overflow (activation) | n/a | inf |" in text  # inf in fp32: null in results.json
    assert "| `y` | Embedding | underflow (gradient) | 25.0% | 2.5 |" in text
    assert f"- keep {CONTAINER} in fp32" in text and f"these runs kept `{CONTAINER}` in fp32" in text
    assert render_preflight(None) is None and "## Before the fp16 run" not in render_markdown({"runs": []})
