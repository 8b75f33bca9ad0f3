#!/usr/bin/env python
"""Measure what mixed precision buys here: ``python scripts/benchmark.py --small [--peers] [--scaling]``.

Run ``--help`` for the options. The logic lives in ``benchmarks/`` (an application beside
the library, installed with it as its own package, like ``recipes/``); ``python -m
benchmarks.cli`` is the same.
"""

import sys

from benchmarks.cli import main

if __name__ == "__main__":
    sys.exit(main())
