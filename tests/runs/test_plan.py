"""runs/plan.py: the one RunPlan a run asks, made before any work."""

from __future__ import annotations

import pytest

from mixft.config.run_config import RunConfig
from mixft.errors import UsageError
from mixft.results import RunResult, write_results
from mixft.runs.identity import run_meta
from mixft.runs.outdir import RESULTS_NAME
from mixft.runs.plan import make_plan


def test_a_comparison_plan_names_every_run_file_and_identity(tmp_path):
    cfg = RunConfig(
        output_dir=str(tmp_path), precisions=["fp32", "bf16"], seeds=[0, 1], save_model=True, predict_file="new.jsonl"
    )
    plan = make_plan(cfg, ["fp32", "bf16"])
    assert list(plan.runs) == [("fp32", 0), ("bf16", 0), ("fp32", 1), ("bf16", 1)]  # the order runs train in
    files = plan.runs[("bf16", 1)]
    assert files.checkpoint == tmp_path / "checkpoint-bf16-seed1.pt"
    assert files.step_checkpoints.format(step=4) == "checkpoint-bf16-seed1-step4.pt"
    assert files.saved_model == tmp_path / "model-bf16-seed1"
    assert files.predictions == tmp_path / "predictions-bf16-seed1.jsonl"
    assert dict(files.meta) == run_meta(cfg, "bf16", 1)
    assert plan.total == 4 and plan.results_path == tmp_path / "results.json"
    assert plan.kept("fp32", 0) is None and not plan.continues("fp32", 0)  # no --resume: every run starts


def test_a_single_run_gets_the_short_names_and_writes_no_report(tmp_path):
    plan = make_plan(RunConfig(output_dir=str(tmp_path)), ["bf16"])
    files = plan.runs[("bf16", 0)]
    assert files.checkpoint == tmp_path / "checkpoint.pt" and files.saved_model == tmp_path / "model"
    assert files.predictions is None


def test_resume_is_planned_once_and_the_plan_answers_it(tmp_path):
    cfg = RunConfig(output_dir=str(tmp_path), precisions=["fp32", "bf16"], seeds=[0], resume=True)
    write_results(
        tmp_path / RESULTS_NAME,
        [RunResult(precision="fp32", autocast_dtype=None, grad_scaler=False, device="cpu", device_name="cpu", seed=0)],
    )
    plan = make_plan(cfg, ["fp32", "bf16"])
    assert plan.kept("fp32", 0).precision == "fp32" and plan.kept("bf16", 0) is None
    assert not plan.continues("bf16", 0)  # no checkpoint: it starts


def test_an_output_path_that_is_a_file_is_refused_before_any_work(tmp_path):
    (tmp_path / "out").write_text("")
    with pytest.raises(UsageError, match="--output-dir"):
        make_plan(RunConfig(output_dir=str(tmp_path / "out")), ["fp32"])
