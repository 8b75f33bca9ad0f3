"""Options against the run's shape (issue 30): warm-up, polynomial decay, patience, --load-best; before any work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mixft.config.run_config import RunConfig
from mixft.runs.shape import RunShape, run_shape
from tests.cli_runs import run_cli
from tests.tiny_models import make_tiny_model_dir


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return make_tiny_model_dir("bert", tmp_path_factory.mktemp("tiny") / "bert")


@pytest.mark.parametrize(
    "kwargs, n_batches, shape",
    [
        ({"epochs": 2}, 8, RunShape(16, 8, 2, 1, 0)),
        ({"epochs": 3, "eval_steps": 2}, 8, RunShape(24, 8, 12, 2, 9)),
        ({"epochs": 3, "eval_steps": 3}, 8, RunShape(24, 8, 10, 2, 7)),  # 3,6,8*,9,12,15,16*,18,21,24*
        ({"epochs": 3, "max_steps": 5}, 8, RunShape(5, 8, 1, 0, 0)),
        ({"epochs": 2, "eval_steps": 8}, 8, RunShape(16, 8, 2, 1, 0)),  # every 8 steps: the epoch ends
        ({"max_steps": 4, "eval_steps": 100}, 8, RunShape(4, 8, 1, 0, 0)),  # cut short: one evaluation at step 5
        ({"epochs": 1, "grad_accum": 3}, 8, RunShape(3, 3, 1, 0, 0)),
        ({"epochs": 1, "warmup_steps": 7, "lr_scheduler": "cosine"}, 8, RunShape(8, 8, 1, 7, 0)),
        ({"epochs": 1, "warmup_ratio": 1.0}, 8, RunShape(8, 8, 1, 8, 0)),
        ({"max_steps": 4}, None, RunShape(4, None, None, 0)),
    ],
)
def test_shape(kwargs, n_batches, shape):
    assert run_shape(RunConfig(**kwargs), n_batches) == shape


def test_no_evaluation_data_means_no_evaluation():
    assert run_shape(RunConfig(epochs=2), 8, has_eval=False).evaluations == 0


@pytest.mark.parametrize(
    "args, expected",
    [
        (
            ("--max-steps", "6", "--lr-scheduler", "polynomial", "--warmup-ratio", "1"),
            "--lr-scheduler polynomial needs at least one optimizer step after the warm-up: --warmup-ratio 1 covers all 6 steps",
        ),
        (
            ("--max-steps", "6", "--lr-scheduler", "polynomial", "--warmup-steps", "6"),
            "--warmup-steps 6 covers all 6 steps",
        ),
        (
            ("--epochs", "1", "--lr-scheduler", "polynomial", "--warmup-steps", "6"),
            "--warmup-steps 6 covers all 6 steps",
        ),
        (
            ("--max-steps", "4", "--warmup-steps", "1000"),
            "--warmup-steps 1000 is longer than the run (4 optimizer steps): the learning rate would never reach --lr",
        ),
        (
            ("--max-steps", "4", "--lr-scheduler", "cosine", "--warmup-steps", "5"),
            "--warmup-steps 5 is longer than the run",
        ),
        (
            ("--epochs", "1", "--early-stopping-patience", "2"),
            "--early-stopping-patience 2 can never stop this run: it evaluates 1 time (early stopping needs at least 3 "
            "evaluations; evaluate more often with --eval-steps N)",
        ),
        (("--epochs", "2", "--early-stopping-patience", "2"), "it evaluates 2 times"),
        (("--epochs", "1", "--load-best"), "--load-best: this run evaluates once, so its best evaluation is its last"),
        # Was: exit 0, the epoch end's evaluation only, and no word about --eval-steps.
        (
            ("--max-steps", "4", "--eval-steps", "100"),
            "--eval-steps 100 adds no evaluation to this run: it has 4 optimizer steps",
        ),
    ],
)
def test_options_the_run_cannot_use_are_refused_before_any_work(tmp_path, model, capsys, args, expected):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "results.json").write_text('{"runs": []}')  # an earlier run: must stay where it is
    code, err, out = run_cli(tmp_path, model, *args, capsys=capsys)
    assert code == 2 and "\n" not in err and expected in err, err
    assert (out / "results.json").read_text() == '{"runs": []}' and not list(out.glob("previous-*"))


def test_the_early_build_changes_nothing_in_the_runs(tmp_path, model, capsys):
    """--metric-for-best makes the check build the first run's model early: the run draws the same weights."""
    histories = []
    for name, extra in (("plain", ()), ("checked", ("--metric-for-best", "accuracy", "--warmup-steps", "1"))):
        code, err, out = run_cli(tmp_path / name, model, "--max-steps", "3", *extra, capsys=capsys)
        assert code == 0, err
        run = json.loads((out / "results.json").read_text())["runs"][0]
        histories.append(run["history"]["loss"][0])
    assert histories[0] == histories[1]  # the first step's loss: same weights, same batch


def test_a_patience_the_run_can_use_is_accepted(tmp_path, model, capsys):
    code, err, _ = run_cli(
        tmp_path, model, "--epochs", "2", "--eval-steps", "2", "--early-stopping-patience", "2", capsys=capsys
    )
    assert code == 0, err
