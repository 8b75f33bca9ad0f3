"""What every mixft command line shares: one-line errors and strict number types.

Usage::

    p = OneLineParser(prog="finetune.py")
    p.add_argument("--epochs", type=positive_int)
"""

from __future__ import annotations

import argparse
import logging
import math
import re
import sys
from collections.abc import Callable

from .errors import UsageError
from .log import logger


class OneLineParser(argparse.ArgumentParser):
    """argparse that raises ``UsageError`` (one line, exit 2) instead of printing usage."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # argparse takes "-2e-5" for an option ("--lr: expected one argument"); it is a
        # (negative, so refused) number. Its own pattern misses exponents.
        self._negative_number_matcher = re.compile(r"^-\d+$|^-\d*\.\d+$|^-(\d+\.?\d*|\.\d+)[eE][-+]?\d+$")

    def error(self, message: str):
        raise UsageError(message)


def _checked(text: str, convert: Callable, ok: Callable, expected: str):
    try:
        value = convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {expected}, got {text!r}") from None
    if not ok(value):  # comparisons with nan are False, so nan is refused too
        raise argparse.ArgumentTypeError(f"must be {expected}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    return _checked(text, int, lambda v: v >= 1, "a positive integer")


def non_negative_int(text: str) -> int:
    return _checked(text, int, lambda v: v >= 0, "an integer >= 0")


def positive_float(text: str) -> float:
    return _checked(text, float, lambda v: math.isfinite(v) and v > 0, "a positive finite number")


def non_negative_float(text: str) -> float:
    return _checked(text, float, lambda v: math.isfinite(v) and v >= 0, "a finite number >= 0")


def probability(text: str) -> float:
    return _checked(text, float, lambda v: 0 <= v <= 1, "a probability between 0 and 1")


def int_list(text: str) -> list[int]:
    return _checked(
        text, lambda t: [int(part) for part in t.split(",") if part.strip()], bool, "comma-separated integers"
    )


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever sys.stderr is *now* (tests and notebooks swap it)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value):
        pass


def setup_logging() -> None:
    """Show mixft's notices (INFO and up) on stderr, once, however often a command runs."""
    if not any(isinstance(h, _StderrHandler) for h in logger.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)
