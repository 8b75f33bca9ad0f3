"""--fsdp checkpoints at the command line: written at the one-process cadence, resumed bit for bit, refused
in one line when they cannot go on; --fsdp with --compare, --gradient-checkpointing, --save-model (--eval-only's
sharded evaluation is tests/train/test_fsdp.py's, in its shared launch: the same metrics as one process).

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

from launch import fake_launch, torchrun  # noqa: E402
from launch_output import assert_torchrun_reports_exit_2_of_process_0, error_lines  # noqa: E402

from mixft.cli.main import main  # noqa: E402
from mixft.train.sharded_checkpoint import verify_sharded_checkpoint  # noqa: E402
from tests.cli_runs import bert_sst2_args  # noqa: E402

# 16 train sentences, 2 per process x 2 processes: 4 optimizer steps per epoch, 2 epochs = 8 steps,
# evaluated at steps 4 and 8 (--load-best on by default with 2 epochs).
STEPS = 8


args = functools.partial(bert_sst2_args, batch_size=2, epochs=2, checkpoint_every=1, save_total_limit=3)


def finetune(*argv: str, check: bool = True):
    return torchrun("scripts/finetune.py", *argv, check=check)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The run never stopped: (model, data, output dir), with --save-model."""

    def train(root):
        make_tiny_bert_dir(root / "bert")
        make_data_dir(root / "sst2", 16, 8)
        proc = finetune(*args(root / "bert", root / "sst2", root / "ref", "--fsdp", "--save-model"))
        (root / "launch.stdout").write_text(proc.stdout)
        (root / "launch.stderr").write_text(proc.stderr)

    root = made_once(tmp_path_factory, "fsdp-reference", train)
    return root / "bert", root / "sst2", root / "ref"


def printed(reference_out: Path) -> tuple[str, str]:
    """What the reference's launch printed: (stdout, stderr)."""
    return tuple((reference_out.parent / f"launch.{stream}").read_text() for stream in ("stdout", "stderr"))


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


def test_fsdp_run_prints_one_header_measures_each_process_and_saves_a_model_one_process_evaluates_alike(
    reference, tmp_path, capsys
):
    model, data, out = reference
    stdout, stderr = printed(out)
    assert stdout.count("mixft run") == 1
    assert "sharding   FSDP2 over 2 processes" in stdout and "DistributedDataParallel" not in stdout
    # The classifier's logits are a view (squeeze); FSDP2's warning about in-place ops on a view is not raised.
    assert "returned a view tensor" not in stderr
    run = run_of(out)
    # Memory per process: its shards of the parameters, gradients and AdamW state, beside the whole model's.
    memory = run["memory"]
    assert memory["sharding"] == {"kind": "fsdp", "world_size": 2} and len(memory["ranks"]) == 2
    whole = memory["whole_model"]
    for key in ("parameters", "gradients", "optimizer_state"):
        own = [rank[key] for rank in memory["ranks"]]
        assert own[0] == memory[key] and all(0 < x <= 0.6 * whole[key] for x in own), (key, own, whole)
        assert sum(own) >= whole[key]  # every byte held by someone (FSDP pads a dim 0 that does not divide)
    # The consolidated directory loads in one process, and predicts what the sharded model predicted
    # (the best weights, step 4's: the run's last evaluation is theirs).
    capsys.readouterr()
    assert main(bert_sst2_args(out / "model", data, tmp_path / "alone", "--eval-only", batch_size=2)) == 0
    alone = run_of(tmp_path / "alone")
    assert alone["eval"]["accuracy"] == run["eval"]["accuracy"]
    assert alone["eval"]["loss"] == pytest.approx(run["eval"]["loss"], rel=1e-5)  # same weights, same logits


