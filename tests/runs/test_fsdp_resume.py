"""--fsdp checkpoints at the command line: written at the one-process cadence, resumed bit for bit, refused
in one line when they cannot go on; --fsdp with --compare, --gradient-checkpointing, --eval-only, --save-model.

As in test_resume.py, the continuation starts from a checkpoint the reference run wrote on its way
(its kept step checkpoints, ``--save-total-limit``): a resume from the middle of an epoch, after an
evaluation whose best weights the checkpoint carries, must end with the reference's weights bit for bit.
The refusals need no processes: ``fake_launch`` makes the run layer see a torchrun world of N without
joining a group (every refusal comes before one would be needed).
"""

from __future__ import annotations

import functools
import json
import shutil
import sys
from pathlib import Path

import pytest
import torch
from conftest import made_once, make_data_dir, make_tiny_bert_dir, without_timings

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from launch import torchrun  # noqa: E402

from mixft import distributed  # noqa: E402
from mixft.cli.main import main  # noqa: E402
from mixft.train.sharded_checkpoint import verify_sharded_checkpoint  # noqa: E402
from tests.cli_runs import bert_sst2_args  # noqa: E402

# 16 train sentences, 2 per process x 2 processes: 4 optimizer steps per epoch, 2 epochs = 8 steps,
# evaluated at steps 4 and 8 (--load-best on by default with 2 epochs).
STEPS = 8


args = functools.partial(bert_sst2_args, batch_size=2, epochs=2, checkpoint_every=1, save_total_limit=3)


def finetune(*argv: str):
    return torchrun("scripts/finetune.py", *argv)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The run never stopped: (model, data, output dir), with --save-model."""

    def train(root):
        make_tiny_bert_dir(root / "bert")
        make_data_dir(root / "sst2", 16, 8)
        finetune(*args(root / "bert", root / "sst2", root / "ref", "--fsdp", "--save-model"))

    root = made_once(tmp_path_factory, "fsdp-reference", train)
    return root / "bert", root / "sst2", root / "ref"


def sharded_state(directory: Path, tmp_path: Path) -> dict:
    """A sharded checkpoint's whole tensors, read in this one process (DCP's own converter)."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    target = tmp_path / f"{directory.parent.name}-{directory.name}.pt"
    dcp_to_torch_save(str(directory), str(target))
    return torch.load(target, weights_only=False)


