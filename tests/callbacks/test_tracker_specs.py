"""One spec per tracker (issue 43): every reader reads the one table; a new tracker is a class and a spec line."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from mixft.callbacks import trackers
from mixft.callbacks.tracker_names import TRACKER_FOLDERS, TRACKERS, TrackerSpec, check_trackers, parse_report_to
from mixft.callbacks.tracker_prepare import prepare_trackers
from mixft.config.run_config import RunConfig
from mixft.errors import UsageError
from mixft.runs.set_aside import RUN_DIR_PATTERNS

ROOT = Path(__file__).resolve().parents[2]


def test_every_spec_names_a_tracker_class_of_its_kind():
    for name, spec in TRACKERS.items():
        cls = trackers.tracker_class(spec)
        assert issubclass(cls, trackers.Tracker) and cls.KIND == spec.name == name
    with pytest.raises(dataclasses.FrozenInstanceError):
        TRACKERS["mlflow"].folder = "elsewhere"


def test_the_help_the_extras_and_the_folders_come_from_the_table():
    (option,) = [f for f in dataclasses.fields(RunConfig) if f.name == "report_to"]
    assert f"comma-separated: {', '.join(TRACKERS)} (" in option.metadata["help"]
    extras = re.search(r"\[project\.optional-dependencies\](.*?)\n\[", (ROOT / "pyproject.toml").read_text(), re.S)
    assert all(re.search(rf"^{spec.extra} = ", extras.group(1), re.M) for spec in TRACKERS.values())
    tested = re.search(r'"mixft\[([^\]]*)\]"', extras.group(1)).group(1).split(",")  # the test extra pulls each
    assert {spec.extra for spec in TRACKERS.values()} <= set(tested)
    assert TRACKER_FOLDERS == ("tensorboard", "mlruns")  # the output layout: unchanged names
    assert set(TRACKER_FOLDERS) <= set(RUN_DIR_PATTERNS)  # set aside with the run


class _NoteTracker(trackers.Tracker):
    """A made-up tracker: what adding one takes (this class, one spec line; its extra in pyproject.toml)."""

    KIND = "notes"

    def __init__(self, folder, name, **kwargs):
        super().__init__(name, **kwargs)
        self.folder = folder

    @classmethod
    def for_run(cls, folder, name, *, started, project, **kwargs):
        return cls(folder, name, **kwargs)


def test_a_new_tracker_is_one_class_and_one_spec_line(tmp_path, monkeypatch):
    monkeypatch.setattr(trackers, "_NoteTracker", _NoteTracker, raising=False)
    monkeypatch.setitem(
        TRACKERS, "notes", TrackerSpec("notes", "json", "notes", folder="notes", callback="_NoteTracker")
    )
    assert parse_report_to("tensorboard,notes") == ["tensorboard", "notes"] and check_trackers("notes") == ["notes"]
    (made,) = trackers.build_trackers(["notes"], tmp_path, "bf16-seed0")
    assert isinstance(made, _NoteTracker) and made.folder == tmp_path / "notes" and made.name == "bf16-seed0"
    (tmp_path / "notes").write_text("a file where the tracker's folder goes")
    with pytest.raises(UsageError, match=r"^--report-to notes: .*notes exists and is not a directory"):
        prepare_trackers("notes", tmp_path, ["bf16-seed0"])


def test_trackios_store_is_checked_before_any_work(tmp_path, monkeypatch):
    (tmp_path / "store").write_text("not a directory")
    monkeypatch.setenv("TRACKIO_DIR", str(tmp_path / "store"))
    with pytest.raises(UsageError, match=r"^--report-to trackio: .*store exists and is not a directory"):
        prepare_trackers("trackio", tmp_path, ["fp32-seed0"])
    monkeypatch.delenv("TRACKIO_DIR")
    assert prepare_trackers("trackio", tmp_path, ["fp32-seed0"]) == ["trackio"]
