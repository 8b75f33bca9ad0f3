"""What a new matmul shape costs, per precision: one Linear's forward + backward with its row count repeated vs new.

``python benchmarks/new_shapes.py [--precisions fp32,bf16] [--rows 600] [--calls 20] [--rounds 3]
[--in-features 384] [--out-features 1536] [--json FILE]``

Issue 41's first finding, as a command to reproduce on any CPU before building on it (on a Xeon
with amx_bf16: 4.4 ms repeated, 14.0 ms new under bf16 autocast; fp32 8.5-9.5 ms either way).
Per precision, three modes of ``--calls`` timed calls each, in rotated rounds after one untimed
call per mode: ``repeated`` (``--rows`` every call), ``new`` (every call a row count not used
before in the process, drawn at random within ``--rows`` +- about ``calls x rounds`` so the work averages
``--rows``; a kernel library that builds a kernel per shape builds one on every call) and ``ladder``
(counts drawn from the same range, rounded up ``mixft.data.shape_ladder``'s ladder: few shapes,
some padding). Printed: the median ms per call of each mode, new ÷ repeated
(what a new shape costs) and ladder ÷ repeated, with the CPU and its flags. The bf16 rows use
autocast, as a run does; on a CPU without native bf16 they time torch's emulation.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import torch

from benchmarks.timing import markdown_table, rotated
from mixft.amp.hardware import describe_hardware, hardware_line
from mixft.amp.precision import PRECISIONS
from mixft.data.shape_ladder import ladder_up

MODES = ("repeated", "new", "ladder")


class RowCounts:
    """The row count of each call per mode: ``rows``; a count never used before; a drawn count on the ladder."""

    def __init__(self, rows: int, spread: int, seed: int = 0):
        self.rows, self.spread = rows, spread
        self.rng = random.Random(seed)
        # Never ``rows`` and never a ladder value: the other modes use those, so they would not be new.
        fresh = [n for n in range(max(1, rows - spread), rows + spread + 1) if n != rows and ladder_up(n) != n]
        self.rng.shuffle(fresh)
        self.fresh = iter(fresh)

    def next(self, mode: str) -> int:
        if mode == "repeated":
            return self.rows
        if mode == "new":
            count = next(self.fresh, None)
            if count is None:
                raise ValueError("ran out of new row counts: the spread is too small for the calls")
            return count
        return ladder_up(self.rng.randint(max(1, self.rows - self.spread), self.rows + self.spread))


def time_calls(layer: torch.nn.Linear, dtype: torch.dtype | None, counts: list[int]) -> list[float]:
    """Seconds of each forward + backward of ``layer`` on ``counts[i]`` rows (autocast to ``dtype`` if given)."""
    times = []
    for n in counts:
        x = torch.randn(n, layer.in_features, requires_grad=True)
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            y = layer(x)
        y.float().sum().backward()
        times.append(time.perf_counter() - start)
    return times


def measure(precisions: list[str], rows: int, calls: int, rounds: int, in_features: int, out_features: int) -> dict:
    """``{"<precision>/<mode>": [seconds, ...]}``: every mode of every precision, rotated per round."""
    torch.manual_seed(0)
    layer = torch.nn.Linear(in_features, out_features)
    # Room for every "new" call of every precision (the untimed first ones too) within rows +- spread.
    counts = RowCounts(rows, spread=(calls * rounds + 1) * len(precisions) // 2 + 8)
    order = [(p, m) for p in precisions for m in MODES]
    times: dict[str, list[float]] = {f"{p}/{m}": [] for p, m in order}
    for precision, mode in order:  # one untimed call each: the first call's one-off costs
        time_calls(layer, PRECISIONS[precision].autocast_dtype, [counts.next(mode)])
    for r in range(rounds):
        for precision, mode in rotated(order, r):
            drawn = [counts.next(mode) for _ in range(calls)]
            times[f"{precision}/{mode}"] += time_calls(layer, PRECISIONS[precision].autocast_dtype, drawn)
    return times


def table(times: dict, precisions: list[str]) -> str:
    rows = []
    for precision in precisions:
        median = {m: statistics.median(times[f"{precision}/{m}"]) for m in MODES}
        rows.append(
            [
                precision,
                *(f"{median[m] * 1e3:.2f}" for m in MODES),
                f"{median['new'] / median['repeated']:.2f}",
                f"{median['ladder'] / median['repeated']:.2f}",
            ]
        )
    headers = ["precision", *(f"{m} ms" for m in MODES), "new ÷ repeated", "ladder ÷ repeated"]
    return markdown_table(headers, rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--precisions", default="fp32,bf16")
    p.add_argument("--rows", type=int, default=600)
    p.add_argument("--calls", type=int, default=20, help="timed calls per mode per round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--in-features", type=int, default=384)
    p.add_argument("--out-features", type=int, default=1536)
    p.add_argument("--json", help="also write the raw times here")
    args = p.parse_args(argv)
    precisions = [name.strip() for name in args.precisions.split(",") if name.strip()]
    unknown = [name for name in precisions if name not in PRECISIONS or PRECISIONS[name].param_dtype is not None]
    if unknown or not precisions:
        p.error(f"--precisions: {', '.join(unknown) or 'none given'}; choose from fp32, fp16, bf16")
    if min(args.rows, args.calls, args.rounds, args.in_features, args.out_features) < 1:
        p.error("--rows, --calls, --rounds, --in-features and --out-features must be >= 1")
    hw = describe_hardware(torch.device("cpu"))
    times = measure(precisions, args.rows, args.calls, args.rounds, args.in_features, args.out_features)
    print(
        f"Linear({args.in_features}, {args.out_features}) forward + backward, {args.rows} rows (repeated) vs a row "
        f"count never used before (new) vs drawn counts on the ladder (ladder), {args.rounds} rounds x "
        f"{args.calls} calls per mode\n{hardware_line(hw)}; torch {torch.__version__}, {torch.get_num_threads()} threads\n"
    )
    print(table(times, precisions))
    if args.json:
        Path(args.json).write_text(json.dumps({"hardware": hw, "args": vars(args), "times_s": times}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
