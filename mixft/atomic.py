"""Atomic file writes: a reader (or a kill at any moment) sees the old file or the new one.

Every file mixft writes that a user might rely on (results.json, report.md,
checkpoints) goes through here: write to a temporary file in the same directory,
flush and fsync it, then ``os.replace`` it over the target, which POSIX makes atomic.
"""

from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator


@contextmanager
def atomic_path(target: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``target``; on success it replaces ``target``.

    Usage: ``with atomic_path("ckpt.pt") as tmp: torch.save(state, tmp)``
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; results are for everyone to read
    try:
        yield tmp
        with open(tmp, "rb+") as f:  # the data must be on disk before the rename
            os.fsync(f.fileno())
        os.replace(tmp, target)
        _fsync_dir(target.parent)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_text(target: str | os.PathLike, text: str) -> None:
    """Atomically write ``text`` (UTF-8) to ``target``."""
    with atomic_path(target) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(target: str | os.PathLike, obj: Any) -> None:
    """Atomically write ``obj`` as indented JSON (NaN/inf become null: JSON has neither)."""
    write_text(target, json.dumps(_finite(obj), indent=2, sort_keys=False) + "\n")


def _finite(obj: Any) -> Any:
    if isinstance(obj, float) and (obj != obj or obj in (float("inf"), float("-inf"))):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync_dir(directory: Path) -> None:
    # The rename itself lives in the directory entry; sync it so it survives a crash.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def atomic_directory(target: str | os.PathLike) -> Iterator[Path]:
    """Yield a staging directory beside ``target``; on success it is swapped in whole.

    A reader sees the old directory or the new one, never a half-written model; on an
    error the staging directory is removed and ``target`` is left as it was.

    Usage: ``with atomic_directory("out/model") as tmp: model.save_pretrained(tmp)``
    """
    import shutil

    target = Path(target)
    staging = target.with_name(f".{target.name}.partial")
    old = target.with_name(f".{target.name}.old")
    shutil.rmtree(staging, ignore_errors=True)  # left by a run killed mid-save
    staging.mkdir(parents=True)
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if target.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(target, old)
        os.replace(staging, target)
        shutil.rmtree(old)
    else:
        os.replace(staging, target)
    _fsync_dir(target.parent)
