"""The precision table's row names, importable without torch.

``--precision``'s choices and ``--config``'s check need the names before anything runs;
``mixft.amp.precision`` (the table itself) imports torch, which takes seconds to load, so a
``--help`` or a mistyped option would wait for it. ``PRECISIONS`` has one row per name, in
this order (tests/amp/test_precision_names.py checks that they agree).

Usage: ``parser.add_argument("--precision", choices=PRECISION_NAMES)``
"""

PRECISION_NAMES = ("fp32", "tf32", "fp16", "bf16", "bf16-pure", "bf16-true")

#: torch.amp.GradScaler's own ``init_scale``: where an fp16 run's loss scale starts unless --init-loss-scale says.
GRADSCALER_INIT_SCALE = 65536.0
