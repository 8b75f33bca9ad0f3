"""A tracker's failure is contained (issue 30): one warning, the tracker off, the run and its results intact."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from mixft.callbacks.tracker_guard import bounded_mlflow_requests
from mixft.callbacks.trackers import TensorBoardTracker, Tracker, directory_project
from mixft.train.trainer import Trainer
from tests.cli_runs import run_cli
from tests.tiny_models import make_tiny_model_dir


class Broken(Tracker):
    """A tracker whose writer fails at one of its calls."""

    KIND = "broken"

    def __init__(self, fail_at: str):
        super().__init__("fp32-seed0", hparams={}, hardware={}, every=1)
        self.fail_at, self.calls, self.closed = fail_at, [], 0

    def _maybe_fail(self, call: str) -> None:
        self.calls.append(call)
        if call == self.fail_at:
            raise OSError(f"[Errno 28] No space left on device ({call})")

    def _open(self, trainer):
        self._maybe_fail("open")

    def _log_params(self, params):
        self._maybe_fail("params")

    def _log_metrics(self, step, values):
        self._maybe_fail("eval" if any(k.startswith("eval/") for k in values) else "step")

    def _close(self):
        self.closed += 1
        self._maybe_fail("close")


def fit(callbacks):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 5, generator=g)
    loader = [(x[i : i + 4], (x[i : i + 4, 0] > 0).long()) for i in range(0, 16, 4)]
    trainer = Trainer(
        nn.Linear(5, 2),
        lambda p: torch.optim.SGD(p, lr=0.5),
        nn.CrossEntropyLoss(),
        loader,
        eval_loader=loader[:2],
        device="cpu",
        epochs=2,
        predict_fn=lambda out: out.argmax(-1),
        seed=0,
        callbacks=callbacks,
    )
    return trainer.fit()


@pytest.mark.parametrize("fail_at", ["open", "params", "step", "eval", "close"])
def test_a_failing_tracker_never_stops_the_run(fail_at, caplog):
    tracker = Broken(fail_at)
    result = fit([tracker])
    assert result.steps == 8 and result.eval and not result.stopped_early
    warnings = [r.getMessage() for r in caplog.records if "--report-to broken stopped" in r.getMessage()]
    assert len(warnings) == 1 and "No space left on device" in warnings[0], warnings
    assert "training goes on, results.json is not affected" in warnings[0]
    assert tracker.calls.count(fail_at) == 1  # off after its first failure: nothing more was tried
    assert tracker.closed == 1


def test_bounded_mlflow_requests_keep_what_the_user_set(monkeypatch):
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", raising=False)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "300")
    import os

    with bounded_mlflow_requests(retries=0, timeout_s=5):
        assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "0"
        assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "300"
    assert "MLFLOW_HTTP_REQUEST_MAX_RETRIES" not in os.environ and os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "300"


def test_two_directories_of_one_name_are_two_projects(tmp_path):
    a, b = directory_project(tmp_path / "a" / "run"), directory_project(tmp_path / "b" / "run")
    assert a != b and a.startswith("run-") and b.startswith("run-")
    assert directory_project(tmp_path / "a" / "run") == a


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return make_tiny_model_dir("bert", tmp_path_factory.mktemp("tiny") / "bert")


def test_a_tensorboard_writer_failing_mid_run_keeps_the_results(tmp_path, model, capsys, monkeypatch):
    pytest.importorskip("tensorboard")

    def full_disk(self, step, values):
        raise OSError("[Errno 28] No space left on device")

    monkeypatch.setattr(TensorBoardTracker, "_log_metrics", full_disk)
    code, err, out = run_cli(tmp_path, model, "--max-steps", "3", "--report-to", "tensorboard", capsys=capsys)
    assert code == 0, err
    assert json.loads((out / "results.json").read_text())["runs"][0]["steps"] == 3
    assert err.count("--report-to tensorboard stopped at step") == 1 and "Traceback" not in err
