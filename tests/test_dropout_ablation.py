"""benchmarks/dropout_ablation.py's bookkeeping: rotated rounds, per-variant times, speedups (no clocks read)."""

from __future__ import annotations

from benchmarks.dropout_ablation import ablation_table, run_ablation


class FakeWorkload:
    """Step "times" fixed per dropout kind, and the order variants ran in."""

    def __init__(self, name: str, order: list, seconds: dict[bool, float]):
        self.name, self.order, self.seconds = name, order, seconds

    def timed_steps(self, fast: bool, warmup: int, steps: int) -> list[float]:
        self.order.append((self.name, "fast" if fast else "torch"))
        return [self.seconds[fast]] * steps


def test_rounds_rotate_the_variants_and_the_table_reports_the_speedup():
    order: list = []
    workloads = {"fp32": FakeWorkload("fp32", order, {False: 0.4, True: 0.2}),
                 "bf16": FakeWorkload("bf16", order, {False: 0.3, True: 0.3})}
    times = run_ablation(workloads, rounds=4, warmup=1, steps=3)
    firsts = [order[i * 4] for i in range(4)]
    assert len(set(firsts)) == 4  # every variant ran first in one round
    assert len(times["fp32/fast"]["all"]) == 12 and len(times["fp32/fast"]["rounds"]) == 4
    table = ablation_table(times, ["fp32", "bf16"])
    assert "| fp32 | fast | 200.0 |" in table and "2.00 (rounds 2.00-2.00)" in table
    assert "| bf16 | fast | 300.0 |" in table and "1.00 (rounds 1.00-1.00)" in table
