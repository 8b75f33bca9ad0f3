"""The output directory: its file names, wrong kinds of entries refused, one run at a time."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import mixft
from mixft import output_names
from mixft.callbacks.tracker_names import TRACKER_FOLDERS, TRACKERS
from mixft.errors import UsageError
from mixft.runs.outdir import (
    LOCK_NAME,
    OutputLock,
    check_output_dir,
    checkpoint_name,
    has_checkpoint,
    planned_entries,
    predictions_name,
    recorded_runs,
    run_names,
    saved_model_name,
    step_checkpoint_pattern,
)
from tests.conftest import another_run_holding


def test_the_names_of_a_single_run_and_of_a_comparison():
    # The CLI contract (DESIGN.md) and --resume rely on these exact names.
    assert checkpoint_name("bf16", 0) == "checkpoint.pt" and saved_model_name("bf16", 0) == "model"
    assert checkpoint_name("bf16", 2, single=False) == "checkpoint-bf16-seed2.pt"
    assert saved_model_name("fp16", 1, single=False) == "model-fp16-seed1"
    files, dirs = planned_entries(run_names(["fp32", "bf16"], [0]).values(), save_model=True)
    assert files == ["results.json", "report.md", "config.yaml", "checkpoint-fp32-seed0.pt", "checkpoint-bf16-seed0.pt"]
    assert dirs == ["model-fp32-seed0", "model-bf16-seed0"]
    assert planned_entries(run_names(["fp32"], [0]).values(), save_model=False) == (
        ["results.json", "report.md", "config.yaml", "checkpoint.pt"],
        [],
    )
    files, _ = planned_entries(run_names(["fp32", "bf16"], [1], "new.jsonl").values(), save_model=False)
    # --fsdp: the checkpoints are directories, beside the saved models.
    assert planned_entries(run_names(["fp32", "bf16"], [0], sharded=True).values(), save_model=True) == (
        ["results.json", "report.md", "config.yaml"],
        ["model-fp32-seed0", "model-bf16-seed0", "checkpoint-fp32-seed0.dcp", "checkpoint-bf16-seed0.dcp"],
    )
    assert files[-2:] == ["predictions-fp32-seed1.jsonl", "predictions-bf16-seed1.jsonl"]
    assert predictions_name("new.tsv", "bf16", 0) == "predictions.csv"
    assert step_checkpoint_pattern("bf16", 0).format(step=40) == "checkpoint-step40.pt"
    assert step_checkpoint_pattern("bf16", 0, single=False).format(step=4) == "checkpoint-bf16-seed0-step4.pt"


def test_checkpoints_are_found_by_either_name(tmp_path):
    assert not has_checkpoint(tmp_path)
    (tmp_path / checkpoint_name("fp16", 3, single=False)).write_bytes(b"")
    assert has_checkpoint(tmp_path)


def test_recorded_runs_reads_results_json_as_written(tmp_path):
    assert recorded_runs(tmp_path) == []  # no file: no runs
    (tmp_path / "results.json").write_text('{"runs": [{"precision": "bf16", "seed": 0}]}')
    assert recorded_runs(tmp_path) == [{"precision": "bf16", "seed": 0}]
    (tmp_path / "results.json").write_text('{"not_runs": []}')
    with pytest.raises(KeyError):
        recorded_runs(tmp_path)  # the caller words the error for its context


def test_entries_of_the_wrong_kind_are_refused(tmp_path):
    (tmp_path / "results.json").mkdir()
    (tmp_path / "model").write_text("not a model")
    with pytest.raises(UsageError, match="results.json: exists and is not a file"):
        check_output_dir(tmp_path, files=["results.json"])
    with pytest.raises(UsageError, match="model: exists and is not a directory"):
        check_output_dir(tmp_path, dirs=["model"])
    check_output_dir(tmp_path, files=["absent.json"], dirs=["absent"])  # absent is fine


def test_a_second_run_on_the_directory_is_refused_while_the_first_holds_it(tmp_path):
    # The holder is another process, as it would be: flock locks are per open file.
    with another_run_holding(tmp_path) as pid:
        with pytest.raises(UsageError, match=rf"another mixft run \(pid {pid}\) is using it"):
            with OutputLock(tmp_path):
                pass
    with OutputLock(tmp_path):  # free again once the holder is gone
        assert (tmp_path / LOCK_NAME).exists()


def test_a_killed_holder_leaves_no_stale_lock(tmp_path):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import time
        from pathlib import Path
        from mixft.runs.outdir import OutputLock
        lock = OutputLock(Path({str(tmp_path)!r})).__enter__()
        print("held", flush=True)
        time.sleep(60)
    """),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    holder.kill()
    holder.wait()
    with OutputLock(tmp_path):
        pass


