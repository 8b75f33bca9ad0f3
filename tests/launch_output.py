"""What a torchrun launch of the CLI printed: mixft's one-line errors, and torchrun's own report after them.

Usage: ``(line,) = error_lines(proc.stderr, "finetune.py"); assert_torchrun_reports_exit_2_of_process_0(proc)``
"""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def error_lines(stderr: str, prog: str) -> list[str]:
    """The lines mixft printed as ``prog`` (``finetune.py: error: ...``), a process's own (``[rank 1] ...``) too."""
    return [line for line in stderr.splitlines() if line.startswith(f"{prog}:") or f"] {prog}:" in line]


def assert_torchrun_reports_exit_2_of_process_0(proc: subprocess.CompletedProcess) -> None:
    """What torchrun does after mixft's line (docs/fsdp.md quotes it): its own exit code 1, its own
    traceback ending in ChildFailedError, whose root cause is process 0's exit code 2; nothing of mixft's
    or DCP's in a traceback."""
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert proc.stderr.count("Traceback (most recent call last)") == 1, proc.stderr[-6000:]
    torchrun_part = proc.stderr[proc.stderr.index("Traceback (most recent call last)") :]
    assert "torch.distributed.elastic.multiprocessing.errors.ChildFailedError" in torchrun_part
    root_cause = torchrun_part[torchrun_part.index("Root Cause (first observed failure)") :]
    assert "rank      : 0 (local_rank: 0)" in root_cause and "exitcode  : 2 " in root_cause, root_cause
    assert f'File "{ROOT / "mixft"}' not in proc.stderr and "torch/distributed/checkpoint" not in proc.stderr
