"""A CPU run's peak RSS measured in a process of its own, so run order cannot move it.

A process's resident set only remembers: after an fp32 run, the allocator keeps the pages
it freed, so a bf16 run in the same process reports fp32's peak (or more), and reversing
``--compare`` reverses the figures. ``fresh_peak_rss`` therefore starts a new Python
(``python -m mixft.runs.fresh_process``: a fresh interpreter, not a fork of this one), which
builds the run's parts from the recipe (same options, precision and seed: same model and batches) and
trains the first ``STEPS`` optimizer steps of that precision, the optimizer's first step
included so its state exists. It reports:

- ``peak_bytes``: the child's ``VmHWM`` (the kernel's high-water mark of its resident set,
  /proc/self/status) when those steps end: the WHOLE fresh process, nothing subtracted:
  the interpreter, torch and the libraries, the data, the model, and training's peak.
  (``ru_maxrss`` is not used: across spawn's exec it can carry the parent's figure.)
- ``start_bytes``: its RSS after building, just before the first step, so
  ``peak - start`` is what the training steps added, as for an in-process run.

It is the figure of the first ``STEPS`` steps only, with no evaluation: later batches of
other lengths may peak higher in the run itself. The prepared data is handed to the child
(pickled on its stdin: Arrow datasets travel as their cache files or tables, the tokenizer
pickles); when it does not pickle the child prepares it again from the options. The child
imports this module, the recipe, and what they import, with the parent's ``sys.path``.
Not multiprocessing's spawn: that re-runs the parent's ``__main__`` script in the child,
which a user's script without an ``if __name__ == "__main__"`` guard turns into a second
run. Ctrl-C is left to the parent: the child ignores SIGINT, the parent ends the child when
it is interrupted.

Usage::

    figure = fresh_peak_rss(cfg, prepared, precision, device, seed)   # None if it could not be measured
    figure.peak_bytes, figure.start_bytes, figure.steps
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import subprocess
import sys
from typing import Any, NamedTuple

from mixft.errors import first_line
from mixft.log import logger

__all__ = ["STEPS", "FreshFigure", "fresh_peak_rss", "peak_rss_bytes"]

#: Optimizer steps the fresh process trains: the first creates the optimizer's state, the
#: next ones run with it allocated (the steady state of a training step).
STEPS = 3
TIMEOUT_S = 600.0


class FreshFigure(NamedTuple):
    """What a fresh process measured: bytes, and the steps it trained."""

    peak_bytes: int
    start_bytes: int | None
    steps: int


def peak_rss_bytes() -> int | None:
    """This process's resident-set high-water mark (``VmHWM``) in bytes; None without /proc.

    Usage: ``peak_rss_bytes()``
    """
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024  # the kernel writes kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def fresh_peak_rss(cfg, prepared, precision, device, seed: int, steps: int = STEPS) -> FreshFigure | None:
    """Train the first ``steps`` steps of this (precision, seed) run in a fresh process; its peak RSS.
    None (with a log line) when the child could not measure it.

    ``cfg``: the run's RunConfig (recipe defaults applied); ``prepared``: ``recipe.prepare(cfg)``.

    Usage: ``fresh_peak_rss(cfg, prepared, precision, torch.device("cpu"), seed=0).peak_bytes``
    """
    try:
        payload = pickle.dumps((cfg, prepared, precision, str(device), seed, steps))
    except Exception:  # noqa: BLE001 - data that does not pickle: the child prepares it again
        payload = pickle.dumps((cfg, None, precision, str(device), seed, steps))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}  # the parent's mixft, recipes
    child = subprocess.Popen(
        [sys.executable, "-m", __name__], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    try:
        out, err = child.communicate(payload, timeout=TIMEOUT_S)
    except BaseException as e:
        child.kill()
        child.wait()
        if not isinstance(e, Exception):
            raise  # KeyboardInterrupt: the child is gone, the parent handles it
        return _not_measured(precision, first_line(e) or type(e).__name__)
    try:
        answer = pickle.loads(out)
    except Exception:  # noqa: BLE001 - it died before answering: its last stderr line says why
        lines = err.decode(errors="replace").strip().splitlines()
        return _not_measured(precision, lines[-1] if lines else f"exit code {child.returncode}")
    if "error" in answer:
        return _not_measured(precision, answer["error"])
    return FreshFigure(answer["peak_bytes"], answer["start_bytes"], answer["steps"])


def _not_measured(precision, why: str) -> None:
    logger.warning(
        "could not measure %s's peak RSS in a fresh process (%s); the run's own figure is kept", precision.name, why
    )
    return None


def _child_main() -> None:
    """The fresh process: read the pickled run on stdin, write the pickled answer on stdout."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C belongs to the parent, which ends this child
    stdout = sys.stdout.buffer
    sys.stdout = sys.stderr  # library prints must not corrupt the answer
    try:
        answer = _train_steps(*pickle.load(sys.stdin.buffer))
    except BaseException as e:  # noqa: BLE001 - every failure goes back as one line
        answer = {"error": first_line(e) or type(e).__name__}
    stdout.write(pickle.dumps(answer))
    stdout.flush()


def _train_steps(cfg, prepared, precision, device: str, seed: int, steps: int) -> dict[str, Any]:
    import torch

    from mixft.recipe import get_recipe
    from mixft.runs.build import build_trainer
    from mixft.train.measure import current_rss_bytes

    recipe = get_recipe(cfg.recipe)
    if prepared is None:
        prepared = recipe.prepare(cfg)
    device_ = torch.device(device)
    parts = recipe.build(cfg, prepared, precision, device_, seed)
    parts = dataclasses.replace(parts, eval_loader=None)  # training's peak, not evaluation's
    short = dataclasses.replace(cfg, max_steps=steps, epochs=1)
    trainer = build_trainer(parts, short, precision=precision, device=device_, seed=seed)
    start = current_rss_bytes()
    result = trainer.fit()
    peak = peak_rss_bytes()
    if peak is None:
        return {"error": "no /proc/self/status on this system"}
    return {"peak_bytes": peak, "start_bytes": start, "steps": result.steps}


if __name__ == "__main__":
    _child_main()
