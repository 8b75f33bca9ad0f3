"""The loop's progress (``TrainState``) and how it becomes plain Python for a checkpoint.

Usage::

    state = TrainState()                 # the trainer keeps one; fit() moves it on
    loop = state.to_plain()              # floats, ints, lists: loads with weights_only
    TrainState(**loop)                   # a resumed trainer's state
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import torch


@dataclass
class TrainState:
    """Everything about the loop's progress; a checkpoint saves this with the weights."""

    epoch: int = 0  # epochs completed
    batch_in_epoch: int = 0  # micro-batches consumed in the current epoch
    step: int = 0  # optimizer steps attempted
    skipped_steps: int = 0
    consecutive_skips: int = 0
    samples: int = 0
    tokens: int = 0
    train_time_s: float = 0.0
    history: dict[str, list] = field(
        default_factory=lambda: {"step": [], "loss": [], "lr": [], "grad_norm": [], "loss_scale": [], "skipped": []}
    )
    # One entry per evaluation during fit: {"epoch", "step", **metrics}.
    eval_history: list[dict[str, Any]] = field(default_factory=list)

    def to_plain(self) -> dict[str, Any]:
        """The state as plain Python (history tensors read back as floats: a host sync).

        Usage: ``TrainState(**state.to_plain())`` is a copy of ``state``
        """
        loop = {f.name: getattr(self, f.name) for f in fields(TrainState)}
        loop["history"] = {k: floats(v) if k in ("loss", "grad_norm") else list(v) for k, v in self.history.items()}
        loop["eval_history"] = [{k: plain(v) for k, v in e.items()} for e in self.eval_history]
        return loop


def floats(values: list) -> list:
    """Device scalars -> Python floats in one transfer; floats pass through.

    Usage: ``floats([torch.tensor(1.5), 2.0]) == [1.5, 2.0]``
    """
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    if not tensors:
        return list(values)
    read = iter(torch.stack([t.float() for t in tensors]).tolist())
    return [next(read) if isinstance(v, torch.Tensor) else v for v in values]


def plain(value):
    """A numpy or torch scalar as a Python number (metrics may hand either back); others as they are.

    Usage: ``plain(np.float64(0.5)) == 0.5``
    """
    return value.item() if hasattr(value, "item") and not isinstance(value, (list, dict)) else value
