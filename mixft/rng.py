"""Capture and restore every global random number generator a training step draws from.

Checkpoints save these (``mixft.train.checkpoint``) and the trainer restores them when it
resumes mid-epoch (``ResumeRng``: which state, when), so dropout and data shuffling draw
the same numbers as a run that was never stopped. Its own module so that the trainer and
the checkpoint code both import it and neither imports the other for it.

Usage::

    seed_all(0)                          # what a run's seed fixes
    state = capture_rng_state()
    ...                                  # draws random numbers
    restore_rng_state(state)             # the same draws again
"""

from __future__ import annotations

import functools
import random
import sys
from collections.abc import Callable, Mapping
from typing import Any

import torch


def capture_rng_state() -> dict[str, Any]:
    """Python ``random``, numpy (when imported), torch CPU and CUDA, as plain Python and tensors.

    Usage: ``state = capture_rng_state(); ...; restore_rng_state(state)``
    """
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    np = sys.modules.get("numpy")  # only if something imported it: no import for its own sake
    if np is not None:
        kind, keys, pos, has_gauss, gauss = np.random.get_state(legacy=True)
        # Plain ints and a tensor, so the file loads with torch.load(weights_only=True).
        state["numpy"] = (str(kind), torch.from_numpy(keys.astype("int64")), int(pos), int(has_gauss), float(gauss))
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: Mapping[str, Any]) -> None:
    """Put back what :func:`capture_rng_state` returned.

    Usage: ``restore_rng_state(checkpoint["trainer"]["rng"]["now"])``
    """
    random.setstate(_as_tuple(state["python"]))
    torch.set_rng_state(state["torch"])
    if "numpy" in state:
        import numpy as np

        kind, keys, pos, has_gauss, gauss = state["numpy"]
        np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    if "cuda" in state and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])


def keeps_caller_rng(fn: Callable) -> Callable:
    """Decorate a function that seeds for its own runs: after it, the caller's random streams (torch, CUDA,
    Python's ``random``, numpy) are as they were, so a notebook's own draws do not restart from a run's seed.

    Usage: ``@keeps_caller_rng def run(cfg): ...``
    """

    @functools.wraps(fn)
    def kept(*args, **kwargs):
        saved = capture_rng_state()
        try:
            return fn(*args, **kwargs)
        finally:
            restore_rng_state(saved)

    return kept


def seed_all(seed: int) -> None:
    """Seed every generator :func:`capture_rng_state` saves: torch (CPU and CUDA), Python ``random`` and
    numpy (when imported), as ``transformers.set_seed`` does. A run's seed then fixes what a collator,
    an augmentation or a callback draws from Python's or numpy's generator too, not only torch's
    (was: those two started from the OS's entropy, so two runs of one seed drew differently there).

    Usage: ``seed_all(0)``
    """
    random.seed(seed)
    torch.manual_seed(seed)  # every CUDA device too
    np = sys.modules.get("numpy")
    if np is not None:
        # numpy's legacy seed is 32-bit words, >= 0; the CLI allows [-2**63, 2**64): two words of the
        # seed modulo 2**64 keep each seed its own stream (a negative one included).
        whole = seed % 2**64
        np.random.seed([whole & 0xFFFFFFFF, whole >> 32])


def _as_tuple(value):
    # random.setstate wants the nested tuples random.getstate gave (a round trip may list them).
    return tuple(_as_tuple(v) for v in value) if isinstance(value, (list, tuple)) else value


class ResumeRng:
    """The RNG bookkeeping that lets a resumed ``fit`` draw what an unbroken one would have.

    An epoch's loader draws from the global RNG as it starts (sampler and worker seeds).
    Resuming mid-epoch replays that from the state at the epoch's start; the state saved
    with the checkpoint takes over once the trained micro-batches are skipped.

    Usage (what the trainer does)::

        rng.load(checkpoint_rng)                    # {"now": ..., "epoch_start": ...} or None
        rng.start_epoch(mid_epoch=state.batch_in_epoch > 0)
        for window in windows: rng.catch_up(); ...  # first window: back to "now"
        rng.catch_up()                              # resumed at an epoch's end: nothing to skip
        rng.state()                                 # what a checkpoint saves
    """

    def __init__(self):
        self._pending: Mapping[str, Any] | None = None  # the checkpoint's states, until used
        self._epoch_start: dict[str, Any] | None = None

    @property
    def loaded(self) -> bool:
        """A checkpoint's states wait to be put back (``load`` was called and the fit has not used them yet)."""
        return self._pending is not None

    def load(self, state: Mapping[str, Any] | None) -> None:
        """The RNG states of a checkpoint (``state()``), put back at the right moments of the next fit."""
        self._pending = state

    def start_epoch(self, mid_epoch: bool) -> None:
        """Call before the epoch's loader starts; ``mid_epoch``: the epoch resumes part-way."""
        pending = self._pending
        if pending is not None:
            if mid_epoch and pending.get("epoch_start") is not None:
                restore_rng_state(pending["epoch_start"])
            else:
                self.catch_up()
        self._epoch_start = capture_rng_state()

    def catch_up(self) -> None:
        """Restore the checkpoint's own RNG state once (a no-op afterwards and without one)."""
        if self._pending is not None:
            restore_rng_state(self._pending["now"])
            self._pending = None

    def state(self) -> dict[str, Any]:
        """The RNG states now and at the start of the current epoch (what ``load`` takes)."""
        return {"now": capture_rng_state(), "epoch_start": self._epoch_start}
