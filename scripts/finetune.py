#!/usr/bin/env python
"""Fine-tune a recipe in FP32 or mixed precision: ``python scripts/finetune.py --recipe bert-sst2 --amp``.

Run ``--help`` for the options. The logic lives in ``mixft.cli.main``.
"""

import sys

from mixft.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
