#!/usr/bin/env python
"""Measure what mixed precision buys here: ``python scripts/benchmark.py --small [--peers] [--scaling]``.

Run ``--help`` for the options. The logic lives in ``mixft.bench``.
"""

import sys

from mixft.bench.cli import main

if __name__ == "__main__":
    sys.exit(main())
