"""Under torchrun, ``--output-dir`` must be one directory that every process sees.

Process 0 writes results.json, the saved model and the manifest of a sharded checkpoint, while under
``--fsdp`` every process writes its own shards there. On several machines whose ``--output-dir`` is
each node's own disk, a run would train and then leave a checkpoint that ``--resume`` refuses as
damaged. So before any work, process 0 leaves a file of a random name there and every process
looks for it: one that cannot see it ends the run in one line, on every process.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path

from mixft import distributed
from mixft.errors import UsageError
from mixft.output_names import SHARED_CHECK_PREFIX as MARKER_PREFIX

# A network file system may show a file created on another client a moment later: look again for this long.
SEEN_WITHIN_S = 2.0


def check_shared_output_dir(out: Path) -> None:
    """Every process sees what process 0 wrote in ``out``; else a UsageError naming those that do not.

    A no-op in one process. Every process of the group calls it at the same point, once process 0
    has created ``out`` (the run's output lock is inside it).
    Usage: ``check_shared_output_dir(Path(cfg.output_dir))``
    """
    if not distributed.is_distributed():
        return
    name = f"{MARKER_PREFIX}{secrets.token_hex(8)}" if distributed.is_main_process() else None
    if name is not None:
        (out / name).write_text("mixft: every process of a run must see this file; removed when they have\n")
    name = distributed.all_gather_objects(name)[0]  # after process 0 wrote it: the gather waits for process 0
    seen = distributed.all_gather_objects(_appears(out / name))
    if distributed.is_main_process():
        (out / name).unlink(missing_ok=True)
    blind = [rank for rank, saw in enumerate(seen) if not saw]
    if blind:
        which = ", ".join(str(rank) for rank in blind)
        raise UsageError(
            f"--output-dir {out} is not one directory for every process: process {which} of {len(seen)} "
            "cannot see the file process 0 wrote there; on several machines it must be a path that every node "
            "mounts (NFS, Lustre, ...) at the same place"
        )


def _appears(path: Path) -> bool:
    deadline = time.monotonic() + SEEN_WITHIN_S
    while not path.is_file():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True
