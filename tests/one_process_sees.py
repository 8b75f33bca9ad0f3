"""Callbacks for the torchrun workers (tests/ddp_worker.py, tests/fsdp_worker.py): one process alone
sees what a launcher or its own batch gives it, the others do not.

Usage: ``callbacks=[NanLossAt(rank=1, step=2), CollapseDetector(check_every=1)]``
"""

from __future__ import annotations

import signal

import torch

from mixft import distributed
from mixft.train.hooks import Callback


class NanLossAt(Callback):
    """Process ``rank``'s loss of step ``step`` reads NaN (its own batch went bad); the others' stay finite."""

    def __init__(self, rank: int, step: int):
        self.rank, self.step = rank, step

    def on_step_end(self, trainer, info):
        if info.step == self.step and distributed.rank() == self.rank:
            trainer.state.history["loss"][-1] = torch.tensor(float("nan"))


class SignalAt(Callback):
    """Process ``rank`` sees SIGTERM at the end of step ``step``: the launcher's signal reaching one process first."""

    def __init__(self, handler, rank: int, step: int):
        self.handler, self.rank, self.step = handler, rank, step

    def on_step_end(self, trainer, info):
        if info.step == self.step and distributed.rank() == self.rank:
            self.handler.signum = signal.SIGTERM
