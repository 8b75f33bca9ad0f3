"""What the user sees when the command line refuses, by how it was started: the program's name
(``mixft``, the console script; ``finetune.py``, the script) and, under torchrun, one line from
process 0 instead of one per process.

The console script (the one pip wrote into this environment's bin folder) and the script run in this
process, started as the shell starts them (argv[0], a ``__main__`` without a spec). Under torchrun the
run layer is shown a world of 2 in this process; the real launches that refuse (two CPU processes
each, ~10 s of imports per process) are tests/runs/test_fsdp_resume.py's.
"""

from __future__ import annotations

import runpy
import sys
from importlib.metadata import entry_points
from pathlib import Path
from types import SimpleNamespace

import pytest
from launch import fake_launch

import mixft.cli.main
from mixft.cli.main import main, program_name

# pip writes the console script beside the environment's python (bin/ or Scripts/).
CONSOLE = Path(sys.executable).with_name("mixft")
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "finetune.py"


def _started_as(monkeypatch, capsys, path: Path, *args: str) -> tuple[int, str, str]:
    """Runs the file ``path`` in this process as ``python path`` / the shell would start it: ``argv[0]`` its
    path and ``__main__`` a module without a spec (runpy does both). Returns (exit code, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", [str(path), *args])
    with pytest.raises(SystemExit) as done:
        runpy.run_path(str(path), run_name="__main__")
    out, err = capsys.readouterr()
    return done.value.code, out, err


def test_the_console_script_names_itself_mixft(tmp_path, monkeypatch, capsys):
    # Was: `mixft --help` printed "usage: finetune.py", and its errors began "finetune.py: error:".
    # The console script pip wrote, run in this process (no interpreter start-up: milliseconds).
    (entry,) = entry_points(group="console_scripts", name="mixft")
    assert entry.value == "mixft.cli.main:main"  # pyproject's [project.scripts]
    assert CONSOLE.is_file(), f"the console script is not installed beside {sys.executable}"
    monkeypatch.chdir(tmp_path)
    code, out, _ = _started_as(monkeypatch, capsys, CONSOLE, "--help")
    assert code == 0 and out.startswith("usage: mixft [-h] [--recipe RECIPE]"), out[:200]
    code, out, err = _started_as(monkeypatch, capsys, CONSOLE, "train", "--recipe", "bert-sst2")
    assert code == 2 and out == ""
    assert err.strip().splitlines() == ["mixft: error: unrecognized arguments: train"], err
    assert not list(tmp_path.iterdir())  # refused before any work: nothing written where it ran


def test_the_script_names_itself_finetune_py(tmp_path, monkeypatch, capsys):
    # `python scripts/finetune.py`, the documented command, keeps its name (torchrun starts it the same way).
    monkeypatch.chdir(tmp_path)
    code, out, _ = _started_as(monkeypatch, capsys, SCRIPT, "--help")
    assert code == 0 and out.startswith("usage: finetune.py [-h] [--recipe RECIPE]"), out[:200]
    code, _, err = _started_as(monkeypatch, capsys, SCRIPT, "--recipe", "bert-sst2", "--epochs", "0")
    assert code == 2
    assert err.strip().splitlines() == ["finetune.py: error: argument --epochs: must be a positive integer, got '0'"]
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("argv0", "main_spec", "prog"),
    [
        ("/venv/bin/mixft", None, "mixft"),
        ("scripts/finetune.py", None, "finetune.py"),
        ("-c", None, "finetune.py"),  # python -c: no name of its own
        ("/src/tool/__main__.py", "tool.__main__", "python -m tool"),  # argv[0] is a file the user never typed
    ],
)
def test_the_program_name_comes_from_how_the_process_started(monkeypatch, argv0, main_spec, prog):
    spec = SimpleNamespace(name=main_spec) if main_spec else None
    monkeypatch.setitem(sys.modules, "__main__", SimpleNamespace(__spec__=spec))
    monkeypatch.setattr(sys, "argv", [argv0])
    assert program_name() == prog


def test_a_refusal_met_after_joining_the_group_is_one_line(tmp_path, monkeypatch, capsys):
    # A refusal every process meets once it has joined the process group (the model has no blocks to
    # shard), as the run layer sees it under torchrun with 2 processes, in this process. How torchrun
    # delivers such a refusal (one line from process 0, then its own report of exit code 2) is tested
    # with real processes by tests/runs/test_fsdp_resume.py's refusal of a model that changed shape.
    fake_launch(monkeypatch, 2)
    out = tmp_path / "out"
    assert main(["--recipe", "mlp-synthetic", "--fsdp", "--output-dir", str(out), "--no-progress"]) == 2
    printed = capsys.readouterr()
    (line,) = printed.err.strip().splitlines()
    assert line.startswith("finetune.py: error: --fsdp found no transformer blocks to shard in Sequential"), line
    assert printed.out == "" and not out.exists()


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
