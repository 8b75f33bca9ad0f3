"""Where each tracker writes is checked before any work (issue 30): one line, exit 2, nothing touched."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from conftest import free_port

from tests.cli_runs import run_cli
from tests.tiny_models import make_tiny_model_dir


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return make_tiny_model_dir("bert", tmp_path_factory.mktemp("tiny") / "bert")


@pytest.mark.parametrize(
    "tracker, occupied",
    [
        ("tensorboard", "tensorboard"),
        ("tensorboard", "tensorboard/fp32-seed0"),
        ("mlflow", "mlruns"),
    ],
)
def test_a_file_where_a_tracker_writes_is_refused_before_any_work(
    tmp_path, model, capsys, monkeypatch, tracker, occupied
):
    pytest.importorskip(tracker)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    out = tmp_path / "out"
    (out / occupied).parent.mkdir(parents=True, exist_ok=True)
    (out / occupied).write_text("not a directory")
    (out / "results.json").write_text('{"runs": []}')  # an earlier run's: must stay where it is
    code, err, _ = run_cli(tmp_path, model, "--max-steps", "2", "--report-to", tracker, capsys=capsys)
    assert code == 2 and "\n" not in err, err
    assert f"--report-to {tracker}: {out / occupied} exists and is not a directory" in err
    assert (out / "results.json").read_text() == '{"runs": []}' and not list(out.glob("previous-*"))


def test_an_mlflow_server_that_does_not_answer_is_refused_in_seconds(tmp_path, model, capsys, monkeypatch):
    pytest.importorskip("mlflow")
    uri = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    started = time.perf_counter()
    code, err, out = run_cli(tmp_path, model, "--max-steps", "2", "--report-to", "mlflow", capsys=capsys)
    assert code == 2 and "\n" not in err, err
    assert f"--report-to mlflow: MLFLOW_TRACKING_URI {uri} does not answer" in err
    assert time.perf_counter() - started < 60  # MLflow's own retries take minutes
    assert not (out / "results.json").exists()


def test_an_unusable_tracking_uri_is_one_line(tmp_path, model, capsys, monkeypatch):
    pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "bogus://x")
    code, err, _ = run_cli(tmp_path, model, "--max-steps", "2", "--report-to", "mlflow", capsys=capsys)
    assert code == 2 and "\n" not in err and "MLFLOW_TRACKING_URI bogus://x does not answer" in err, err
