"""What the user sees when the command line refuses, by how it was started: the program's name
(``mixft``, the console script; ``finetune.py``, the script) and, under torchrun, one line from
process 0 instead of one per process.

Each case starts a real process, as a user would: the console script from this environment's
bin folder, the script with this Python, torchrun with two CPU processes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from launch import torchrun
from launch_output import assert_torchrun_reports_exit_2_of_process_0, error_lines

import mixft.cli.main
from mixft.cli.main import main

# pip writes the console script beside the environment's python (bin/ or Scripts/).
CONSOLE = Path(sys.executable).with_name("mixft")


def test_the_console_script_names_itself_mixft(tmp_path):
    # Was: `mixft --help` printed "usage: finetune.py", and its errors began "finetune.py: error:".
    # (`python scripts/finetune.py` keeps its name: the torchrun case below runs the script.)
    assert CONSOLE.is_file(), f"the console script is not installed beside {sys.executable}"
    usage = subprocess.run([str(CONSOLE), "--help"], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert usage.returncode == 0 and usage.stdout.startswith("usage: mixft [-h] [--recipe RECIPE]"), usage.stdout[:200]
    proc = subprocess.run(
        [str(CONSOLE), "train", "--recipe", "bert-sst2"], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["mixft: error: unrecognized arguments: train"], proc.stderr
    assert not list(tmp_path.iterdir())  # refused before any work: nothing written where it ran


def test_a_refusal_under_torchrun_is_one_line_from_process_0(tmp_path):
    # A refusal every process meets once it has joined the process group (the model has no blocks to shard).
    # Was: one line per process, each exiting 2 at its own moment. (The refusals checked before joining,
    # such as --fsdp with bf16-pure, are tests/train/test_fsdp.py's, in one process.)
    out = tmp_path / "out"
    proc = torchrun(
        "scripts/finetune.py",
        "--recipe",
        "mlp-synthetic",
        "--fsdp",
        "--output-dir",
        str(out),
        "--no-progress",
        check=False,
    )
    (line,) = error_lines(proc.stderr, "finetune.py")
    assert line.startswith("finetune.py: error: --fsdp found no transformer blocks to shard in Sequential"), line
    assert_torchrun_reports_exit_2_of_process_0(proc)
    assert proc.stdout == "" and not out.exists()


def test_a_process_other_than_0_says_an_error_of_its_own_after_waiting(tmp_path, monkeypatch, capsys):
    # Process 1 of 2 meets an error process 0 does not (a file only its node lacks): the launcher did
    # not end it, so it says the line itself, naming its rank. Process 0 says it at once.
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(mixft.cli.main, "PEER_WAIT_S", 0.0)
    argv = ["--recipe", "bert-sst2", "--epochs", "0", "--output-dir", str(tmp_path / "out")]
    for rank, prefix in (("1", "[rank 1] "), ("0", "")):
        monkeypatch.setenv("RANK", rank)
        assert main(argv) == 2
        assert capsys.readouterr().err.splitlines() == [
            f"{prefix}finetune.py: error: argument --epochs: must be a positive integer, got '0'"
        ]
