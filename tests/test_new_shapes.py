"""benchmarks/new_shapes.py's bookkeeping: each mode's row counts, the table, bad input (no clocks judged)."""

from __future__ import annotations

import pytest

from benchmarks.new_shapes import MODES, RowCounts, main, table
from mixft.data.shape_ladder import ladder_up


def test_new_counts_are_never_repeated_nor_used_by_the_other_modes():
    counts = RowCounts(600, spread=40)
    new = [counts.next("new") for _ in range(60)]
    assert len(set(new)) == 60 and all(560 <= n <= 640 for n in new)
    assert 600 not in new and all(ladder_up(n) != n for n in new)  # the other modes' counts
    assert {counts.next("repeated") for _ in range(5)} == {600}
    on_ladder = {counts.next("ladder") for _ in range(50)}
    assert on_ladder <= {512, 640} and all(ladder_up(n) == n for n in on_ladder)
    with pytest.raises(ValueError, match="ran out"):
        for _ in range(100):
            counts.next("new")


def test_the_table_gives_each_modes_median_and_the_ratios_to_repeated():
    times = {"fp32/repeated": [0.010, 0.012, 0.011], "fp32/new": [0.033, 0.030, 0.031], "fp32/ladder": [0.012] * 3}
    assert set(MODES) == {"repeated", "new", "ladder"}
    assert "| fp32 | 11.00 | 31.00 | 12.00 | 2.82 | 1.09 |" in table(times, ["fp32"])


def test_a_tiny_run_prints_its_table(capsys):
    args = ["--precisions", "fp32", "--rows", "64", "--calls", "2", "--rounds", "1"]
    assert main([*args, "--in-features", "8", "--out-features", "8"]) == 0
    out = capsys.readouterr().out
    assert "Linear(8, 8) forward + backward, 64 rows (repeated)" in out
    assert "| fp32 |" in out and "new ÷ repeated" in out


def test_a_precision_that_holds_its_weights_in_bf16_is_refused(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--precisions", "bf16-pure"])
    assert stop.value.code == 2
    assert "--precisions: bf16-pure" in capsys.readouterr().err