def test_fsdp_resume_from_the_middle_of_an_epoch_equals_the_run_never_stopped(reference, tmp_path):
    model, data, ref = reference
    out = tmp_path / "resumed"
    out.mkdir()
    # Step 7: the middle of epoch 2, after the evaluation at step 4 (the best so far, its weights in the
    # checkpoint); the step whose checkpoint test_multinode.py's lost node leaves behind.
    shutil.copytree(ref / "checkpoint-step7.dcp", out / "checkpoint.dcp")
    proc = finetune(*args(model, data, out, "--fsdp", "--save-model", "--resume"))
    assert "resuming from" in proc.stderr and "step 7" in proc.stderr
    resumed, never = sharded_state(out / "checkpoint.dcp", tmp_path), sharded_state(ref / "checkpoint.dcp", tmp_path)
    assert_equal_tensors(resumed["model"], never["model"])  # the weights, bit for bit
    assert_equal_tensors(resumed["optimizers"]["state"], never["optimizers"]["state"])  # AdamW's moments
    assert_equal_tensors(resumed["states"]["best_model/weights"], never["states"]["best_model/weights"])
    assert_equal_tensors(saved_model(out / "model"), saved_model(ref / "model"))
    # results.json: every metric, step, loss, best and last evaluation (clocks and gauges aside).
    assert without_timings(run_of(out)) == without_timings(run_of(ref))


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
    assert "written by 2 processes, this run has 3: resume it with 2 processes in all " in line
    assert line.endswith("(torchrun --nproc-per-node 2 on one machine, or nodes x --nproc-per-node = 2)")
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


def edit_manifest(checkpoint: Path, edit) -> None:
    path = checkpoint / "mixft-manifest.json"
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))


def unlist(*names: str):
    def edit(manifest: dict) -> None:
        for name in names:
            del manifest["files"][name]

    return edit


def says_three_processes(checkpoint: Path) -> None:
    # Resumed with 3 processes: process 2's shards were never written.
    edit_manifest(checkpoint, lambda m: m.update(world_size=3))


def without_its_index(checkpoint: Path) -> None:
    # DCP's .metadata off the list and deleted: DCP falls back to each process's own, then fails in every one.
    edit_manifest(checkpoint, unlist(".metadata"))
    (checkpoint / ".metadata").unlink()


def with_a_shard_unlisted_and_cut_short(checkpoint: Path) -> None:
    # Off the list, no CRC is checked for it: DCP reads 100 bytes of a shard.
    edit_manifest(checkpoint, unlist("__1_0.distcp"))
    shard = checkpoint / "__1_0.distcp"
    shard.write_bytes(shard.read_bytes()[:100])


@pytest.mark.parametrize(
    "damage,world,said",
    [
        (says_three_processes, 3, "does not list __2_0.distcp; 3 processes write .metadata and __0_0.distcp to __2_0"),
        (without_its_index, 2, "does not list .metadata; 2 processes write"),
        (with_a_shard_unlisted_and_cut_short, 2, "does not list __1_0.distcp; 2 processes write"),
    ],
    ids=["world-size", "metadata", "shard"],
)
def test_an_edited_manifest_is_refused_as_damage(reference, tmp_path, monkeypatch, capsys, damage, world, said):
    # Was: the manifest was believed, and DCP failed in every process with a traceback (exit 1).
    model, data, ref = reference
    out = copy_of(ref, tmp_path / "out", "checkpoint.dcp")
    damage(out / "checkpoint.dcp")
    fake_launch(monkeypatch, world)
    line = refused(capsys, args(model, data, out, "--fsdp", "--resume"))
    assert f"sharded checkpoint {out / 'checkpoint.dcp'} is damaged (its mixft-manifest.json {said}" in line, line
    assert line.endswith("); delete it to start over"), line
    assert not (out / "results.json").exists()


def model_of_another_shape(path: Path, like: Path) -> Path:
    """``like``'s tiny BERT written again at ``path`` with a narrower feed-forward (37 -> 24): what
    regenerating a model directory with another config leaves there."""
    from transformers import BertConfig, BertModel

    config = BertConfig.from_pretrained(like)
    assert config.intermediate_size == 37
    config.intermediate_size = 24
    BertModel(config).save_pretrained(path)
    for tokenizer_file in like.glob("*.txt"):
        shutil.copy(tokenizer_file, path / tokenizer_file.name)
    for tokenizer_file in like.glob("*token*.json"):
        shutil.copy(tokenizer_file, path / tokenizer_file.name)
    return path


# The first parameter whose shape differs, with both shapes (was: the error cut at 200 characters, mid-word).
NARROWER = "intermediate.dense.weight has shape [37, 32] in the checkpoint, [24, 32] in this run's model"


