"""The output directory: checked before any work, and held by one run at a time.

Usage::

    check_output_dir(Path("outputs/run"), files=["results.json", "checkpoint.pt"], dirs=["model"])
    with OutputLock(Path("outputs/run")):
        ...  # train, write results
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from .errors import UsageError

LOCK_NAME = ".mixft.lock"


def check_output_dir(out: Path, *, files=(), dirs=()) -> None:
    """Fail now, not after an hour of training, if results cannot be written.

    ``files`` must be files (or absent) and ``dirs`` directories (or absent): a
    results.json that is a directory, say, would otherwise end a finished run with the
    results lost.
    """
    if out.exists() and not out.is_dir():
        raise UsageError(f"--output-dir {out}: exists and is not a directory")
    for name in files:
        path = out / name
        if path.exists() and not path.is_file():
            raise UsageError(f"{path}: exists and is not a file; move it away or choose another --output-dir")
    for name in dirs:
        path = out / name
        if path.exists() and not path.is_dir():
            raise UsageError(f"{path}: exists and is not a directory; move it away or choose another --output-dir")
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".mixft-write-check-", dir=out)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise UsageError(f"--output-dir {out}: not writable ({e.strerror or e})") from None


class OutputLock:
    """An exclusive lock on the output directory for one run's lifetime.

    A second run on the same directory refuses at start-up instead of overwriting the
    first one's checkpoints and results. ``flock`` locks die with their process, so a
    killed run never leaves a stale lock behind.
    """

    def __init__(self, out: Path):
        self.path = Path(out) / LOCK_NAME
        self._fd: int | None = None

    def __enter__(self) -> "OutputLock":
        import fcntl

        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            if e.errno in (errno.EAGAIN, errno.EACCES):
                raise UsageError(f"--output-dir {self.path.parent}: another mixft run (pid {holder}) is using it; "
                                 "wait for it or choose another --output-dir") from None
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            os.close(self._fd)  # releases the lock; the file stays (removing it would race a waiting run)
            self._fd = None