def saved_model(directory: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(directory / "model.safetensors")


def run_of(out: Path) -> dict:
    (run,) = json.loads((out / "results.json").read_text())["runs"]
    return run


def assert_equal_tensors(a: dict, b: dict) -> None:
    """Every tensor of two (nested) state dicts equal, bit for bit."""
    a, b = flat(a), flat(b)
    assert a.keys() == b.keys()
    differing = [k for k in a if not torch.equal(a[k], b[k])]
    assert differing == [], f"{len(differing)} of {len(a)} tensors differ: {differing[:3]}"


def flat(state: dict, prefix: str = "") -> dict[str, torch.Tensor]:
    out = {}
    for key, value in state.items():
        if isinstance(value, dict):
            out.update(flat(value, f"{prefix}{key}."))
        elif isinstance(value, torch.Tensor):
            out[f"{prefix}{key}"] = value
    return out


def test_fsdp_run_writes_sharded_checkpoints_at_the_one_process_cadence(reference, tmp_path):
    _, _, out = reference
    # --checkpoint-every 1 --save-total-limit 3: the latest, and the newest 3 steps kept (hard links).
    assert sorted(p.name for p in out.glob("checkpoint*")) == [
        "checkpoint-step6.dcp",
        "checkpoint-step7.dcp",
        "checkpoint-step8.dcp",
        "checkpoint.dcp",
    ]
    assert not list(out.glob(".checkpoint*"))  # no temporary or previous version left behind
    manifest = verify_sharded_checkpoint(out / "checkpoint.dcp", world_size=2)  # every file's CRC
    assert manifest["meta"]["step"] == STEPS and manifest["meta"]["recipe"] == "bert-sst2"
    assert sorted(manifest["files"]) == [".metadata", "__0_0.distcp", "__1_0.distcp"]  # each process its shards
    latest, kept = out / "checkpoint.dcp" / "__1_0.distcp", out / "checkpoint-step8.dcp" / "__1_0.distcp"
    assert latest.stat().st_ino == kept.stat().st_ino  # kept by a link, not a second write
    assert verify_sharded_checkpoint(out / "checkpoint-step6.dcp")["meta"]["step"] == 6
    # --load-best under --fsdp: each process kept its own shards of the best weights (step 4's), carried
    # in the checkpoint; the saved model is those weights, consolidated, not the last step's.
    run = run_of(out)
    assert run["best"]["loaded"] and run["best"]["step"] == 4 and run["steps"] == STEPS
    state = sharded_state(out / "checkpoint.dcp", tmp_path)
    best, last = state["states"]["best_model/weights"], state["model"]
    assert any(not torch.equal(best[k], last[k]) for k in best)
    saved = saved_model(out / "model")
    as_saved = {k.removeprefix("encoder."): v for k, v in best.items() if k.removeprefix("encoder.") in saved}
    assert len(as_saved) == len(saved)
    assert_equal_tensors(as_saved, saved)


def test_fsdp_resume_from_the_middle_of_an_epoch_equals_the_run_never_stopped(reference, tmp_path):
    model, data, ref = reference
    out = tmp_path / "resumed"
    out.mkdir()
    # Step 6: the middle of epoch 2, after the evaluation at step 4 (the best so far, its weights in the checkpoint).
    shutil.copytree(ref / "checkpoint-step6.dcp", out / "checkpoint.dcp")
    proc = finetune(*args(model, data, out, "--fsdp", "--save-model", "--resume"))
    assert "resuming from" in proc.stderr and "step 6" in proc.stderr
    resumed, never = sharded_state(out / "checkpoint.dcp", tmp_path), sharded_state(ref / "checkpoint.dcp", tmp_path)
    assert_equal_tensors(resumed["model"], never["model"])  # the weights, bit for bit
    assert_equal_tensors(resumed["optimizers"]["state"], never["optimizers"]["state"])  # AdamW's moments
    assert_equal_tensors(resumed["states"]["best_model/weights"], never["states"]["best_model/weights"])
    assert_equal_tensors(saved_model(out / "model"), saved_model(ref / "model"))
    # results.json: every metric, step, loss, best and last evaluation (clocks and gauges aside).
    assert without_timings(run_of(out)) == without_timings(run_of(ref))


def fake_launch(monkeypatch, world: int) -> None:
    """What the run layer sees under torchrun with ``world`` processes, without joining a group."""
    monkeypatch.setenv("WORLD_SIZE", str(world))
    monkeypatch.setattr(distributed, "init_from_env", lambda: False)
    monkeypatch.setattr(distributed, "world_size", lambda: world)


def refused(capsys, argv: list[str]) -> str:
    capsys.readouterr()
    assert main(argv) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    return line


def copy_of(reference_out: Path, out: Path, *names: str) -> Path:
    out.mkdir()
    for name in names:
        source = reference_out / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, out / name)
    return out


def test_fsdp_resume_with_another_number_of_processes_is_refused(reference, tmp_path, monkeypatch, capsys):
    model, data, ref = reference
    out = copy_of(ref, tmp_path / "out", "checkpoint.dcp")
    fake_launch(monkeypatch, 3)
    line = refused(capsys, args(model, data, out, "--fsdp", "--resume"))
    assert "written by 2 processes, this run has 3: resume it with torchrun --nproc-per-node 2" in line
    assert line.startswith("finetune.py: error: --resume: sharded checkpoint")
    assert verify_sharded_checkpoint(out / "checkpoint.dcp")["meta"]["step"] == STEPS  # untouched


