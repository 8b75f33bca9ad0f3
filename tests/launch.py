"""``torchrun`` for the tests: two CPU processes (gloo) on a free local port, from the repository root.

Usage: ``proc = torchrun("scripts/finetune.py", "--recipe", "bert-sst2", ..., "--fsdp")``, or, for what the run
layer decides before it needs a process group, ``fake_launch(monkeypatch, 2)`` in the test's own process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import free_port

ROOT = Path(__file__).resolve().parents[1]


def torchrun(*args, timeout=300, check=True, nproc=2) -> subprocess.CompletedProcess:
    """Run ``args`` under ``python -m torch.distributed.run`` with ``nproc`` processes; ``check``: assert exit 0."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MIXFT_DIST_BACKEND": "gloo", "PYTHONPATH": str(ROOT)}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        str(nproc),
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(free_port()),
        *args,
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    if check:
        assert proc.returncode == 0, proc.stderr[-12000:]
    return proc


def fake_launch(monkeypatch, world: int) -> None:
    """What the run layer sees under torchrun with ``world`` processes, in this process, without joining a group
    (for refusals that come before one is needed: no process start-up)."""
    from mixft import distributed

    monkeypatch.setenv("WORLD_SIZE", str(world))
    monkeypatch.setattr(distributed, "init_from_env", lambda device_type: False)
    monkeypatch.setattr(distributed, "world_size", lambda: world)
