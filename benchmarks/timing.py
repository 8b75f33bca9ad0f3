"""Clocks, gauges and tables shared by the benchmarks.

Every timed region starts the way the seed notebook's ``start_timer`` does: collect
garbage, empty the CUDA cache and reset its peak counter, synchronise, then read the
clock; it ends by synchronising before reading the clock again. Peak memory is
``torch.cuda.max_memory_allocated`` on CUDA and the process's peak RSS on CPU (see
``mixft.train.measure``), always reported with its kind.

Usage::

    with TimedRegion(device) as region:
        trainer.fit()
    region.elapsed_s, region.peak_bytes, region.memory_kind
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from mixft.train.hooks import Callback
from mixft.train.measure import PeakMemory, current_rss_bytes, synchronize


def fresh_region(device: torch.device) -> None:
    """The seed's ``start_timer`` minus the clock: no garbage, no cached blocks, peak reset, device idle."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    synchronize(device)


def memory_in_use(device: torch.device) -> int | None:
    """Bytes held now: CUDA tensors (allocated) or the process's RSS on CPU."""
    if device.type == "cuda":
        return int(torch.cuda.memory_allocated(device))
    return current_rss_bytes()


class TimedRegion:
    """Wall time and peak memory of a ``with`` block, device-synchronised at both ends."""

    def __init__(self, device: torch.device):
        self.device = device
        self.elapsed_s = 0.0
        self.peak_bytes: int | None = None
        self.start_bytes: int | None = None  # memory in use when the region began
        self._memory = PeakMemory(device)
        self._t0 = 0.0

    @property
    def memory_kind(self) -> str:
        return self._memory.kind

    @property
    def peak_above_start_bytes(self) -> int | None:
        """Peak minus what was already held at the start (data, model): what the region added."""
        if self.peak_bytes is None or self.start_bytes is None:
            return None
        return self.peak_bytes - self.start_bytes

    def __enter__(self) -> TimedRegion:
        fresh_region(self.device)
        self.start_bytes = memory_in_use(self.device)
        self._memory.start()
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        synchronize(self.device)
        self.elapsed_s = time.perf_counter() - self._t0
        self.peak_bytes = self._memory.stop()


@dataclass
class MatmulPeak:
    """The device's measured matmul rate in one dtype: ``flops_per_s`` is the median of repeats."""

    dtype: str
    n: int  # square matrices n x n
    repeats: int
    flops_per_s: float
    times_s: list[float]


def matmul_peak(device: torch.device, dtype: torch.dtype, n: int, repeats: int = 5, warmup: int = 2) -> MatmulPeak:
    """Median FLOP/s of an ``n x n @ n x n`` matmul in ``dtype`` (2 n^3 FLOPs each).

    Usage: ``matmul_peak(torch.device("cpu"), torch.bfloat16, 2048).flops_per_s``
    """
    gen = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
    b = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
    for _ in range(warmup):
        a @ b
    times = []
    for _ in range(repeats):
        synchronize(device)
        t0 = time.perf_counter()
        a @ b
        synchronize(device)
        times.append(time.perf_counter() - t0)
    del a, b
    return MatmulPeak(str(dtype).removeprefix("torch."), n, repeats, 2 * n**3 / statistics.median(times), times)


