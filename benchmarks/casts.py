"""What a training step casts: dtype conversions counted where torch dispatches them, weights apart from activations.

Under autocast every matmul's inputs are cast to the autocast dtype (weights once per forward:
autocast caches them within its region; activations before each op) and fp32-only ops cast
back; backward casts the gradients the other way. A profile shows these as ``aten::_to_copy`` /
``aten::copy_`` time, not what they were. :class:`CastCounter` is a ``TorchDispatchMode``: it
sees each ``_to_copy`` and ``copy_`` that changes dtype (below autocast and autograd, so both
directions and both passes), with the bytes it read and wrote. Casts between floating dtypes are
autocast's (and ``.float()``'s); casts from or to bool and integers (dropout and attention masks,
indices) are counted apart. A floating cast whose source has the shape of one of the model's
parameters is counted as a weight (a weight cast down for the forward, or its gradient cast back
up); the rest as activations (and their gradients). Shapes can collide (an activation exactly a
parameter's shape): the split is by shape, and says so. Same-dtype
copies (``copy_`` into a buffer, ``clone``: ``.contiguous()`` of a transposed view) are counted
apart: in a profile they are ``aten::copy_`` time too.

It slows what it watches: count in an untimed pass.

Usage::

    with CastCounter(model) as casts:
        trainer.fit()                       # some steps
    print(casts.line(steps))                # 'casts per step: 160 (41.3 MB read + written): weights 80 ...'
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

_TO_COPY = torch.ops.aten._to_copy.default
_COPY = torch.ops.aten.copy_.default
_CLONE = torch.ops.aten.clone.default


class CastCounter(TorchDispatchMode):
    """Counts dtype casts (and same-dtype copies) with their bytes; see the module docstring."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.parameter_shapes = {tuple(p.shape) for p in model.parameters()}
        self.calls: Counter = Counter()  # (kind, source dtype, target dtype) -> calls
        self.bytes: Counter = Counter()  # the same keys -> bytes read + written

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is _TO_COPY or func is _COPY or func is _CLONE:
            source = args[1] if func is _COPY else args[0]
            target = out
            if isinstance(source, torch.Tensor) and isinstance(target, torch.Tensor):
                self._count(source, target)
        return out

    def _count(self, source: torch.Tensor, target: torch.Tensor) -> None:
        if source.dtype == target.dtype:
            kind = "copy"
        elif not (source.dtype.is_floating_point and target.dtype.is_floating_point):
            kind = "mask"  # bool / integer: dropout masks, attention masks, indices
        else:
            kind = "weight" if tuple(source.shape) in self.parameter_shapes else "activation"
        key = (kind, str(source.dtype).removeprefix("torch."), str(target.dtype).removeprefix("torch."))
        self.calls[key] += 1
        self.bytes[key] += target.numel() * (source.element_size() + target.element_size())

    def per_step(self, steps: int) -> dict[str, Any]:
        """Calls and bytes per step: float casts in all, weights, activations, by direction; masks; copies."""

        def total(counter: Counter, kinds: tuple[str, ...]) -> float:
            return sum(v for k, v in counter.items() if k[0] in kinds) / steps

        directions: dict[str, float] = {}
        for (kind, src, dst), n in self.calls.items():
            if kind in ("weight", "activation"):
                directions[f"{src}->{dst}"] = directions.get(f"{src}->{dst}", 0) + n / steps
        return {
            "steps": steps,
            "casts": total(self.calls, ("weight", "activation")),
            "cast_bytes": total(self.bytes, ("weight", "activation")),
            "weight_casts": total(self.calls, ("weight",)),
            "weight_cast_bytes": total(self.bytes, ("weight",)),
            "activation_casts": total(self.calls, ("activation",)),
            "activation_cast_bytes": total(self.bytes, ("activation",)),
            "by_direction": dict(sorted(directions.items())),
            "mask_casts": total(self.calls, ("mask",)),
            "mask_cast_bytes": total(self.bytes, ("mask",)),
            "copies": total(self.calls, ("copy",)),
            "copy_bytes": total(self.bytes, ("copy",)),
        }

    def line(self, steps: int) -> str:
        """One line: float casts per step with their bytes, weights vs activations (by shape), directions;
        bool/integer casts; same-dtype copies."""
        s = self.per_step(steps)
        mb = 1e6
        directions = ", ".join(f"{k} {v:.0f}" for k, v in s["by_direction"].items()) or "none"
        return (
            f"casts per step: {s['casts']:.0f} ({s['cast_bytes'] / mb:.1f} MB read + written): weights "
            f"{s['weight_casts']:.0f} ({s['weight_cast_bytes'] / mb:.1f} MB), activations "
            f"{s['activation_casts']:.0f} ({s['activation_cast_bytes'] / mb:.1f} MB) (split by shape); "
            f"{directions}; bool/integer casts (masks, indices) {s['mask_casts']:.0f} ({s['mask_cast_bytes'] / mb:.1f} "
            f"MB); same-dtype copies (copy_, clone) {s['copies']:.0f} ({s['copy_bytes'] / mb:.1f} MB)"
        )
