"""Trackers: what a real (tiny) training run logs, read back with each library's own reader."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os

import pytest
import torch
from torch import nn

from mixft.callbacks.trackers import (
    MLflowTracker,
    TensorBoardTracker,
    TrackioTracker,
    build_trackers,
    check_trackers,
    flat_params,
    parse_report_to,
    run_name,
)
from mixft.errors import UsageError
from mixft.train.trainer import Trainer

HARDWARE = {"device": "cpu", "cpu": {"model": "test-cpu", "cores": 2}}


def tiny_run(callbacks, *, epochs: int = 2, n: int = 24, batch: int = 4, precision: str = "fp32", seed: int = 0):
    """A 2-class linear model on separable data: 6 optimizer steps per epoch, an evaluation at each epoch end."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 5, generator=g)
    y = (x[:, 0] > 0).long()
    loader = [(x[i : i + batch], y[i : i + batch]) for i in range(0, n, batch)]
    torch.manual_seed(0)
    trainer = Trainer(
        nn.Linear(5, 2),
        lambda p: torch.optim.SGD(p, lr=0.5),
        nn.CrossEntropyLoss(),
        loader,
        eval_loader=loader[:2],
        precision=precision,
        device="cpu",
        epochs=epochs,
        predict_fn=lambda out: out.argmax(-1),
        seed=seed,
        callbacks=callbacks,
    )
    return trainer, trainer.fit()


def scalars(run_dir, tag):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir))
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def test_tensorboard_event_file_holds_the_logged_scalars(tmp_path):
    tracker = TensorBoardTracker(tmp_path / "tensorboard", "fp32-seed0", every=4, hardware=HARDWARE)
    _, result = tiny_run([tracker])
    run_dir = tmp_path / "tensorboard" / "fp32-seed0"
    assert result.steps == 12
    loss = scalars(run_dir, "train/loss")
    assert [s for s, _ in loss] == list(range(1, 13))  # every step, also the 4 past the last full buffer
    assert [v for _, v in loss] == pytest.approx(result.history["loss"], rel=1e-6)
    assert [v for _, v in scalars(run_dir, "train/grad_norm")] == pytest.approx(result.history["grad_norm"], rel=1e-6)
    assert [v for _, v in scalars(run_dir, "train/learning_rate")] == pytest.approx([0.5] * 12)
    assert [v for _, v in scalars(run_dir, "train/skipped")] == [0.0] * 12
    # One evaluation per epoch end, at its step, with every metric.
    assert [(s, pytest.approx(v)) for s, v in scalars(run_dir, "eval/accuracy")] == [
        (e["step"], e["accuracy"]) for e in result.eval_history
    ]
    assert len(scalars(run_dir, "eval/loss")) == 2 and len(scalars(run_dir, "eval/samples_per_s")) == 2


