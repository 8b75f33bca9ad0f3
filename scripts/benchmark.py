#!/usr/bin/env python
"""Measure what mixed precision buys here: ``python scripts/benchmark.py --small [--peers] [--scaling]``.

Run ``--help`` for the options. The logic lives in ``benchmarks/`` (an application beside
the library, not installed with it), imported from this checkout.
"""

import sys
from pathlib import Path

# The repository root first, so `benchmarks` is this checkout's whatever the working directory.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
