"""What every mixft command line shares: one-line errors and strict number types.

Usage::

    p = OneLineParser(prog="finetune.py")
    p.add_argument("--epochs", type=positive_int)
"""

from __future__ import annotations

import argparse
import logging
import re
import sys

from mixft.errors import UsageError
from mixft.log import logger
from mixft.options import NON_NEGATIVE_FLOAT, NON_NEGATIVE_INT, POSITIVE_FLOAT, POSITIVE_INT, PROBABILITY, Check


class OneLineParser(argparse.ArgumentParser):
    """argparse that raises ``UsageError`` (one line, exit 2) instead of printing usage."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # argparse takes "-2e-5" for an option ("--lr: expected one argument"); it is a
        # (negative, so refused) number. Its own pattern misses exponents.
        self._negative_number_matcher = re.compile(r"^-\d+$|^-\d*\.\d+$|^-(\d+\.?\d*|\.\d+)[eE][-+]?\d+$")

    def error(self, message: str):
        raise UsageError(message)


# The number types of mixft's command lines: the same rules RunConfig applies (mixft.options).
positive_int = POSITIVE_INT.parse
non_negative_int = NON_NEGATIVE_INT.parse
positive_float = POSITIVE_FLOAT.parse
non_negative_float = NON_NEGATIVE_FLOAT.parse
probability = PROBABILITY.parse


def int_list(text: str) -> list[int]:
    return Check(
        lambda t: [int(part) for part in t.split(",") if part.strip()], bool, "comma-separated integers"
    ).parse(text)


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
