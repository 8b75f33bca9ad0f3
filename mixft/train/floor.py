"""A training step's floor: its matmuls at a measured rate plus the optimizer's and clip's passes over the parameters.

How far a step runs above what the machine could do is the question behind every speed claim
(issue 41): a bf16 step 1.1x faster than fp32 may be near its floor (nothing left to win) or
3x above it (time lost to casts, kernel set-up, small ops). The floor counts the two costs no
implementation avoids:

* the step's matmul FLOPs (forward and backward, as ``torch.utils.flop_counter`` counts them:
  :class:`StepFlops`) at a matmul rate measured on this machine for the precision
  (:func:`matmul_rate`: ``F.linear`` on the model's own Linear shapes, recorded by :class:`LinearShapes`;
  ``mixft.runs.probe`` measures it per precision);
* the bytes the optimizer and the clip move over the parameters, at a memory bandwidth measured
  here (:func:`measure_bandwidth`): fused AdamW reads each parameter, its gradient and its two
  moments and writes the parameter and the moments (7 passes); the clip's norm reads every
  gradient and its multiply reads and writes it (3 passes). Passes are of the parameter's own
  dtype (fp32 master weights under autocast). Nothing else is counted: a floor, not a model.

Usage::

    floor = StepFloor(matmul_flops=27.5e9, matmul_flops_per_s=320e9,
                      parameter_bytes=optimizer_clip_bytes(model.parameters()), bytes_per_s=35e9)
    print(floor.line(0.2105))   # 'step 210.5 ms, floor 112.1 ms (matmuls 85.9 ms at 320 GFLOP/s + ...): 1.88x its floor'
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from mixft.amp.precision import Precision, configure_matmul
from mixft.train.hooks import Callback
from mixft.train.measure import synchronize

ADAMW_PASSES = 7  # fused AdamW: read param, grad, exp_avg, exp_avg_sq; write param, exp_avg, exp_avg_sq
CLIP_PASSES = 3  # clip_grad_norm_: the norm reads each gradient; the multiply reads and writes it
BANDWIDTH_ELEMENTS = 2**25  # fp32 elements per operand (128 MiB): past any CPU's last-level cache share
BANDWIDTH_PASSES = 3  # a.add_(b): read a, read b, write a
MATMUL_REPEATS = 3  # timings per Linear shape: the median is kept


@dataclass(frozen=True)
class StepFloor:
    """What one step cannot go below on this machine; seconds and bytes per step."""

    matmul_flops: float  # forward + backward matmul FLOPs of the step
    matmul_flops_per_s: float  # measured matmul rate in the step's compute dtype
    parameter_bytes: float  # bytes the optimizer and the clip move per step (optimizer_clip_bytes)
    bytes_per_s: float  # measured memory bandwidth

    @property
    def matmul_s(self) -> float:
        return self.matmul_flops / self.matmul_flops_per_s

    @property
    def memory_s(self) -> float:
        return self.parameter_bytes / self.bytes_per_s

    @property
    def floor_s(self) -> float:
        return self.matmul_s + self.memory_s

    def above(self, step_s: float) -> float:
        """``step_s`` over the floor: 1.0 is the floor itself, 2.0 twice it."""
        return step_s / self.floor_s

    def line(self, step_s: float) -> str:
        """``'step X ms, floor Y ms (matmuls A ms at R GFLOP/s + optimizer/clip B ms at W GB/s): X/Y its floor'``."""
        return (
            f"step {step_s * 1e3:.1f} ms, floor {self.floor_s * 1e3:.1f} ms (matmuls {self.matmul_s * 1e3:.1f} ms "
            f"at {self.matmul_flops_per_s / 1e9:.0f} GFLOP/s + optimizer/clip {self.memory_s * 1e3:.1f} ms at "
            f"{self.bytes_per_s / 1e9:.1f} GB/s): {self.above(step_s):.2f}x its floor"
        )

    def to_dict(self, step_s: float | None = None) -> dict[str, float]:
        out = {
            "matmul_flops": self.matmul_flops,
            "matmul_flops_per_s": self.matmul_flops_per_s,
            "parameter_bytes": self.parameter_bytes,
            "bytes_per_s": self.bytes_per_s,
            "matmul_s": self.matmul_s,
            "memory_s": self.memory_s,
            "floor_s": self.floor_s,
        }
        if step_s is not None:
            out.update(step_s=step_s, above_floor=self.above(step_s))
        return out


def optimizer_clip_bytes(parameters: Iterable[torch.Tensor], clip: bool = True) -> int:
    """Bytes fused AdamW (and, with ``clip``, the clip's norm and multiply) move over ``parameters`` per step.

    Only parameters that train count (``requires_grad``); a shared tensor counts once.
    Usage: ``optimizer_clip_bytes(trainer.params, clip=trainer.max_grad_norm is not None)``
    """
    unique = {id(p): p for p in parameters if p.requires_grad}.values()
    passes = ADAMW_PASSES + (CLIP_PASSES if clip else 0)
    return passes * sum(p.numel() * p.element_size() for p in unique)


def measure_bandwidth(
    device: torch.device | str = "cpu", elements: int = BANDWIDTH_ELEMENTS, repeats: int = 5
) -> float:
    """Bytes/s of ``a.add_(b)`` on two fp32 tensors of ``elements`` each (3 passes), median of ``repeats``.

    A streaming elementwise kernel like the optimizer's, on operands larger than a cache, with
    torch's threads as the run has them. Usage: ``measure_bandwidth("cpu") / 1e9  # GB/s``
    """
    device = torch.device(device)
    a = torch.empty(elements, device=device).fill_(1.0)
    b = torch.empty(elements, device=device).fill_(1e-6)
    a.add_(b)  # warm-up: pages touched, threads started
    times = []
    for _ in range(repeats):
        synchronize(device)
        t0 = time.perf_counter()
        a.add_(b)
        synchronize(device)
        times.append(time.perf_counter() - t0)
    return BANDWIDTH_PASSES * elements * a.element_size() / statistics.median(times)


class StepFlops(Callback):
    """The matmul FLOPs of the first training step (forward, backward, optimizer) that ``fit()`` runs.

    ``torch.utils.flop_counter.FlopCounterMode`` is active from ``on_train_begin`` to the end of
    the first step, so it counts what really ran (packed rows, the [CLS]-only last layer,
    attention products) on any model. It slows that step down: give it an untimed one. A step
    that raises leaves the counter on: ``close()`` it in a ``finally``.
    Usage: ``counter = StepFlops(); build_trainer(..., callbacks=[counter]).fit(); counter.flops``
    """

    def __init__(self):
        self.flops: int | None = None
        self._mode = None

    def on_train_begin(self, trainer) -> None:
        if self.flops is not None:
            return
        from torch.utils.flop_counter import FlopCounterMode

        self._mode = FlopCounterMode(display=False)
        self._mode.__enter__()

    def on_step_end(self, trainer, info) -> None:
        self.close()

    def on_train_end(self, trainer, result) -> None:
        self.close()

    def close(self) -> None:
        """Stop counting (the FLOPs so far are kept); nothing when not counting."""
        if self._mode is not None:
            mode, self._mode = self._mode, None
            mode.__exit__(None, None, None)
            self.flops = mode.get_total_flops()


class LinearShapes(Callback):
    """Records the matmuls the model's ``nn.Linear`` layers run in the first training forward (their inputs' shapes).

    Usage: ``shapes = LinearShapes(); build_trainer(..., callbacks=[shapes]).fit(); matmul_rate(shapes.table(), p, cpu)``
    """

    def __init__(self):
        self.calls: dict[tuple[int, int, int, bool], int] = {}
        self._hooks: list = []

    def on_train_begin(self, trainer) -> None:
        if self.calls:
            return  # recorded in the first step; later fit() calls train the same shapes

        def record(module: nn.Linear, args) -> None:
            x = args[0] if args else None
            if isinstance(x, torch.Tensor) and x.dim() >= 1:
                key = (
                    x.numel() // module.in_features,
                    module.in_features,
                    module.out_features,
                    module.bias is not None,
                )
                self.calls[key] = self.calls.get(key, 0) + 1

        self._hooks = [
            m.register_forward_pre_hook(record) for m in trainer.module.modules() if isinstance(m, nn.Linear)
        ]

    def on_step_end(self, trainer, info) -> None:
        self._remove()

    def on_train_end(self, trainer, result) -> None:
        self._remove()

    def _remove(self) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks = []

    def table(self) -> list[dict[str, Any]]:
        """``[{"rows", "in", "out", "bias", "calls"}]``, most FLOPs first."""
        entries = [{"rows": r, "in": i, "out": o, "bias": b, "calls": n} for (r, i, o, b), n in self.calls.items()]
        return sorted(entries, key=lambda e: -e["calls"] * e["rows"] * e["in"] * e["out"])


def matmul_rate(shapes: list[dict[str, Any]], precision: Precision, device: torch.device) -> float | None:
    """FLOP/s of ``F.linear`` over ``shapes`` (``LinearShapes.table()``, weighted by calls) in the precision's compute dtype.

    Under autocast a Linear runs in the autocast dtype, so that is the dtype timed here;
    tf32 is fp32 with TF32 matmuls allowed. None for no shapes. Matmul settings are restored after.
    Usage: ``matmul_rate(shapes.table(), resolve_precision("bf16", cpu), cpu) / 1e9  # GFLOP/s``
    """
    if not shapes:
        return None
    dtype = precision.autocast_dtype or torch.float32
    inner = 10 if device.type == "cuda" else 1  # a GPU matmul this small is mostly launch latency
    with configure_matmul(precision, device):  # tf32 is fp32 with TF32 allowed; restored after
        gen = torch.Generator().manual_seed(0)
        flops = seconds = 0.0
        for s in shapes:
            x = torch.randn(s["rows"], s["in"], generator=gen).to(device=device, dtype=dtype)
            w = torch.randn(s["out"], s["in"], generator=gen).to(device=device, dtype=dtype)
            b = torch.randn(s["out"], generator=gen).to(device=device, dtype=dtype) if s["bias"] else None
            nn.functional.linear(x, w, b)  # warm-up: kernel selection
            times = []
            for _ in range(MATMUL_REPEATS):
                synchronize(device)
                t0 = time.perf_counter()
                for _ in range(inner):
                    nn.functional.linear(x, w, b)
                synchronize(device)
                times.append((time.perf_counter() - t0) / inner)
            seconds += s["calls"] * statistics.median(times)
            flops += s["calls"] * 2.0 * s["rows"] * s["in"] * s["out"]
        return flops / seconds if seconds > 0 else None
