"""What the CLI says when another process of a torchrun job is gone: one line, and the checkpoint to resume.

A node that dies, or a process killed on it, breaks every collective the others are in: gloo
raises at once when the dead process's connections close, or after ``MIXFT_DIST_TIMEOUT`` seconds
(``mixft.distributed.collective_timeout``) when its machine no longer answers at all. Without this,
each survivor would print a traceback through FSDP or DDP and gloo; with it, one line names what
the transport said, the last complete checkpoint (every node reads it: the output directory is on
a file system they share) and the command that continues from it.

Usage: ``line = peer_lost_line(error, "finetune.py", Path("out/run"))  # None: another error``
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from mixft import distributed
from mixft.runs.outdir import CHECKPOINT_PATTERN, SHARDED_ASIDE_PATTERN, SHARDED_CHECKPOINT_PATTERN
from mixft.train.sharded_checkpoint import MANIFEST

# --save-total-limit's kept copies (checkpoint[-<prec>-seed<k>]-step<N>): the same bytes as the checkpoint itself.
_STEP_COPY = re.compile(r"-step\d+\.(pt|dcp)$")


def peer_lost_line(error: BaseException, prog: str, out: Path | None) -> str | None:
    """The one-line error for ``error`` when it says that another process is gone; None for any other error.

    Usage: ``peer_lost_line(e, "finetune.py", Path("out/run"))``
    """
    words = distributed.lost_peer(error)
    if words is None:
        return None
    if "Timed out" in words:
        words += f" ({distributed.TIMEOUT_ENV}={distributed.collective_timeout().total_seconds():g} s)"
    found = last_checkpoint(out) if out is not None else None
    if found is None:
        then = "no checkpoint was written yet: rerun the same command on every node to start again"
    else:
        path, step = found
        at = f" (step {step})" if step is not None else ""
        then = f"the last checkpoint, {path}{at}, is kept: rerun the same command with --resume on every node"
    return f"{prog}: error: another process of this run is gone ({words}); {then}"


def last_checkpoint(out: Path) -> tuple[Path, int | None] | None:
    """The checkpoint ``--resume`` would continue from that was written last in ``out``, and its step
    (None where it cannot be read cheaply); None when there is none. Nothing is verified here: ``--resume`` does.

    Usage: ``last_checkpoint(Path("out/run"))  # (Path("out/run/checkpoint.dcp"), 7)``
    """
    found = []
    for path in [
        *out.glob(CHECKPOINT_PATTERN),
        *out.glob(SHARDED_CHECKPOINT_PATTERN),
        *out.glob(SHARDED_ASIDE_PATTERN),
    ]:
        if _STEP_COPY.search(path.name):
            continue
        written = path / MANIFEST if path.is_dir() else path  # a sharded one is complete once its manifest is
        if written.is_file():
            found.append((written.stat().st_mtime_ns, path, written))
    if not found:
        return None
    _, path, written = max(found)
    if path.name.endswith(".old"):  # a save killed between its renames left it aside; --resume finds it there
        path = path.with_name(path.name[1:].removesuffix(".old"))
    return path, _step(written)


def _step(written: Path) -> int | None:
    try:
        if written.name == MANIFEST:
            return int(json.loads(written.read_text())["meta"]["step"])
        from mixft.train.checkpoint import load_checkpoint

        # mmap: the tensors stay on disk; only the small records are read (a large model's file is not).
        return int(load_checkpoint(written, verify=False, mmap=True)["meta"]["step"])
    except Exception:  # a damaged or foreign file: the line still names it, --resume will judge it
        return None
