"""Options that meet (issue 30): refused in one line before any work, from a flag, a file or Python alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from mixft.config.run_config import RunConfig
from mixft.errors import UsageError
from mixft.train.schedules import build_scheduler_factory
from tests.cli_runs import run_cli
from tests.tiny_models import make_tiny_model_dir


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return make_tiny_model_dir("bert", tmp_path_factory.mktemp("tiny") / "bert")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            {"lr_scheduler": "polynomial", "lr": 1e-7},
            "--lr-scheduler polynomial decays to 1e-07 (transformers' lr_end): --lr must be above it, got 1e-07",
        ),
        ({"lr_scheduler": "polynomial", "lr": 1e-8}, "--lr must be above it, got 1e-08"),
        ({"init_loss_scale": 1e39}, "--init-loss-scale must be a positive finite number up to float32's 3.4e38"),
        ({"lr": 1e39}, "--lr must be a positive finite number up to float32's 3.4e38"),
        ({"lora": True, "lora_alpha": 1e40}, "--lora-alpha must be a positive finite number up to float32's 3.4e38"),
        ({"min_loss_scale": 1e39}, "--min-loss-scale must be a finite number >= 0 up to float32's 3.4e38"),
        (
            {"precisions": ["fp16"], "init_loss_scale": 0.5},
            "--init-loss-scale 0.5 is below --min-loss-scale 1: the "
            "collapse check would stop the run at its first step",
        ),
        (
            {"precisions": ["fp16"], "min_loss_scale": 1e6},
            "fp16's initial loss scale 65536 (the default) is below --min-loss-scale 1e+06",
        ),
        (
            {"detect_collapse": False, "max_consecutive_skips": 3},
            "--max-consecutive-skips configures the collapse check that --no-collapse-check turns off",
        ),
        ({"detect_collapse": False, "min_loss_scale": 2.0}, "--min-loss-scale configures the collapse check"),
        (
            {"report_to": "none,tensorboard"},
            "--report-to: none means no tracker; it cannot be combined with tensorboard",
        ),
    ],
)
def test_combinations_refused_from_python(kwargs, message):
    with pytest.raises(UsageError) as e:
        RunConfig(**kwargs).validate()
    assert message in str(e.value)


def test_valid_neighbours_are_accepted():
    RunConfig(lr_scheduler="polynomial", lr=2e-7).validate()
    RunConfig(precisions=["fp16"], init_loss_scale=3.4e38).validate()
    RunConfig(precisions=["fp16"], init_loss_scale=4.0, min_loss_scale=4.0).validate()
    RunConfig(precisions=["fp16"], detect_collapse=False).validate()
    RunConfig(report_to="none").validate()


def test_polynomial_schedule_factory_refuses_a_warmup_covering_the_run():
    import torch

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    with pytest.raises(UsageError, match="polynomial needs at least one optimizer step after the warm-up"):
        build_scheduler_factory("polynomial", warmup_ratio=1)(opt, 6)
    build_scheduler_factory("polynomial", warmup_steps=5)(opt, 6)  # one step left: fine


def assert_refused(code: int, err: str, out: Path, expected: str) -> None:
    assert code == 2, err
    assert "\n" not in err and "Traceback" not in err, err
    assert expected in err, err
    assert not (out / "results.json").exists()


@pytest.mark.parametrize(
    "args, expected",
    [
        (
            ("--max-steps", "4", "--precision", "fp16", "--init-loss-scale", "1e39"),
            "argument --init-loss-scale: must be a positive finite number up to float32's 3.4e38, got '1e39'",
        ),
        (("--max-steps", "2", "--compare", "fp32,fp16", "--init-loss-scale", "3.5e38"), "up to float32's 3.4e38"),
        (
            ("--max-steps", "4", "--precision", "fp16", "--init-loss-scale", "0.5"),
            "--init-loss-scale 0.5 is below --min-loss-scale 1",
        ),
        (("--max-steps", "2", "--lr-scheduler", "polynomial", "--lr", "1e-7"), "--lr must be above it, got 1e-07"),
        (("--max-steps", "2", "--report-to", "none,tensorboard"), "none means no tracker"),
        (
            ("--max-steps", "2", "--precision", "bf16", "--min-loss-scale", "2"),
            "--min-loss-scale: only fp16 uses a loss scale; this command trains bf16",
        ),
        (
            ("--max-steps", "2", "--fp32-modules", "model.bert.encoder"),
            "--fp32-modules: only autocast precisions (bf16, fp16) run modules in lower precision; this command trains fp32",
        ),
        (
            ("--max-steps", "2", "--precision", "bf16", "--fp32-modules", "model"),
            "--fp32-modules model covers the whole model: the bf16 run would be an fp32 run",
        ),
        (
            ("--max-steps", "2", "--precision", "bf16", "--fp32-modules", "model.bert,model.classifier"),
            "covers the whole model",
        ),
    ],
)
def test_combinations_refused_on_the_command_line(tmp_path, model, capsys, args, expected, native_bf16_cpu):
    code, err, out = run_cli(tmp_path, model, *args, capsys=capsys)
    assert_refused(code, err, out, expected)


def test_fp32_modules_naming_part_of_the_model_still_trains(tmp_path, model, capsys):
    code, err, out = run_cli(
        tmp_path, model, "--max-steps", "1", "--precision", "bf16", "--fp32-modules", "model.classifier", capsys=capsys
    )
    assert code == 0, err


@pytest.mark.parametrize(
    "args, expected",
    [
        (("--precision", "fp32", "--fp32-modules", "classifier"), "--fp32-modules: only autocast precisions"),
        (("--precision", "bf16-pure", "--fp32-modules", "classifier"), "bf16-pure holds the weights in bf16"),
        (("--precision", "bf16", "--init-loss-scale", "128"), "--init-loss-scale: only fp16 uses a loss scale"),
    ],
)
def test_precision_rules_answer_before_any_file_is_read(tmp_path, capsys, args, expected):
    # The model directory does not exist: a rule checked after reading data or the model would
    # answer with that instead.
    code, err, out = run_cli(tmp_path, tmp_path / "no-such-model", "--max-steps", "2", *args, capsys=capsys)
    assert_refused(code, err, out, expected)