def test_checking_creates_nothing_and_the_lock_creates_the_directory(tmp_path):
    out = tmp_path / "a" / "b"
    check_output_dir(out, files=["results.json"])
    assert not (tmp_path / "a").exists()  # a run refused after this check leaves no empty tree
    with OutputLock(out):
        assert out.is_dir()


def test_a_dangling_symlink_and_a_file_in_the_path_are_named(tmp_path):
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "gone")
    with pytest.raises(UsageError, match=r"is a symbolic link to .*gone, which does not exist"):
        check_output_dir(link)
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match=r"file exists and is not a directory"):
        check_output_dir(tmp_path / "file" / "run")


def test_a_run_refused_for_its_data_leaves_no_output_directory(tmp_path):
    from mixft.cli.main import main

    out = tmp_path / "never"
    code = main(
        ["--recipe", "text-classification", "--train-file", str(tmp_path / "missing.csv"), "--output-dir", str(out)]
    )
    assert code == 2 and not out.exists()


def test_a_new_run_sets_an_earlier_run_aside_whole(tmp_path, tiny_bert_dir, tiny_data_dir, capsys):
    # Was: a single run into a directory that held a comparison left its report.md, charts and
    # checkpoints beside a results.json they contradicted; then (issue 30) its config.yaml was
    # overwritten and its checkpoints deleted.
    import json

    from mixft.cli.main import main

    args = [
        "--recipe",
        "bert-sst2",
        "--model",
        str(tiny_bert_dir),
        "--data-dir",
        str(tiny_data_dir),
        "--output-dir",
        str(tmp_path),
        "--no-progress",
        "--max-steps",
        "1",
    ]
    assert main(args + ["--compare", "fp32,bf16"]) == 0
    earlier = {p.name for p in tmp_path.iterdir() if p.name not in (".mixft.lock", tiny_data_dir.name)}
    assert {"results.json", "report.md", "config.yaml"} <= earlier and any(tmp_path.glob("checkpoint-*.pt"))
    capsys.readouterr()
    assert main(args + ["--precision", "bf16"]) == 0
    notices = [line for line in capsys.readouterr().err.splitlines() if "held an earlier run" in line]
    assert len(notices) == 1 and "2 checkpoints" in notices[0] and "identical" not in notices[0], notices
    (previous,) = tmp_path.glob("previous-*")
    assert {p.name for p in previous.iterdir()} == earlier  # nothing of the comparison lost or left behind
    assert len(json.loads((previous / "results.json").read_text())["runs"]) == 2
    assert "fp32,bf16" in (previous / "config.yaml").read_text() or "- bf16" in (previous / "config.yaml").read_text()
    assert not (tmp_path / "report.md").exists() and not list(tmp_path.glob("*.png"))
    assert not list(tmp_path.glob("checkpoint-*.pt")) and (tmp_path / "checkpoint.pt").is_file()
    assert [r["precision"] for r in json.loads((tmp_path / "results.json").read_text())["runs"]] == ["bf16"]


def test_the_output_names_are_spelled_in_one_place():
    # issue 43: the fixed names live in mixft/output_names.py, each tracker's folder in its spec;
    # no other module of mixft/ spells one as a string of its own (docstrings and messages aside).
    # File names, patterns, the prefix; the stems alone ("model", "predictions") are ordinary keys
    # elsewhere, and a tracker folder named like its tracker ("tensorboard") is also its module's name.
    values = [v for k, v in vars(output_names).items() if k.isupper() and isinstance(v, str)]
    names = {v for v in values if "." in v or v.endswith("-")} | (set(TRACKER_FOLDERS) - set(TRACKERS))
    package = Path(mixft.__file__).parent
    allowed = {package / "output_names.py", package / "callbacks" / "tracker_names.py"}
    # Still spelled there (files of other owners in the same round): their next edit reads
    # mixft.output_names' SHARDED_SUFFIX / CHECKPOINT_SUFFIX, and these lines go.
    known = {("runs/identity.py", ".dcp"), ("runs/identity.py", ".pt"), ("train/sharded_checkpoint.py", ".dcp")}
    spelled = []
    for path in sorted(set(package.rglob("*.py")) - allowed):
        where = path.relative_to(package).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in names and (where, node.value) not in known:
                spelled.append(f"{where}:{node.lineno} {node.value!r}")
    assert not spelled, spelled
