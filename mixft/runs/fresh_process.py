"""A CPU run's peak RSS measured in a process of its own, so run order cannot move it.

A process's resident set only remembers: after an fp32 run, the allocator keeps the pages
it freed, so a bf16 run in the same process reports fp32's peak (or more), and reversing
``--compare`` reverses the figures. ``fresh_peak_rss`` therefore calls ``train_steps`` in a new
Python (``mixft.runs.child_process``: a fresh interpreter, not a fork of this one), which
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
pickles); when it does not pickle the child prepares it again from the options.

Usage::

    figure = fresh_peak_rss(cfg, prepared, precision, device, seed)   # None if it could not be measured
    figure.peak_bytes, figure.start_bytes, figure.steps
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

from mixft.log import logger
from mixft.runs.child_process import ArgumentsDoNotPickle, ChildFailed, call_in_fresh_process

__all__ = ["STEPS", "FreshFigure", "fresh_peak_rss", "peak_rss_bytes", "train_steps"]

#: Optimizer steps the fresh process trains: the first creates the optimizer's state, the
#: next ones run with it allocated (the steady state of a training step).
STEPS = 3


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
    train = "mixft.runs.fresh_process:train_steps"
    try:
        try:
            answer = call_in_fresh_process(train, cfg, prepared, precision, str(device), seed, steps)
        except ArgumentsDoNotPickle:  # data that does not pickle: the child prepares it again
            answer = call_in_fresh_process(train, cfg, None, precision, str(device), seed, steps)
    except ChildFailed as e:
        return _not_measured(precision, str(e))
    if "error" in answer:
        return _not_measured(precision, answer["error"])
    return FreshFigure(answer["peak_bytes"], answer["start_bytes"], answer["steps"])


def _not_measured(precision, why: str) -> None:
    logger.warning(
        "could not measure %s's peak RSS in a fresh process (%s); the run's own figure is kept", precision.name, why
    )
    return None


def train_steps(cfg, prepared, precision, device: str, seed: int, steps: int) -> dict[str, Any]:
    """What the fresh process does: build the run (``prepared`` None: prepared again) and train ``steps`` steps;
    ``{"peak_bytes", "start_bytes", "steps"}`` or ``{"error"}``."""
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
