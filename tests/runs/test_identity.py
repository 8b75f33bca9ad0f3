"""Run identity and the --resume plan (mixft.runs.identity): what is kept, what continues, what is refused.

Unit tests on a results.json written by hand and checkpoints of a two-parameter Trainer;
the CLI-level resume tests are in tests/test_resume.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from mixft.config.run_config import RunConfig
from mixft.results import RunResult, write_results
from mixft.runs.identity import check_meta, finished_runs, recorded_config, resume_runs, run_meta, same_option
from mixft.runs.outdir import RESULTS_NAME, checkpoint_name
from mixft.train.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from mixft.train.trainer import Trainer


def result(precision, message=None, kind=None, seed=0, steps=0):
    return RunResult(
        precision=precision,
        autocast_dtype=None,
        grad_scaler=False,
        device="cpu",
        device_name="cpu",
        seed=seed,
        stopped_early=message,
        stop_kind=kind,
        steps=steps,
    )


def tiny_checkpoint(path, meta, precision="fp32"):
    trainer = Trainer(nn.Linear(2, 1), lambda p: torch.optim.SGD(p, lr=0.1), nn.MSELoss(), [], precision=precision)
    return save_checkpoint(trainer, path, meta)


def test_resume_keeps_finished_runs_and_retrains_interrupted_ones_by_their_stop_kind(tmp_path):
    write_results(
        tmp_path / "results.json",
        [
            result("fp32"),
            result("bf16", "interrupted (SIGINT)", "interrupt"),
            result("fp16", "training collapsed: the loss is nan at step 6", "collapse"),
            result("tf32", "interrupted by my own callback's rule", "callback"),  # the message is not parsed
        ],
    )
    cfg = RunConfig(output_dir=str(tmp_path), precisions=["fp32", "bf16", "fp16", "tf32"])
    done = finished_runs(cfg, cfg.precisions)
    # Interrupted: continued from its checkpoint. Collapsed or stopped otherwise: kept as it ended.
    assert sorted(name for name, _ in done) == ["fp16", "fp32", "tf32"]
    assert done[("fp16", 0)].stop_kind == "collapse"


def test_resume_that_would_drop_a_run_results_json_holds_is_refused(tmp_path):
    """Was: --resume --compare bf16,fp16 on a finished fp32,bf16 directory rewrote results.json with bf16 and fp16
    only: the fp32 baseline was gone (no copy kept) and the report lost every ratio."""
    write_results(tmp_path / "results.json", [result("fp32"), result("bf16"), result("fp32", seed=1)])
    for precisions, seeds in ((["bf16", "fp16"], [0, 1]), (["fp32", "bf16"], [0])):
        cfg = RunConfig(output_dir=str(tmp_path), precisions=precisions, seeds=seeds, resume=True)
        with pytest.raises(CheckpointError, match=r"holds (fp32 seed 0, fp32 seed 1|fp32 seed 1), which this command"):
            finished_runs(cfg, cfg.precisions)
    # Every run it holds, and more: kept, and the new ones trained.
    cfg = RunConfig(output_dir=str(tmp_path), precisions=["fp32", "bf16", "fp16"], seeds=[0, 1], resume=True)
    assert sorted(finished_runs(cfg, cfg.precisions)) == [("bf16", 0), ("fp32", 0), ("fp32", 1)]


def test_an_option_mismatch_is_refused_naming_the_flag(tmp_path):
    path = tiny_checkpoint(tmp_path / "ckpt.pt", {"lr": 0.1})
    ckpt = load_checkpoint(path)
    with pytest.raises(CheckpointError, match=r"--lr 0.1, this run has 0.2"):
        check_meta(ckpt, {"lr": 0.2}, path)
    check_meta(ckpt, {"lr": 0.1, "not_recorded": 1}, path)  # same options (and unrecorded ones): accepted
    flagged = tiny_checkpoint(tmp_path / "flagged.pt", {"detect_collapse": True})
    with pytest.raises(CheckpointError, match=r"written with --no-collapse-check True, this run has False"):
        check_meta(load_checkpoint(flagged), {"detect_collapse": False}, flagged)  # the option's declared flag


def test_paths_and_worker_counts_compare_by_meaning(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    assert same_option("data_dir", "data/", str(tmp_path / "data"))
    assert not same_option("data_dir", "data", str(tmp_path / "other"))
    assert same_option("model", "bert-base-uncased", "bert-base-uncased")  # a hub name is not a path
    assert same_option("num_workers", 2, 1) and not same_option("num_workers", 0, 2)


def planned(cfg, precisions):
    """Each run's checkpoint path and identity, as the run plan makes them: ``resume_runs``' arguments."""
    single = len(precisions) * len(cfg.seeds) == 1
    paths = {(n, s): Path(cfg.output_dir) / checkpoint_name(n, s, single) for s in cfg.seeds for n in precisions}
    return paths, {key: run_meta(cfg, *key) for key in paths}


def test_resume_says_which_runs_are_kept_and_which_continue(tmp_path):
    cfg = RunConfig(output_dir=str(tmp_path), precisions=["fp32", "bf16"], seeds=[0], resume=True)
    write_results(tmp_path / RESULTS_NAME, [result("fp32")])
    tiny_checkpoint(tmp_path / checkpoint_name("bf16", 0, single=False), run_meta(cfg, "bf16", 0), "bf16")
    finished, continued = resume_runs(cfg, *planned(cfg, ["fp32", "bf16"]))
    assert finished[("fp32", 0)].precision == "fp32" and ("fp32", 0) not in continued
    assert ("bf16", 0) not in finished and ("bf16", 0) in continued
    no_resume = RunConfig(output_dir=str(tmp_path))
    assert resume_runs(no_resume, *planned(no_resume, ["fp32"])) == ({}, frozenset())  # reads nothing


def test_a_plan_with_nothing_to_resume_is_refused(tmp_path):
    cfg = RunConfig(output_dir=str(tmp_path), resume=True)
    with pytest.raises(CheckpointError, match=r"no checkpoint in .* \(looked for checkpoint.pt\)"):
        resume_runs(cfg, *planned(cfg, ["fp32"]))


def test_a_checkpoint_from_other_options_is_refused_by_the_plan(tmp_path):
    cfg = RunConfig(output_dir=str(tmp_path), resume=True, lr=1e-3)
    tiny_checkpoint(tmp_path / "checkpoint.pt", run_meta(RunConfig(output_dir=str(tmp_path), lr=2e-3), "fp32", 0))
    with pytest.raises(CheckpointError, match=r"--lr 0.002, this run has 0.001"):
        resume_runs(cfg, *planned(cfg, ["fp32"]))


def test_lora_options_are_part_of_a_runs_identity(tmp_path):
    # A LoRA run's checkpoint holds a peft-wrapped model: resuming it as a full fine-tune (or
    # with another rank) must be refused in one line, not crash loading the state dict.
    cfg = RunConfig(output_dir=str(tmp_path), lora=True, lora_r=8)
    path = tiny_checkpoint(tmp_path / "ckpt.pt", run_meta(cfg, "fp32", 0))
    ckpt = load_checkpoint(path)
    with pytest.raises(CheckpointError, match=r"--lora True, this run has False"):
        check_meta(ckpt, run_meta(RunConfig(output_dir=str(tmp_path)), "fp32", 0), path)
    with pytest.raises(CheckpointError, match=r"--lora-r 8, this run has 4"):
        check_meta(ckpt, run_meta(RunConfig(output_dir=str(tmp_path), lora=True, lora_r=4), "fp32", 0), path)


def test_an_option_left_to_its_default_is_named_as_such(tmp_path):
    # Was: "written with --max-length None".
    path = tiny_checkpoint(tmp_path / "ckpt.pt", {"max_length": None})
    with pytest.raises(CheckpointError, match=r"--max-length not set \(the default\), this run has 64"):
        check_meta(load_checkpoint(path), {"max_length": 64}, path)


def test_a_recipe_default_in_a_resume_refusal_is_said_to_be_one(tmp_path):
    # This run's 128 is bert-sst2's default, not a --max-length the user passed: the line says so.
    path = tiny_checkpoint(tmp_path / "ckpt.pt", {"max_length": 64})
    cfg = RunConfig(output_dir=str(tmp_path)).with_defaults({"max_length": 128})
    with pytest.raises(
        CheckpointError,
        match=r"--max-length 64, this run has 128 \(the recipe's default; pass "
        r"--max-length to set it\)",
    ):
        check_meta(load_checkpoint(path), {"max_length": 128}, path, cfg=cfg)
    typed = RunConfig(output_dir=str(tmp_path), max_length=128).with_defaults({"max_length": 128})
    with pytest.raises(CheckpointError, match=r"--max-length 64, this run has 128; rerun"):
        check_meta(load_checkpoint(path), {"max_length": 128}, path, cfg=typed)


def test_the_recorded_config_is_one_runs_options_with_its_data_files_fingerprinted(tmp_path):
    (tmp_path / "train.tsv").write_text("sentence\tlabel\ngood\t1\n", encoding="utf-8")
    (tmp_path / "dev.tsv").write_text("sentence\tlabel\nbad\t0\n", encoding="utf-8")
    cfg = RunConfig(data_dir=str(tmp_path), grad_accum=2, precisions=["fp32", "bf16"], seeds=[0, 1])
    recorded = recorded_config(cfg)
    assert recorded["grad_accum"] == 2 and recorded["data_dir"] == str(tmp_path)
    assert recorded["precisions"] is None and recorded["seeds"] is None  # each run's precision and seed say them
    assert recorded["data_files"] == run_meta(cfg, "fp32", 0)["data_files"]  # what --resume compares
    assert sorted(Path(f).name for f in recorded["data_files"]) == ["dev.tsv", "train.tsv"]
