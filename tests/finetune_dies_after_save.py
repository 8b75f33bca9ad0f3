"""scripts/finetune.py whose process kills itself (SIGKILL) as soon as its first checkpoint save has returned:
a node lost mid-run, at a known step, for tests/train/test_multinode.py.

Before dying it writes ``time.monotonic()`` and the step to the file ``$MIXFT_TEST_DEATH_FILE`` (the
clock is the machine's, so the test can time how long the other node takes to end).

Usage: python -m torch.distributed.run ... tests/finetune_dies_after_save.py --recipe bert-sst2 ...
"""

import os
import signal
import sys
import time
from pathlib import Path

from mixft.callbacks.checkpointer import Checkpointer
from mixft.cli.main import main

_save = Checkpointer.save


def save_then_die(self, trainer):
    path = _save(self, trainer)  # a collective: every process has written its shards when it returns
    Path(os.environ["MIXFT_TEST_DEATH_FILE"]).write_text(f"{time.monotonic()} {trainer.state.step}")
    os.kill(os.getpid(), signal.SIGKILL)  # no exit handler, no goodbye on the sockets but the kernel's
    return path


if __name__ == "__main__":
    Checkpointer.save = save_then_die
    sys.exit(main())
