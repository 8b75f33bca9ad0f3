"""bf16-pure's optimizer: torch-optimi's Kahan AdamW with the weight decay put through the compensation.

optimi's ``AdamW(kahan_sum=True)`` decays a weight with ``param.mul_(1 - lr * wd)`` on the
bf16 weight itself, outside the compensation buffer (``kahan_comp``); only the Adam step
goes through it. Below half a bf16 spacing (2⁻⁹ of the weight at best, far above any
fine-tuning lr × wd) the product rounds back to the same weight, every step: the decay
never happens. ``KahanAdamW`` hands optimi a weight decay of 0 for the step and adds the
decoupled decay, ``-lr · wd · weight``, to the weight's ``kahan_comp`` instead, where the
next update carries it into the weight like any other small step.

Why in chunks: the buffer is bf16 too. It holds a residual of at most about half the
weight's spacing to 8 bits, so about 2⁻¹⁷ of the weight; fine-tuning's decay per step
(lr 5e-5 × wd 0.01..0.1 = 5e-7..5e-6) is at or below that and, added step by step, is
rounded away in the buffer once it has grown (zero gradients, lr 5e-5, wd 0.1, weights of
scale 0.05: 2.6e-3 of fp32's 5.0e-3 relative decay after 1,000 steps, 2.8e-3 of 1.5e-2 after
3,000). So each
weight's decay factor, the product of ``1 - lr · wd`` not yet applied, is kept in its
state (``decay_factor``, a float saved with the checkpoint) and added to the buffer once
it reaches ``DECAY_CHUNK`` of the weight: 16x the buffer's resolution, and a sixteenth of
the smallest half-spacing, the most the weight then lags fp32's decay.

Parameters without compensation (an fp32 parameter in a group, a group with
``kahan_sum=False``) are decayed as optimi would, ``param.mul_(1 - lr * wd)``.
The group's ``weight_decay`` is restored after the step, also on an exception, so
``state_dict`` and checkpoints keep the user's value.

Usage::

    opt = KahanAdamW(groups, lr=2e-5, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, kahan_sum=True, triton=False)
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import optimi
import torch

__all__ = ["DECAY_CHUNK", "KahanAdamW"]

# 2^-13: 16x the ~2^-17 (relative to the weight) a bf16 compensation buffer resolves, so a chunk
# survives its rounding; 1/16 of the smallest half bf16 spacing (2^-9), so the weight's lag behind
# fp32's decay stays far inside one bf16 rounding.
DECAY_CHUNK = 2.0**-13

_LOW = (torch.float16, torch.bfloat16)


class KahanAdamW(optimi.AdamW):
    """``optimi.AdamW`` whose decoupled weight decay goes through the Kahan compensation (module docstring).

    Usage: ``KahanAdamW(model.parameters(), lr=1e-4, weight_decay=0.1, kahan_sum=True, triton=False)``
    """

    @torch.no_grad()
    def step(self, closure: Callable | None = None, param: torch.Tensor | None = None):
        if param is not None:
            raise ValueError("KahanAdamW does not support gradient release (step(param=...))")
        loss = None
        if closure is not None:  # before the decay: the closure makes the gradients that say who steps
            with torch.enable_grad():
                loss = closure()
        held: list[tuple[dict[str, Any], float]] = []
        try:
            for group in self.param_groups:
                if group["weight_decay"] != 0:
                    held.append((group, group["weight_decay"]))
                    self._decay(group)
                    group["weight_decay"] = 0.0  # optimi's own decay would round away on bf16 weights
            super().step()
        finally:
            for group, weight_decay in held:
                group["weight_decay"] = weight_decay
        return loss

    def _decay(self, group: dict[str, Any]) -> None:
        """This step's decay for ``group``'s parameters with a gradient (torch and optimi skip the others)."""
        lr, weight_decay = group["lr"], group["weight_decay"]
        # optimi's own expressions, so an uncompensated parameter decays bit-identically to optimi.
        factor = 1 - (lr / group["max_lr"]) * weight_decay if group["decouple_lr"] else 1 - lr * weight_decay
        due: dict[float, tuple[list[torch.Tensor], list[torch.Tensor]]] = defaultdict(lambda: ([], []))
        plain: list[torch.Tensor] = []
        for p in group["params"]:
            if p.grad is None:
                continue
            state = self.state[p]
            self._init_state(group, state, p)  # creates kahan_comp on the first step, as optimi's step would
            comp = state["kahan_comp"]
            if not (isinstance(comp, torch.Tensor) and comp.shape == p.shape and p.dtype in _LOW):
                plain.append(p)
                continue
            left = state.get("decay_factor", 1.0) * float(factor)
            if 1 - left >= DECAY_CHUNK:
                params, comps = due[left - 1]
                params.append(p)
                comps.append(comp)
                left = 1.0
            state["decay_factor"] = left
        for alpha, (params, comps) in due.items():
            # -(1 - F) * weight into the buffer; optimi's update then moves the weight by what it can hold.
            if group["foreach"]:
                torch._foreach_add_(comps, params, alpha=alpha)
            else:
                for comp, p in zip(comps, params):
                    comp.add_(p, alpha=alpha)
        if plain:
            if group["foreach"]:
                torch._foreach_mul_(plain, factor)
            else:
                for p in plain:
                    p.mul_(factor)
