"""Atomic file writes: a reader (or a kill at any moment) sees the old file or the new one.

Every file mixft writes that a user might rely on (results.json, report.md,
checkpoints) goes through here: write to a temporary file in the same directory,
flush and fsync it, then ``os.replace`` it over the target, which POSIX makes atomic.

A write that fails (disk full, quota, read-only file system, I/O error) raises
``WriteFailed`` naming the file and the cause; the temporary file is removed and the
target is left as it was, so the previous results or checkpoint stay intact.
"""

from __future__ import annotations

import errno
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mixft.errors import first_line


class WriteFailed(OSError):
    """A file could not be written: disk full, quota, read-only file system, I/O error.

    ``str(e)`` is one line naming the file and the cause; ``e.errno`` and ``e.filename``
    are set as for any OSError. The file's previous version, if any, is untouched.

    Usage: ``except WriteFailed as e: print(f"error: {e}")``
    """

    def __init__(self, target: str | os.PathLike, cause: BaseException):
        code = getattr(cause, "errno", None)
        reason = getattr(cause, "strerror", None) or first_line(cause)
        super().__init__(code, reason, str(target))
        self.cause = cause
        # Where this command had moved an earlier run's files before the write failed (mixft.runs.set_aside).
        self.earlier_run: Path | None = None

    def __str__(self) -> str:
        code = f" (errno {errno.errorcode.get(self.errno, self.errno)})" if self.errno else ""
        return f"cannot write {self.filename}: {self.strerror}{code}"


def is_write_failure(exc: BaseException) -> bool:
    """Whether ``exc``, raised while writing a file, means the write itself failed.

    Besides OSError: torch.save to a path reports a failed write as a RuntimeError
    ("... file write failed", or "unexpected pos" once a short write is noticed), and
    safetensors as its own error type quoting the OS error.
    """
    if isinstance(exc, OSError):
        return True
    text = str(exc)
    return any(marker in text for marker in _WRITE_FAILURE_MARKERS)


_WRITE_FAILURE_MARKERS = (
    "file write failed",
    "PytorchStreamWriter failed",
    "unexpected pos",
    "No space left on device",
    "os error 28",
    "StorageFull",
)


@contextmanager
def atomic_path(target: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``target``; on success it replaces ``target``.

    Raises WriteFailed (the temporary removed, ``target`` untouched) when any step of the
    write fails for lack of space, permissions or I/O.
    Usage: ``with atomic_path("ckpt.pt") as tmp: torch.save(state, tmp)``
    """
    target = Path(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as e:
        raise WriteFailed(target, e) from e
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; results are for everyone to read
        yield tmp
        with open(tmp, "rb+") as f:  # the data must be on disk before the rename
            os.fsync(f.fileno())  # a delayed-allocation file system may report ENOSPC only here
        os.replace(tmp, target)
        _fsync_dir(target.parent)
    except Exception as e:
        if is_write_failure(e) and not isinstance(e, WriteFailed):
            raise WriteFailed(target, _as_oserror(e, target.parent)) from e
        raise
    finally:
        _unlink_quietly(tmp)


def write_text(target: str | os.PathLike, text: str) -> None:
    """Atomically write ``text`` (UTF-8) to ``target``."""
    with atomic_path(target) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(target: str | os.PathLike, obj: Any) -> None:
    """Atomically write ``obj`` as indented JSON (NaN/inf become null: JSON has neither)."""
    write_text(target, json.dumps(_json_safe(obj), indent=2, sort_keys=False) + "\n")


def _json_safe(obj: Any) -> Any:
    if isinstance(obj, float) and (obj != obj or obj in (float("inf"), float("-inf"))):
        return None
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


def _as_oserror(exc: BaseException, directory: Path) -> BaseException:
    """``exc`` with an errno where it had none: torch and safetensors do not say why a write failed."""
    if isinstance(exc, OSError) and exc.errno:
        return exc
    text = str(exc)
    if "No space left on device" in text or "os error 28" in text or "StorageFull" in text or _disk_full(directory):
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return OSError(errno.EIO, f"write failed ({first_line(exc)})")


def _disk_full(directory: Path) -> bool:
    try:
        st = os.statvfs(directory)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < 1 << 20  # under 1 MiB left for us: the write ran out of space


def _unlink_quietly(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError:
        pass  # a read-only or failing disk may refuse even this; the next run's save sweeps it


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
    try:
        staging.mkdir(parents=True)
    except OSError as e:
        raise WriteFailed(target, e) from e
    try:
        yield staging
    except BaseException as e:
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(e, Exception) and is_write_failure(e) and not isinstance(e, WriteFailed):
            raise WriteFailed(target, _as_oserror(e, target.parent)) from e
        raise
    try:
        if target.exists():
            shutil.rmtree(old, ignore_errors=True)
            os.replace(target, old)
            os.replace(staging, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(staging, target)
    except OSError as e:
        if old.exists() and not target.exists():
            os.replace(old, target)  # put the previous model back
        shutil.rmtree(staging, ignore_errors=True)
        raise WriteFailed(target, e) from e
    _fsync_dir(target.parent)
