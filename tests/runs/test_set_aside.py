"""One place sets a whole earlier run aside (issue 30): everything it wrote moves together, nothing is lost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mixft.runs.set_aside import run_entries, set_aside_earlier_run
from tests.cli_runs import run_cli
from tests.tiny_models import make_tiny_model_dir


def test_everything_a_run_wrote_moves_and_nothing_else(tmp_path):
    for name in (
        "results.json",
        "report.md",
        "config.yaml",
        "loss.png",
        "predictions.csv",
        "checkpoint.pt",
        "checkpoint-step4.pt",
        "notes.txt",
        "probe.json",
        "probe.md",
        ".mixft.lock",
    ):
        (tmp_path / name).write_text(name)
    for folder in ("model", "tensorboard/fp32-seed0", "mlruns/0", "previous-old", "mine"):
        (tmp_path / folder).mkdir(parents=True)
    notice = set_aside_earlier_run(tmp_path, "20261125-100000").notice
    target = tmp_path / "previous-20261125-100000"
    assert sorted(p.name for p in target.iterdir()) == sorted(
        [
            "results.json",
            "report.md",
            "config.yaml",
            "loss.png",
            "predictions.csv",
            "checkpoint.pt",
            "checkpoint-step4.pt",
            "model",
            "tensorboard",
            "mlruns",
        ]
    )
    assert (target / "tensorboard" / "fp32-seed0").is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [".mixft.lock", "mine", "notes.txt", "previous-20261125-100000", "previous-old", "probe.json", "probe.md"]
    )
    assert notice == (
        f"{tmp_path} held an earlier run (results.json, report.md, config.yaml, loss.png, "
        f"predictions.csv, mlruns/, model/, tensorboard/, 2 checkpoints): set it aside in {target}"
    )


def test_a_killed_runs_checkpoint_is_set_aside_not_overwritten(tmp_path):
    (tmp_path / "checkpoint.pt").write_bytes(b"step 40")  # killed before its first results.json
    assert "1 checkpoint" in set_aside_earlier_run(tmp_path, "t").notice
    assert (tmp_path / "previous-t" / "checkpoint.pt").read_bytes() == b"step 40"
    assert run_entries(tmp_path) == [] and set_aside_earlier_run(tmp_path, "u") is None


def test_undo_puts_the_earlier_run_back_unless_the_new_one_wrote(tmp_path):
    (tmp_path / "results.json").write_text("earlier")
    (tmp_path / "tensorboard").mkdir()
    aside = set_aside_earlier_run(tmp_path, "t")
    assert "back in place" in aside.undo()
    assert (tmp_path / "results.json").read_text() == "earlier" and (tmp_path / "tensorboard").is_dir()
    assert not (tmp_path / "previous-t").exists()
    aside = set_aside_earlier_run(tmp_path, "u")
    (tmp_path / "results.json").write_text("new")
    assert aside.undo() is None and (tmp_path / "previous-u" / "results.json").read_text() == "earlier"


def test_two_set_asides_in_one_second_keep_both(tmp_path):
    (tmp_path / "results.json").write_text("1")
    set_aside_earlier_run(tmp_path, "t")
    (tmp_path / "results.json").write_text("2")
    set_aside_earlier_run(tmp_path, "t")
    assert (tmp_path / "previous-t" / "results.json").read_text() == "1"
    assert (tmp_path / "previous-t-2" / "results.json").read_text() == "2"


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return make_tiny_model_dir("bert", tmp_path_factory.mktemp("tiny") / "bert")


def test_an_identical_rerun_says_so_and_keeps_the_earlier_results(tmp_path, model, capsys):
    pytest.importorskip("tensorboard")
    code, err, out = run_cli(tmp_path, model, "--max-steps", "2", "--report-to", "tensorboard", capsys=capsys)
    assert code == 0, err
    first = json.loads((out / "results.json").read_text())
    code, err, out = run_cli(tmp_path, model, "--max-steps", "2", "--report-to", "tensorboard", capsys=capsys)
    assert code == 0, err
    notices = [line for line in err.splitlines() if "held an earlier run" in line]
    assert len(notices) == 1 and notices[0].endswith("the same options as this run: an identical re-run"), err
    (previous,) = out.glob("previous-*")
    assert json.loads((previous / "results.json").read_text()) == first
    # The new run's curves start clean: its tensorboard folder holds only its own events.
    assert (previous / "tensorboard" / "fp32-seed0").is_dir()
    assert len(list((out / "tensorboard" / "fp32-seed0").iterdir())) == 1


def test_a_run_that_reads_the_earlier_runs_model_is_refused_before_anything_moves(tmp_path, model, capsys):
    """Was: ``--eval-only --model OUT/model --output-dir OUT`` set the earlier run (its model/ included) aside first,
    then failed to load the model with a traceback (exit 1), leaving the good run moved away."""
    from mixft.cli.main import main
    from tests.cli_runs import evaluation_only, text_classification_args, toy_files

    code, err, out = run_cli(tmp_path, model, "--max-steps", "2", "--save-model", capsys=capsys)
    assert code == 0, err
    before = sorted(p.name for p in out.iterdir())
    train, dev = toy_files(tmp_path / "data")
    for argv in (
        evaluation_only(text_classification_args(out / "model", train, dev, out, "--eval-only")),
        text_classification_args(out / "model", train, dev, out, "--max-steps", "1"),  # trained from it, into it
    ):
        assert main(argv) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and "--model" in lines[0] and "part of the earlier run" in lines[0], lines
        assert sorted(p.name for p in out.iterdir()) == before  # nothing set aside, nothing written
    # Into another directory it is what docs/cli.md shows, and it evaluates.
    argv = evaluation_only(text_classification_args(out / "model", train, dev, tmp_path / "eval", "--eval-only"))
    assert main(argv) == 0
