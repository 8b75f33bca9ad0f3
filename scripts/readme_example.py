#!/usr/bin/env python
"""The README example, corrected, trained in FP32 and in AMP side by side.

``python scripts/readme_example.py [--epochs 5] [--model bert-base-uncased] [--data-dir DIR]``

Prints the README's three bugs and its autocast trap (run live), the diff between the
single- and mixed-precision loops, and both runs' accuracy, time, memory, skipped steps
and loss scale. The logic lives in ``mixft.readme_example``; ``--help`` for the options.
"""

import sys

from mixft.readme_example import main

if __name__ == "__main__":
    sys.exit(main())
