#!/usr/bin/env python
"""The README example, corrected, trained in FP32 and in AMP side by side.

``python scripts/readme_example.py [--epochs 5] [--model bert-base-uncased] [--data-dir DIR]``

Prints the README's three bugs and its autocast trap (run live), the diff between the
single- and mixed-precision loops, and both runs' accuracy, time, memory, skipped steps
and loss scale. The script itself is ``examples/readme_example.py`` (runnable directly;
its doc is ``examples/readme-example.md``); ``--help`` for the options.
"""

import sys
from pathlib import Path

# The repository root first, so `examples` is this checkout's whatever the working directory.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from examples.readme_example import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