class StepTimer(Callback):
    """Per-optimizer-step wall times (device-synchronised), samples and real tokens.

    The clock is read at ``on_train_begin`` and after every step, so step i's time covers
    data loading, forward, backward and the optimizer. Tokens are the attention mask's
    sum, counted by a forward pre-hook while the model is training (an on-device sum; read
    once at the end). With ``grad_accum > 1`` a step's tokens cover its whole window.
    ``step_shapes`` holds each step's padded ``input_ids`` shapes (the work computed).
    """

    def __init__(self):
        self.step_times_s: list[float] = []
        self.step_samples: list[int] = []
        self.step_tokens: list[int] = []
        self.step_shapes: list[list[tuple[int, ...]]] = []
        self._tokens: list[torch.Tensor] = []
        self._shapes: list[tuple[int, ...]] = []
        self._marks: list[int] = []
        self._t = 0.0
        self._samples = 0
        self._hook = None

    def on_train_begin(self, trainer) -> None:
        def count(module, args, kwargs):
            mask = kwargs.get("attention_mask")
            if module.training and isinstance(mask, torch.Tensor):
                self._tokens.append(mask.sum())
                self._shapes.append(tuple(mask.shape))

        self._hook = trainer.model.register_forward_pre_hook(count, with_kwargs=True)
        self._samples = trainer.state.samples
        synchronize(trainer.device)
        self._t = time.perf_counter()

    def on_step_end(self, trainer, info) -> None:
        synchronize(trainer.device)  # the trainer syncs once per step anyway (inf/NaN check)
        now = time.perf_counter()
        self.step_times_s.append(now - self._t)
        self._t = now
        self.step_samples.append(trainer.state.samples - self._samples)
        self._samples = trainer.state.samples
        self._marks.append(len(self._tokens))

    def on_train_end(self, trainer, result) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        counts = [int(t) for t in self._tokens]
        prev = 0
        for mark in self._marks:
            self.step_tokens.append(sum(counts[prev:mark]))
            self.step_shapes.append(self._shapes[prev:mark])
            prev = mark

    def summary(self, warmup: int) -> dict[str, Any]:
        """Median step time and throughput over the steps after the first ``warmup``."""
        times = self.step_times_s[warmup:]
        if not times:
            raise ValueError(f"no steps left after {warmup} warm-up steps (ran {len(self.step_times_s)})")
        total = sum(times)
        tokens = self.step_tokens[warmup:] if self.step_tokens else []
        return {
            "measured_steps": len(times),
            "median_step_s": statistics.median(times),
            "samples_per_s": sum(self.step_samples[warmup:]) / total,
            "tokens_per_s": (sum(tokens) / total) if tokens and sum(tokens) else None,
        }


class SameBatch:
    """A loader yielding one batch ``steps`` times: every variant or precision computes the same shapes.

    Usage: ``trainer.train_loader = SameBatch(next(iter(parts.train_loader)), 10)``
    """

    def __init__(self, batch, steps: int):
        self.batch, self.steps = batch, steps

    def __len__(self) -> int:
        return self.steps

    def __iter__(self):
        return (self.batch for _ in range(self.steps))


def rotated(items: Sequence[Any], round_index: int) -> list[Any]:
    """``items`` started at position ``round_index``: over the rounds no item always runs
    first (or right after the same neighbour), so drifting load falls on all alike."""
    k = round_index % len(items)
    return list(items[k:]) + list(items[:k])


def median_ratio(numerator: dict[str, Any], denominator: dict[str, Any]) -> tuple[float, list[float]]:
    """Two variants' step times (``{"all": [...], "rounds": [[...], ...]}``, rounds run ``rotated``):
    the ratio of their medians over every step, and the same ratio per round (round k of each ran side
    by side, so the rounds' range is the noise to read it against)."""
    per_round = [
        statistics.median(n) / statistics.median(d) for n, d in zip(numerator["rounds"], denominator["rounds"])
    ]
    return statistics.median(numerator["all"]) / statistics.median(denominator["all"]), per_round


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """``numerator / denominator``, or None when either is missing or the denominator is 0."""
    if numerator is None or denominator in (None, 0):
        return None
    return numerator / denominator


def fmt(value: Any, spec: str = ".3g") -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return format(value, spec)
    return str(value)


def flops(x: float | None) -> str:
    """FLOP/s with a readable prefix: ``1.2e11 -> '120 G'``."""
    if x is None:
        return "n/a"
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M")):
        if x >= scale:
            return f"{x / scale:.3g} {prefix}"
    return f"{x:.3g} "


def mib(n: int | None) -> str:
    return "n/a" if n is None else f"{n / 2**20:.0f} MiB"


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub-markdown table (cells are str()-ed)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
