"""Keep freed memory for reuse while training on CPU (glibc's malloc, Linux).

Why: glibc serves every allocation above 32 MiB with a fresh ``mmap`` and returns it
with ``munmap`` when freed, so a tensor of that size allocated every step costs a page
fault per 4 KiB page, every step. In BERT fine-tuning that tensor is the word-embedding
gradient (30522 x 384 fp32 = 45 MiB for MiniLM, 90 MiB for BERT-base), rebuilt by every
backward pass: its zero-fill alone measured ~12 ms of a ~300 ms step. With mmap off for
malloc and no trimming, freed blocks stay in the heap and the next step reuses them.
(Exporting ``MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=<large>`` before Python starts does
the same for any program; this module does it for the duration of ``fit()`` only.)

Cost: the process keeps its peak heap until the block ends (then ``malloc_trim`` gives
back what it can; free chunks in the middle of the heap stay reserved). The heap can
also outgrow the tensors it serves: PyTorch allocates with ``posix_memalign``, whose
requests do not fit exactly into the chunk just freed, so a repeated 64 MiB allocation
grew the arena to 595 MiB before it settled (measured; the MiniLM fine-tune's peak RSS
did not change). After the block glibc's defaults are set again explicitly, which leaves
its adaptive mmap threshold frozen at its current value (glibc has no call to re-enable it).
Hence ``SpeedOptions(keep_freed_memory=True)`` is opt-in.

Usage::

    with keep_freed_memory():
        trainer_loop()
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import sys
import threading

# mallopt parameter numbers and glibc's defaults (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4
_DEFAULT_TRIM_THRESHOLD, _DEFAULT_MMAP_MAX = 128 * 1024, 65536
_NEVER_TRIM = 2**31 - 1  # mallopt takes an int

_lock = threading.Lock()
_depth = 0


def _glibc():
    """glibc's libc, or None (musl, macOS, Windows: nothing to tune)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.gnu_get_libc_version  # only glibc has it
        return libc
    except (OSError, AttributeError):
        return None


@contextlib.contextmanager
def keep_freed_memory(enabled: bool = True):
    """Inside the block, freed heap memory is kept for reuse (see module docstring).

    Yields True when the setting took effect, False where it cannot (not glibc) or when
    ``enabled`` is False. Nested and concurrent blocks share one setting.
    """
    global _depth
    libc = _glibc() if enabled else None
    if libc is None:
        yield False
        return
    with _lock:
        if _depth == 0:
            libc.mallopt(_M_MMAP_MAX, 0)
            libc.mallopt(_M_TRIM_THRESHOLD, _NEVER_TRIM)
        _depth += 1
    try:
        yield True
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                libc.mallopt(_M_MMAP_MAX, _DEFAULT_MMAP_MAX)
                libc.mallopt(_M_TRIM_THRESHOLD, _DEFAULT_TRIM_THRESHOLD)
                libc.malloc_trim(0)