def test_a_damaged_sharded_checkpoint_is_refused_like_a_damaged_file(reference, tmp_path, monkeypatch, capsys):
    model, data, ref = reference
    out = copy_of(ref, tmp_path / "out", "checkpoint.dcp")
    shard = out / "checkpoint.dcp" / "__1_0.distcp"  # a copy, not a link to the reference's
    with open(shard, "r+b") as f:  # one flipped byte in process 1's shards
        f.seek(shard.stat().st_size // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    fake_launch(monkeypatch, 2)
    line = refused(capsys, args(model, data, out, "--fsdp", "--resume"))
    # The one-file format's treatment: one line naming the damage and the way out, exit 2, nothing trained.
    assert "__1_0.distcp is missing or fails its CRC check); delete it to start over" in line
    assert not (out / "results.json").exists()


def test_a_sharded_checkpoint_resumed_without_fsdp_is_refused(reference, tmp_path, capsys):
    model, data, ref = reference
    out = copy_of(ref, tmp_path / "out", "checkpoint.dcp")
    line = refused(capsys, args(model, data, out, "--resume"))
    assert (
        "checkpoint.dcp is the sharded checkpoint of an --fsdp run; resume it with torchrun --nproc-per-node 2" in line
    )
    assert not (out / "checkpoint.pt").exists()


def test_a_one_process_checkpoint_resumed_with_fsdp_is_refused(reference, tmp_path, monkeypatch, capsys):
    model, data, _ = reference
    out = tmp_path / "out"
    assert main(args(model, data, out, "--max-steps", "1")) == 0  # one process: checkpoint.pt
    (out / "results.json").unlink()  # as if it had been stopped before the end
    fake_launch(monkeypatch, 2)
    line = refused(capsys, args(model, data, out, "--max-steps", "1", "--fsdp", "--resume"))
    assert "checkpoint.pt is the checkpoint of a run without --fsdp (whole tensors, not shards)" in line
    assert "resume it without --fsdp" in line


def test_resume_save_model_of_a_finished_sharded_run_is_refused(reference, tmp_path, monkeypatch, capsys):
    model, data, ref = reference
    out = copy_of(ref, tmp_path / "out", "checkpoint.dcp", "results.json")
    fake_launch(monkeypatch, 2)
    line = refused(capsys, args(model, data, out, "--fsdp", "--resume", "--save-model"))
    assert "a finished sharded run's model is not saved from its checkpoint" in line


def test_a_checkpoint_left_aside_by_a_kill_between_the_renames_is_found_and_set_aside_whole(reference, tmp_path):
    # A save moves the previous directory to .checkpoint.dcp.old, then renames the new one in: killed
    # between the two, the previous checkpoint is the one to resume from (the new one's debris is ignored).
    from mixft.runs.set_aside import set_aside_earlier_run

    _, _, ref = reference
    out = tmp_path / "out"
    out.mkdir()
    shutil.copytree(ref / "checkpoint-step6.dcp", out / ".checkpoint.dcp.old")
    (out / ".checkpoint.dcp.tmp").mkdir()  # a new save's files without their manifest
    assert verify_sharded_checkpoint(out / "checkpoint.dcp", world_size=2)["meta"]["step"] == 6
    # A new run (not --resume) sets it aside with the rest, so a later --resume cannot take the old run's state.
    aside = set_aside_earlier_run(out, "20261127-000000")
    assert aside is not None and "1 checkpoint" in aside.notice
    assert not (out / ".checkpoint.dcp.old").exists()


def test_fsdp_compares_precisions_with_gradient_checkpointing(reference, tmp_path):
    # Both in one launch (each costs seconds): two sharded runs, each with its own sharded checkpoint,
    # recomputing each block's activations in backward.
    model, data, ref = reference
    out = tmp_path / "compare"
    finetune(*args(model, data, out, "--fsdp", "--compare", "fp32,bf16", "--gradient-checkpointing"))
    runs = {run["precision"]: run for run in json.loads((out / "results.json").read_text())["runs"]}
    assert sorted(runs) == ["bf16", "fp32"] and (out / "report.md").is_file()
    for name, run in runs.items():
        manifest = verify_sharded_checkpoint(out / f"checkpoint-{name}-seed0.dcp", world_size=2)
        assert manifest["meta"]["precision"] == name and run["steps"] == STEPS
        assert all(0 < loss < 1.0 for loss in run["history"]["loss"]), run["history"]["loss"]  # finite, near ln 2
    # Recomputation changes memory, not arithmetic: the fp32 run ends where the reference (no recompute) did.
    fp32 = sharded_state(out / "checkpoint-fp32-seed0.dcp", tmp_path)["model"]
    assert_equal_tensors(fp32, sharded_state(ref / "checkpoint.dcp", tmp_path)["model"])
    saved = runs["fp32"]["memory"]["saved_activations_peak"]
    assert saved < run_of(ref)["memory"]["saved_activations_peak"]


def test_fsdp_eval_only_evaluates_a_saved_model_as_the_run_did(reference, tmp_path):
    _, data, ref = reference
    out = tmp_path / "eval"
    proc = finetune(
        "--recipe",
        "bert-sst2",
        "--model",
        str(ref / "model"),
        "--data-dir",
        str(data),
        "--batch-size",
        "2",
        "--eval-only",
        "--fsdp",
        "--output-dir",
        str(out),
        "--no-progress",
    )
    assert "sharding   FSDP2 over 2 processes" in proc.stdout and "checkpoint" not in proc.stdout
    run, trained = run_of(out), run_of(ref)
    assert run["steps"] == 0 and not list(out.glob("checkpoint*"))
    assert run["eval"]["accuracy"] == trained["eval"]["accuracy"]
    assert run["eval"]["loss"] == pytest.approx(trained["eval"]["loss"], rel=1e-5)  # the best weights' evaluation
