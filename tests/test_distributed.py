"""Data parallelism for real: two CPU processes (gloo) under torchrun."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import launch
import pytest
import torch
from conftest import made_once

from mixft.data.batching import LengthGroupedBatchSampler

ROOT = Path(__file__).resolve().parents[1]


# tests/launch.py's launcher, with this file's own time limit.
torchrun = functools.partial(launch.torchrun, timeout=240)


def test_sharded_batches_cover_every_example_once_with_equal_counts():
    lengths = [i % 13 + 1 for i in range(103)]
    shards = [LengthGroupedBatchSampler(lengths, 4, seed=5, num_replicas=2, rank=r) for r in range(2)]
    for s in shards:
        s.set_epoch(1)
    batches = [list(s) for s in shards]
    assert len(batches[0]) == len(batches[1]) == len(shards[0]) == 13  # 26 of 26 full batches
    seen = [i for rank_batches in batches for b in rank_batches for i in b]
    assert len(seen) == len(set(seen))  # no example twice
    # 26 global batches (25 of 4, one of 3): all 26 fit evenly on 2 ranks, so nothing is dropped.
    assert sorted(seen) == list(range(103))
    single = LengthGroupedBatchSampler(lengths, 4, seed=5, num_replicas=1, rank=0)
    single.set_epoch(1)
    global_order = list(single)
    # rank r takes global batches r, r+2, r+4, ... of the same order.
    assert batches[0] == global_order[0:26:2] and batches[1] == global_order[1:26:2]


def test_eval_shards_keep_every_example():
    lengths = [1] * 10
    shards = [list(LengthGroupedBatchSampler(lengths, 3, shuffle=False, num_replicas=2, rank=r)) for r in range(2)]
    assert sorted(i for s in shards for b in s for i in b) == list(range(10))


DDP_RUNS = [("fp32", 1), ("bf16", 1), ("fp32", 2), ("fp16", 2)]


STOPPED = ["collapse:fp32:1", "signal:fp32:1"]


@pytest.fixture(scope="module")
def ddp_runs(tmp_path_factory):
    """DDP_RUNS and STOPPED trained in one torchrun launch: ``{"fp32:1": [rank 0's, rank 1's], ...}``
    (and the signalled run's checkpoint, ``"checkpoint"``)."""
    runs = [f"{p}:{a}" for p, a in DDP_RUNS] + STOPPED
    folder = made_once(
        tmp_path_factory,
        "ddp-runs",
        lambda folder: torchrun("tests/ddp_worker.py", str(folder / "ddp"), ",".join(runs)),
    )
    ranks = [torch.load(folder / f"ddp.rank{r}") for r in range(2)]
    return {run: [r[run] for r in ranks] for run in runs} | {"checkpoint": folder / "ddp.signal.pt"}


@pytest.mark.parametrize("precision,grad_accum", DDP_RUNS)
def test_two_process_ddp_equals_single_process_accumulation(ddp_runs, precision, grad_accum):
    sys.path.insert(0, str(ROOT / "tests"))
    import ddp_worker

    ddp = ddp_runs[f"{precision}:{grad_accum}"][0]
    assert ddp["world"] == 2
    # Two ranks x grad_accum micro-batches of 4, gradients averaged == one process
    # accumulating 2 x grad_accum micro-batches of 4.
    trainer, result = ddp_worker.train(precision, grad_accum=2 * grad_accum)
    assert ddp["steps"] == result.steps == 8 // (2 * grad_accum)
    assert ddp["samples"] == trainer.state.samples == 32  # global count, not one rank's
    # DDP all-reduced once per window: every micro-batch but a window's last ran under no_sync.
    assert ddp["no_sync_calls"] == ddp["steps"] * (grad_accum - 1)
    # fp16: both runs scaled, unscaled and stepped alike (DDP averages the scaled gradients).
    assert (ddp["final_loss_scale"], ddp["skipped"]) == (result.final_loss_scale, result.skipped_steps)
    single = torch.cat([p.detach().reshape(-1) for p in trainer.module.parameters()])
    tol = {"fp32": dict(rtol=1e-5, atol=1e-6), "bf16": dict(rtol=2e-2, atol=2e-3), "fp16": dict(rtol=1e-2, atol=1e-3)}
    torch.testing.assert_close(ddp["weights"], single, **tol[precision])
    # Metrics gathered from both ranks' shards equal the single-process evaluation.
    assert ddp["eval"]["accuracy"] == pytest.approx(result.eval["accuracy"])
    assert ddp["eval"]["loss"] == pytest.approx(result.eval["loss"], rel=1e-4)


def test_a_collapse_seen_by_one_ddp_process_stops_both_after_the_same_step_with_its_reason(ddp_runs):
    # Process 1 alone sees a NaN loss after step 2. Stopping alone, it would leave process 0
    # waiting in the next gradient all-reduce (the launch would time out).
    ranks = ddp_runs["collapse:fp32:1"]
    for rank in ranks:
        assert rank["stop_kind"] == "collapse" and rank["step"] == 2
        assert "the loss is nan at step 2" in rank["stopped_early"]
    assert "(in process 1)" in ranks[0]["stopped_early"]
    torch.testing.assert_close(ranks[0]["weights"], ranks[1]["weights"], rtol=0, atol=0)  # the same 2 steps


def test_a_signal_seen_by_one_ddp_process_stops_both_after_the_same_step_and_saves(ddp_runs):
    from mixft.train.checkpoint import load_checkpoint

    ranks = ddp_runs["signal:fp32:1"]
    for rank in ranks:
        assert rank["stop_kind"] == "interrupt" and rank["step"] == 2
    # Process 0 saw none itself: it stops, says and exits (143) as process 1 does.
    assert ranks[0]["stopped_early"] == ranks[1]["stopped_early"] == "interrupted (SIGTERM)"
    assert ranks[0]["exit_code"] == ranks[1]["exit_code"] == 143
    assert load_checkpoint(ddp_runs["checkpoint"])["meta"]["step"] == 2  # process 0 saved the step both stopped at


def test_cli_under_torchrun_keeps_the_best_model_stops_early_and_writes_results_once(
    tmp_path, tiny_bert_dir, tiny_data_dir
):
    # Every rank evaluates its shard and the metrics are all-reduced, so every rank keeps the
    # same best step; rank 0 alone prints the summary and writes results.json and the saved model.
    # (One launch for all of it: each torchrun launch costs the suite about 20 s. The text-classification
    # recipe under torchrun is tests/train/test_fsdp.py's decoder launch.)
    out = tmp_path / "out"
    proc = torchrun(
        "scripts/finetune.py",
        "--recipe",
        "bert-sst2",
        "--model",
        str(tiny_bert_dir),
        "--data-dir",
        str(tiny_data_dir),
        "--batch-size",
        "2",
        "--epochs",
        "2",
        "--eval-steps",
        "1",
        "--metric-for-best",
        "loss",
        "--early-stopping-patience",
        "2",
        "--save-model",
        "--amp",  # every process chooses alike (runs.plan: process 0's probe, one precision for the job)
        "--output-dir",
        str(out),
        "--no-progress",
    )
    assert proc.stdout.count("mixft run") == 1  # only rank 0 prints the summary
    assert "parallel   2 processes" in proc.stdout
    (run,) = json.loads((out / "results.json").read_text())["runs"]
    assert run["precision_requested"] == "amp" and run["precision"] in ("fp32", "bf16")
    assert 0 < run["steps"] <= 8  # 16 examples / (2 per rank x 2 ranks) x 2 epochs, or fewer when stopped early
    assert 0.0 <= run["eval"]["accuracy"] <= 1.0
    losses = [(e["step"], e["loss"]) for e in run["eval_history"]]
    best_step, best_loss = min(losses, key=lambda sl: sl[1])
    assert run["best"]["step"] == best_step and run["best"]["metrics"]["loss"] == pytest.approx(best_loss)
    assert run["best"]["loaded"] and run["eval"]["loss"] == pytest.approx(best_loss)
    assert (out / "model" / "config.json").is_file()
    # Each process evaluated its shard; the gathered predictions and labels are in dev.tsv's row order.
    rows = (tiny_data_dir / "dev.tsv").read_text().splitlines()[1:]
    assert run["eval_labels"] == [int(row.split("\t")[-1]) for row in rows]
    assert len(run["eval_predictions"]) == len(rows)
    if run["stop_kind"] == "early_stopping":  # two evaluations in a row without a better loss
        steps = [s for s, _ in losses]
        assert steps[-1] - best_step == 2 and run["steps"] == steps[-1]


def test_predict_file_is_refused_under_torchrun(tmp_path, tiny_bert_dir, monkeypatch, capsys):
    # Each rank would predict its shard of the file: refused in one line instead of a partial file.
    # What the run layer sees under torchrun with 2 processes, in this process (how torchrun delivers
    # a refusal, one line from process 0, is tests/cli/test_launch_messages.py's).
    from mixft.cli.main import main

    launch.fake_launch(monkeypatch, 2)
    rows = "".join(f"{'good fine film' if i % 2 else 'bad dull plot'},{'pos' if i % 2 else 'neg'}\n" for i in range(16))
    (tmp_path / "t.csv").write_text("text,label\n" + rows)
    argv = ["--recipe", "text-classification", "--model", str(tiny_bert_dir), "--train-file", str(tmp_path / "t.csv")]
    argv += ["--validation-split", "0.25", "--predict-file", str(tmp_path / "t.csv"), "--max-steps", "1"]
    assert main([*argv, "--output-dir", str(tmp_path / "out"), "--no-progress"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "--predict-file is not supported under torchrun" in line
    assert not (tmp_path / "out").exists()