def test_a_checkpoint_of_a_model_that_changed_shape_names_the_parameter_and_both_shapes(reference, tmp_path, capsys):
    # One process: the model directory at the same path regenerated with another shape between the two runs.
    _, data, ref = reference
    model = tmp_path / "bert"
    shutil.copytree(ref.parent / "bert", model)
    out = tmp_path / "out"
    assert main(args(model, data, out, "--max-steps", "1")) == 0
    (out / "results.json").unlink()  # as if it had been stopped before the end
    shutil.rmtree(model)
    model_of_another_shape(model, ref.parent / "bert")
    line = refused(capsys, args(model, data, out, "--max-steps", "1", "--resume"))
    assert f"--resume: checkpoint {out / 'checkpoint.pt'} does not fit this run (" in line
    assert NARROWER in line and line.endswith("; 2 more parameters differ in shape)"), line


def test_a_sharded_checkpoint_of_a_model_that_changed_shape_is_one_line_under_torchrun(reference, tmp_path):
    # Was: DCP's "Size mismatch" traceback from every process, exit 1 (the one-process resume refuses in one line).
    model, data, ref = reference
    other = model_of_another_shape(tmp_path / "bert-narrower", model)
    out = tmp_path / "out"
    out.mkdir()
    shutil.copytree(ref / "checkpoint-step6.dcp", out / "checkpoint.dcp")
    # The checkpoint a run on `other` would have left before `other` was regenerated with another shape
    # (the options and data match; only the model's path is recorded): one launch instead of two.
    edit_manifest(out / "checkpoint.dcp", lambda m: m["meta"].update(model=str(other.resolve())))
    proc = finetune(*args(other, data, out, "--fsdp", "--resume"), check=False)
    (line,) = error_lines(proc.stderr, "finetune.py")
    assert line.startswith(f"finetune.py: error: --resume: sharded checkpoint {out / 'checkpoint.dcp'} does not fit")
    # As the one-process resume says it (the check reads DCP's index before loading).
    assert line.endswith(f"(encoder.encoder.layer.0.{NARROWER}; 2 more parameters differ)"), line
    assert "Size mismatch" not in proc.stderr  # DCP's own words, in a traceback from every process
    assert_torchrun_reports_exit_2_of_process_0(proc)
    assert (
        verify_sharded_checkpoint(out / "checkpoint.dcp")["meta"]["step"] == 6 and not (out / "results.json").exists()
    )


def test_a_parameter_only_the_checkpoint_has_is_a_misfit_not_dropped(reference, tmp_path):
    # DCP loads the parameters the run asks for: a model regenerated with fewer layers would resume
    # without a word (seen: a 2-layer checkpoint resumed into 1 layer, exit 0), where one file refuses.
    from mixft.train.sharded_checkpoint import _model_misfit

    _, _, ref = reference
    model = sharded_state(ref / "checkpoint.dcp", tmp_path)["model"]  # whole tensors, by the model's names
    assert _model_misfit(ref / "checkpoint.dcp", model) is None
    fewer = {name: tensor for name, tensor in model.items() if ".layer.0." not in name}
    assert _model_misfit(ref / "checkpoint.dcp", fewer) == (
        "the checkpoint has encoder.encoder.layer.0.attention.self.query.weight, this run's model has not; "
        "15 more parameters differ"
    )


def test_a_sharded_checkpoint_resumed_without_fsdp_is_refused(reference, tmp_path, capsys):
    model, data, ref = reference
    out = copy_of(ref, tmp_path / "out", "checkpoint.dcp")
    line = refused(capsys, args(model, data, out, "--resume"))
    assert (
        "checkpoint.dcp is the sharded checkpoint of an --fsdp run; resume it with torchrun --nproc-per-node 2" in line
    )
    assert "(2 processes in all: on several machines, nodes x --nproc-per-node = 2)" in line
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
    # recomputing each block's activations in backward. Saved at epoch ends only (--checkpoint-every 0):
    # the reference tests the per-step cadence, and each save costs the launch a quarter of a second.
    model, data, ref = reference
    out = tmp_path / "compare"
    compare = ("--fsdp", "--compare", "fp32,bf16", "--gradient-checkpointing", "--checkpoint-every", "0")
    finetune(*args(model, data, out, *compare))
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
