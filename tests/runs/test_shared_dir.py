"""``--output-dir`` under torchrun: every process must see process 0's files (mixft.runs.shared_dir).

The processes' views are given here (the gathers faked); every real torchrun launch of the suite
(tests/test_distributed.py, tests/train/test_fsdp.py, tests/train/test_multinode.py: two agents as
two nodes) goes through the check with one directory, and passes it.
"""

from __future__ import annotations

import pytest

from mixft import distributed
from mixft.errors import UsageError
from mixft.runs import shared_dir
from mixft.runs.shared_dir import MARKER_PREFIX, check_shared_output_dir


def as_process(monkeypatch, rank: int, others: list) -> list:
    """This process is ``rank`` of 2; each gather answers ``others`` (one value per gather) for the other one."""
    gathered = []
    answers = iter(others)

    def gather(obj):
        gathered.append(obj)
        other = next(answers)
        return [obj, other] if rank == 0 else [other, obj]

    monkeypatch.setattr(distributed, "is_distributed", lambda: True)
    monkeypatch.setattr(distributed, "is_main_process", lambda: rank == 0)
    monkeypatch.setattr(distributed, "all_gather_objects", gather)
    monkeypatch.setattr(shared_dir, "SEEN_WITHIN_S", 0.2)
    return gathered


def test_process_0_leaves_a_file_every_process_looks_for_then_removes_it(tmp_path, monkeypatch):
    gathered = as_process(monkeypatch, 0, [None, True])
    check_shared_output_dir(tmp_path)
    name, saw = gathered
    assert name.startswith(MARKER_PREFIX) and saw is True
    assert not list(tmp_path.iterdir())  # nothing of the check is left in the output directory


def test_a_process_that_cannot_see_it_ends_the_run_in_one_line(tmp_path, monkeypatch):
    # Process 1 on a node whose --output-dir is a disk of its own: process 0's file is not there.
    gathered = as_process(monkeypatch, 1, [f"{MARKER_PREFIX}0123456789abcdef", True])
    with pytest.raises(UsageError) as refused:
        check_shared_output_dir(tmp_path)
    assert gathered == [None, False]
    assert str(refused.value) == (
        f"--output-dir {tmp_path} is not one directory for every process: process 1 of 2 cannot see the file "
        "process 0 wrote there; on several machines it must be a path that every node mounts (NFS, Lustre, ...) "
        "at the same place"
    )


def test_process_0_says_the_same_when_another_cannot_see_it(tmp_path, monkeypatch):
    as_process(monkeypatch, 0, [None, False])
    with pytest.raises(UsageError, match="process 1 of 2 cannot see the file process 0 wrote there"):
        check_shared_output_dir(tmp_path)
    assert not list(tmp_path.iterdir())


def test_a_file_that_shows_up_late_is_still_seen(tmp_path, monkeypatch):
    # Network file systems may show another client's new file a moment later.
    name = f"{MARKER_PREFIX}late"
    as_process(monkeypatch, 1, [name, True])
    looks = []

    def is_file(path):
        looks.append(path)
        return len(looks) >= 3

    monkeypatch.setattr(shared_dir.Path, "is_file", is_file)
    check_shared_output_dir(tmp_path)
    assert looks == [tmp_path / name] * 3


def test_one_process_checks_nothing(tmp_path):
    check_shared_output_dir(tmp_path / "absent")  # not in a process group: no file, no error
    assert not (tmp_path / "absent").exists()
