"""Honest clocks and memory gauges: synchronise before reading time, say what memory means.

CUDA reports the peak memory held by tensors (``torch.cuda.max_memory_allocated``).
A CPU has no such counter, so on CPU mixft samples the process's resident set size
(RSS) in a background thread and reports its peak over the measured region, labelled
``cpu_rss``: it includes the Python heap and libraries, not just tensors.
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager

import torch

from mixft.amp.hardware import cores_text, describe_cpu

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def synchronize(device: torch.device) -> None:
    """Wait for queued device work, so a host clock read afterwards means what it says."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    cpu = describe_cpu()
    return f"{cpu['model']} ({cores_text(cpu)})"


def current_rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * PAGE_SIZE
    except (OSError, ValueError, IndexError):
        return None


class PeakMemory:
    """Peak memory over a region: ``with PeakMemory(device) as mem: ...; mem.peak_bytes``.

    ``kind`` is ``cuda_max_allocated`` or ``cpu_rss``; ``peak_bytes`` is None where the
    platform cannot tell (no /proc on CPU). ``start_bytes`` is the same gauge when the
    region starts (RSS on CPU, allocated tensors on CUDA): a CPU process's RSS carries
    everything run before it, so ``peak_bytes - start_bytes`` is what this region added.
    """

    def __init__(self, device: torch.device, interval_s: float = 0.05):
        self.device = device
        self.interval_s = interval_s
        self.kind = "cuda_max_allocated" if device.type == "cuda" else "cpu_rss"
        self.peak_bytes: int | None = None
        self.start_bytes: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> PeakMemory:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
            self.start_bytes = int(torch.cuda.memory_allocated(self.device))
            return
        self.peak_bytes = self.start_bytes = current_rss_bytes()
        if self.peak_bytes is None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._sample, name="mixft-rss", daemon=True)
        self._thread.start()

    def stop(self) -> int | None:
        if self.device.type == "cuda":
            synchronize(self.device)
            self.peak_bytes = int(torch.cuda.max_memory_allocated(self.device))
        elif self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self._observe()
        return self.peak_bytes

    def _observe(self) -> None:
        rss = current_rss_bytes()
        if rss is not None and (self.peak_bytes is None or rss > self.peak_bytes):
            self.peak_bytes = rss

    def _sample(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._observe()


class Stopwatch:
    """Accumulates device-synchronised wall time over several ``with`` blocks."""

    def __init__(self, device: torch.device):
        self.device = device
        self.elapsed_s = 0.0
        self._t0: float | None = None

    def __enter__(self) -> Stopwatch:
        synchronize(self.device)
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        synchronize(self.device)
        self.elapsed_s += time.perf_counter() - self._t0
        self._t0 = None

    @contextmanager
    def paused(self):
        """Leave a stretch out of the measurement (e.g. writing a checkpoint mid-epoch)."""
        if self._t0 is None:
            yield
            return
        self.__exit__()
        try:
            yield
        finally:
            self.__enter__()