def test_tensorboard_logs_config_and_hardware_once(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    def logged(name):
        acc = EventAccumulator(str(tmp_path / name))
        acc.Reload()
        content = acc.PluginTagToContent("hparams")["_hparams_/session_start_info"]
        return plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info.hparams

    # The run layer hands the run's options at construction; a tracker without them knows the trainer's
    # precision and seed.
    given = TensorBoardTracker(
        tmp_path, "given", hardware=HARDWARE, hparams={"lr": 0.5, "precisions": None, "precision": "bf16", "seed": 3}
    )
    alone = TensorBoardTracker(tmp_path, "bf16-seed3", hardware=HARDWARE)
    tiny_run([given, alone], precision="bf16", seed=3, epochs=1)
    hp = logged("given")
    assert hp["config.precision"].string_value == "bf16" and hp["config.seed"].number_value == 3
    assert hp["config.lr"].number_value == 0.5 and hp["hardware.cpu.model"].string_value == "test-cpu"
    hp = logged("bf16-seed3")
    assert hp["config.precision"].string_value == "bf16" and hp["config.seed"].number_value == 3
    assert "config.lr" not in hp


def test_compared_runs_overlay_under_one_log_dir(tmp_path):
    for precision in ("fp32", "bf16"):
        trackers = build_trackers(["tensorboard"], tmp_path, run_name(precision, 0), hardware=HARDWARE)
        tiny_run(trackers, precision=precision, epochs=1)
    runs = sorted(p.name for p in (tmp_path / "tensorboard").iterdir())
    assert runs == ["bf16-seed0", "fp32-seed0"]
    assert all(len(scalars(tmp_path / "tensorboard" / r, "train/loss")) == 6 for r in runs)


def test_eval_metrics_logged_once_per_evaluation(tmp_path):
    tracker = TensorBoardTracker(tmp_path, "r", hardware=HARDWARE)
    trainer, _ = tiny_run([tracker], epochs=1)
    # A trainer with on_evaluate calls both hooks at an epoch end: still one point.
    tracker2 = TensorBoardTracker(tmp_path, "r2", hardware=HARDWARE)
    tracker2.on_train_begin(trainer)
    tracker2.on_evaluate(trainer, {"accuracy": 0.5})
    tracker2.on_epoch_end(trainer, {"accuracy": 0.5})
    tracker2.close()
    assert len(scalars(tmp_path / "r", "eval/accuracy")) == 1
    assert len(scalars(tmp_path / "r2", "eval/accuracy")) == 1


def test_device_tensors_are_read_only_every_n_steps(tmp_path, monkeypatch):
    tracker = TensorBoardTracker(tmp_path, "r", every=5, hardware=HARDWARE)
    flushes = []
    original = tracker.flush
    monkeypatch.setattr(tracker, "flush", lambda: (flushes.append(len(tracker._pending)), original())[1])
    tiny_run([tracker], epochs=1)  # 6 steps, then an evaluation, then the end
    assert flushes[0] == 5  # the first read holds 5 steps: none was read on its own
    assert sum(flushes) == 6


def test_non_finite_values_are_left_out_and_skips_counted(tmp_path):
    from mixft.train.hooks import StepInfo

    tracker = TensorBoardTracker(tmp_path, "r", every=10, hardware=HARDWARE)
    trainer, _ = tiny_run([], epochs=1)
    tracker.on_train_begin(trainer)
    tracker.on_step_end(trainer, StepInfo(1, 0, torch.tensor(0.7), torch.tensor(2.0), 0.1, 1024.0, False))
    tracker.on_step_end(trainer, StepInfo(2, 0, torch.tensor(0.6), torch.tensor(float("inf")), 0.1, 512.0, True))
    tracker.close()
    assert scalars(tmp_path / "r", "train/grad_norm") == [(1, 2.0)]
    assert scalars(tmp_path / "r", "train/skipped") == [(1, 0.0), (2, 1.0)]
    assert scalars(tmp_path / "r", "train/loss_scale") == [(1, 1024.0), (2, 512.0)]


def test_report_to_parsing():
    assert parse_report_to("TensorBoard, mlflow,tensorboard") == ["tensorboard", "mlflow"]
    assert parse_report_to("none") == [] and parse_report_to(None) == [] and parse_report_to("") == []
    with pytest.raises(
        UsageError, match=r"--report-to: unknown tracker 'wandb' \(choose from tensorboard, mlflow, trackio, or none\)"
    ):
        parse_report_to("tensorboard,wandb")


def test_missing_package_names_the_extra(monkeypatch):
    # Both states are simulated, whatever this environment has installed: tensorboard
    # "present", mlflow "absent".
    present = importlib.machinery.ModuleSpec("tensorboard", None)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: {"tensorboard": present, "mlflow": None}[name])
    assert check_trackers("tensorboard") == ["tensorboard"]
    with pytest.raises(UsageError) as e:
        check_trackers("tensorboard,mlflow")
    assert str(e.value) == '--report-to mlflow needs the mlflow package: pip install "mixft[mlflow]"'


def test_flat_params():
    assert flat_params({"config": {"precisions": ["fp32", "bf16"], "model": None, "lr": 2e-5, "extra": {"a": 1}}}) == {
        "config.precisions": "fp32,bf16",
        "config.model": "None",
        "config.lr": 2e-5,
        "config.extra.a": 1,
    }


