"""Batch shapes that repeat: each batch's rows and row length rounded up a short ladder.

Why: on a CPU with AMX, oneDNN builds a bf16 matmul kernel for each new input shape. A
``Linear(384, 1536)`` forward + backward under bf16 autocast took 4.4 ms when its row count
repeated and 14.0 ms when every call brought a new one, while fp32 took 8.5-9.5 ms either way
(2-core Xeon with amx_bf16, issue 41). Packed batches (``mixft.data.packing``) bring a new
(rows x row length) nearly every step, and padded batches a new length. On the ladder, the
shapes of an epoch come from a handful, at the cost of some padding, which the benchmarks count
(``benchmarks/step_ablation.py --stream`` prints the epoch's distinct shapes and its padding
efficiency with and without it). Elsewhere a new shape was measured to cost nothing
(``benchmarks/new_shapes.py``, new ÷ repeated): 1.00 in fp32 and 1.01 in emulated bf16 on an AVX2
EPYC, 1.04 in fp32 and 1.03 in bf16 on a Xeon with AVX-512 but neither amx_bf16 nor avx512_bf16
(where torch calls bf16 native all the same), so there the ladder would only add padding:
``--batch-shapes auto`` uses it only for a bf16 run on a CPU with amx_bf16 (``avx512_bf16``
without AMX, and fp16, are not measured: exact shapes there). The recipes' default is ``exact``:
what the ladder buys in a whole bf16 step (not one Linear) waits to be measured on a CPU with AMX.

Training batches only: evaluation batches come length-sorted, in the same order at every
evaluation, so their shapes repeat from one evaluation to the next already; on the ladder the 872
sentences of SST-2's dev set still took 13 distinct shapes in 14 batches (as exact), at 5 % more
computed tokens.

The ladder: every integer up to ``2 * steps``, then ``steps`` evenly spaced values per doubling
(``steps=4``: ..., 7, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80, ...), so a value is
rounded up by less than a quarter. Results do not change beyond float rounding: the extra
positions are padding the model never reads (a padded batch's mask, a packed batch's
``sequence_ids`` of -1; tests/models/test_packed.py and tests/data/test_shape_ladder.py).

Usage::

    shapes = batch_shape_ladder(cfg.batch_shapes, precision, device, max_length=cfg.max_length)
    loader = make_loader(rows, tokenizer, 32, shuffle=True, shapes=shapes)   # None: exact shapes
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

BATCH_SHAPES = ("auto", "ladder", "exact")  # --batch-shapes


def ladder_up(n: int, steps: int = 4) -> int:
    """The smallest ladder value >= ``n`` (``steps``, a power of two, values per doubling).

    Usage: ``ladder_up(33) == 40``; ``ladder_up(7) == 7``
    """
    if steps < 1 or steps & (steps - 1):
        raise ValueError(f"steps per doubling must be a power of two, got {steps}")
    if n <= 2 * steps:
        return max(int(n), 0)
    spacing = (1 << (int(n).bit_length() - 1)) // steps  # within [2^e, 2^(e+1)): 2^e / steps apart
    return -(-n // spacing) * spacing


@dataclass(frozen=True)
class ShapeLadder:
    """How a loader rounds its batches' shapes: row counts and row lengths up the ladder.

    ``max_length``: the ladder takes a row length no further than this (a batch's own longest row
    is never cut), so a padded batch's positions stay within what the tokenizer truncates to and
    the model embeds.
    """

    max_length: int | None = None
    steps: int = 4

    def row_length(self, n: int) -> int:
        up = ladder_up(n, self.steps)
        return max(n, min(up, self.max_length)) if self.max_length else up

    def rows(self, n: int) -> int:
        return ladder_up(n, self.steps)


class LadderPadding:
    """Wraps a ``DataCollatorWithPadding``: pads each batch to its longest example's length on the ladder.

    Usage: ``LadderPadding(DataCollatorWithPadding(tok, return_tensors="pt"), ShapeLadder(max_length=128))``
    """

    def __init__(self, padding_collator, ladder: ShapeLadder):
        self.padding_collator = padding_collator
        self.ladder = ladder

    def __call__(self, features: list) -> Mapping:
        longest = max((len(f["input_ids"]) for f in features), default=0)
        # The wrapped collator's pad_to_multiple_of (CUDA's 8) still applies: tokenizer.pad rounds max_length up to it.
        on_ladder = dataclasses.replace(
            self.padding_collator, padding="max_length", max_length=self.ladder.row_length(longest)
        )
        return on_ladder(features)


def shapes_name(ladder: ShapeLadder | None) -> str:
    """What a run records of its batches' shapes (``run_info``/results.json ``batch_shapes``): "ladder" or "exact"."""
    return "exact" if ladder is None else "ladder"


def batch_shape_ladder(choice: str, precision, device, max_length: int | None = None) -> ShapeLadder | None:
    """The run's ladder (None: each batch keeps its own shape) for ``--batch-shapes`` ``choice``.

    ``auto``: the ladder where a new shape was measured to cost a kernel build: the run computes in
    bf16 (``precision.autocast_dtype``) on a CPU with amx_bf16 whose oneDNN runs bf16 natively
    (``mixft.amp.hardware``). Elsewhere exact shapes: padding would only cost.

    Usage: ``batch_shape_ladder("auto", resolve_precision("bf16", cpu), cpu, max_length=128)``
    """
    if choice not in BATCH_SHAPES:
        raise ValueError(f"batch shapes must be one of {', '.join(BATCH_SHAPES)}, got {choice!r}")
    if choice == "exact":
        return None
    if choice == "auto" and not _new_shapes_build_kernels(precision, device):
        return None
    return ShapeLadder(max_length=max_length)


def _new_shapes_build_kernels(precision, device) -> bool:
    # Torch's "native bf16" is true on every AVX-512 CPU, and only AMX was measured to pay for a new shape
    # (module docstring): both are asked, so a Xeon without bf16 instructions keeps exact shapes.
    import torch

    from mixft.amp.hardware import describe_cpu, native_precisions

    if getattr(device, "type", None) != "cpu" or precision.autocast_dtype != torch.bfloat16:
        return False
    return native_precisions(device).get("bf16") is True and describe_cpu()["flags"].get("amx_bf16") is True
