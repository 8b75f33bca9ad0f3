"""The output directory: wrong kinds of entries refused, one run at a time."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from mixft.errors import UsageError
from mixft.outdir import LOCK_NAME, OutputLock, check_output_dir


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
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from mixft.outdir import OutputLock
        with OutputLock(Path({str(tmp_path)!r})):
            print("held", flush=True)
            sys.stdin.read()
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(UsageError, match=rf"another mixft run \(pid {holder.pid}\) is using it"):
            with OutputLock(tmp_path):
                pass
    finally:
        holder.communicate("")  # releases the lock by exiting
    with OutputLock(tmp_path):  # free again once the holder is gone
        assert (tmp_path / LOCK_NAME).exists()


def test_a_killed_holder_leaves_no_stale_lock(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from pathlib import Path
        from mixft.outdir import OutputLock
        lock = OutputLock(Path({str(tmp_path)!r})).__enter__()
        print("held", flush=True)
        time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    holder.kill()
    holder.wait()
    with OutputLock(tmp_path):
        pass