def test_mlflow_run_holds_the_metrics_and_params(tmp_path):
    from mlflow import MlflowClient

    tracker = MLflowTracker(tmp_path / "mlruns", "fp32-seed0", experiment="demo", hardware=HARDWARE, every=4)
    _, result = tiny_run([tracker])
    client = MlflowClient(tracking_uri=(tmp_path / "mlruns").resolve().as_uri())
    run = client.get_run(tracker.run_id)
    assert run.info.run_name == "fp32-seed0" and run.info.status == "FINISHED"
    assert run.data.params["config.precision"] == "fp32" and run.data.params["hardware.cpu.model"] == "test-cpu"
    history = sorted(client.get_metric_history(tracker.run_id, "train/loss"), key=lambda m: m.step)
    assert [m.step for m in history] == list(range(1, 13))
    assert [m.value for m in history] == pytest.approx(result.history["loss"], rel=1e-6)
    evals = client.get_metric_history(tracker.run_id, "eval/accuracy")
    assert sorted(m.step for m in evals) == [6, 12]


def test_trackio_run_holds_the_metrics():
    import trackio
    from trackio.sqlite_storage import SQLiteStorage

    # conftest points TRACKIO_DIR (read once, at trackio's import) at the session's temporary folder.
    assert str(trackio.utils.TRACKIO_DIR) == os.environ["TRACKIO_DIR"]
    tracker = TrackioTracker("mixft-test", "bf16-seed0", hardware=HARDWARE, every=4)
    _, result = tiny_run([tracker], precision="bf16", epochs=1)
    logs = [row for row in SQLiteStorage.get_logs("mixft-test", "bf16-seed0") if "train/loss" in row]
    assert [row["step"] for row in logs] == list(range(1, 7))
    assert [row["train/loss"] for row in logs] == pytest.approx(result.history["loss"], rel=1e-6)


def test_a_resumed_run_writes_on_in_the_same_mlflow_and_trackio_runs(
    tmp_path, tiny_bert_dir, tiny_data_dir, monkeypatch
):
    """Was: ``--resume`` opened a second MLflow run and a second trackio run (a later start time in the name),
    splitting one training's curves and parameters in two. Ctrl-C at step 2 of 4, then --resume: one run each,
    steps 1-4, and the MLflow run finished."""
    import json
    import signal

    import trackio
    from mlflow import MlflowClient
    from trackio.sqlite_storage import SQLiteStorage

    import mixft.callbacks.trackers as trackers
    from mixft.cli.main import main
    from tests.cli_runs import bert_sst2_args

    out = tmp_path / "out"
    argv = bert_sst2_args(tiny_bert_dir, tiny_data_dir, out, "--report-to", "mlflow,trackio", epochs=1, batch_size=4)
    original = trackers.Tracker.on_step_end

    def ctrl_c_at_step_2(self, trainer, info):
        original(self, trainer, info)
        if info.step == 2 and self.KIND == "mlflow":
            signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(trackers.Tracker, "on_step_end", ctrl_c_at_step_2)
    assert main(argv) == 130
    monkeypatch.setattr(trackers.Tracker, "on_step_end", original)
    assert main([*argv, "--resume"]) == 0
    run = json.loads((out / "results.json").read_text())["runs"][0]
    assert run["steps"] == 4

    client = MlflowClient(tracking_uri=(out / "mlruns").resolve().as_uri())
    (experiment,) = [e for e in client.search_experiments() if e.name == trackers.directory_project(out)]
    (mlflow_run,) = client.search_runs([experiment.experiment_id])
    assert mlflow_run.info.status == "FINISHED" and mlflow_run.data.params["config.precision"] == "fp32"
    history = sorted(client.get_metric_history(mlflow_run.info.run_id, "train/loss"), key=lambda m: m.step)
    assert [m.step for m in history] == [1, 2, 3, 4]

    project = trackers.directory_project(out)
    (name,) = SQLiteStorage.get_runs(project)
    assert name == mlflow_run.info.run_name  # one start time names both
    steps = [row["step"] for row in SQLiteStorage.get_logs(project, name) if "train/loss" in row]
    assert steps == [1, 2, 3, 4]
    assert trackio  # imported first: conftest's TRACKIO_DIR is the store both runs wrote
