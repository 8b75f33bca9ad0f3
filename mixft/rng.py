"""Capture and restore every global random number generator a training step draws from.

Checkpoints save these (``mixft.checkpoint``) and the trainer restores them when it
resumes mid-epoch, so dropout and data shuffling draw the same numbers as a run that was
never stopped. Its own module so that the trainer and the checkpoint code both import it
and neither imports the other for it.

Usage::

    state = capture_rng_state()
    ...                                  # draws random numbers
    restore_rng_state(state)             # the same draws again
"""

from __future__ import annotations

import random
import sys
from collections.abc import Mapping
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


def _as_tuple(value):
    # random.setstate wants the nested tuples random.getstate gave (a round trip may list them).
    return tuple(_as_tuple(v) for v in value) if isinstance(value, (list, tuple)) else value
