"""benchmarks/step_ablation.py's bookkeeping: variants, rotated rounds, speedups (no clocks read); a bad --data-dir."""

from __future__ import annotations

import pytest

from benchmarks.step_ablation import SWITCHES, ablation_table, main, run_ablation, variants


def test_every_switch_is_left_out_once_and_all_together():
    names = variants()
    assert names["all"] == frozenset() and names["none"] == frozenset(SWITCHES)
    assert {next(iter(v)) for k, v in names.items() if k.startswith("-")} == set(SWITCHES)


def test_rounds_rotate_the_variants_and_the_table_reports_each_switchs_share():
    order: list = []
    seconds = {
        frozenset(): 0.10,
        frozenset({"fast_dropout"}): 0.12,
        frozenset({"row_embedding_grad"}): 0.11,
        frozenset({"packing"}): 0.13,
        frozenset({"first_token_encoder"}): 0.14,
        frozenset(SWITCHES): 0.15,
    }

    def fake(precision, left_out):
        order.append((precision, left_out))
        return [seconds[left_out] * (2 if precision == "fp32" else 1)] * 3

    times = run_ablation(fake, ["fp32", "bf16"], rounds=3)
    per_round = 2 * (len(SWITCHES) + 2)  # each precision: all, none, and each switch left out
    assert len(order) == 3 * per_round
    assert len({order[r * per_round] for r in range(3)}) == 3  # a different variant first in each round
    assert len(times["bf16/none"]["all"]) == 9 and len(times["bf16/none"]["rounds"]) == 3
    table = ablation_table(times, ["fp32", "bf16"])
    assert "| bf16 | all | 100.0 |" in table and "| fp32 | all | 200.0 |" in table
    assert "| bf16 | -fast_dropout | 120.0 |" in table and "1.200 (rounds 1.200-1.200)" in table
    assert "1.500 (rounds 1.500-1.500)" in table  # none vs all


def test_a_data_dir_that_is_not_sst2_is_one_line_and_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["--precisions", "fp32", "--rounds", "1", "--steps", "1", "--data-dir", str(tmp_path / "absent")])
    assert stopped.value.code == 2
    assert "--data-dir" in capsys.readouterr().err.splitlines()[-1]
