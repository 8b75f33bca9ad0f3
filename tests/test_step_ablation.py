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
        frozenset({"packing"}): 0.12,
        frozenset({"first_token_encoder"}): 0.14,
        frozenset({"shape_ladder"}): 0.09,  # a switch that costs here: all ÷ it below 1
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
    assert "| bf16 | -packing | 120.0 |" in table and "1.200 (rounds 1.200-1.200)" in table
    assert "1.500 (rounds 1.500-1.500)" in table  # none vs all
    assert "| bf16 | -shape_ladder | 90.0 |" in table and "0.900 (rounds 0.900-0.900)" in table


def test_a_data_dir_that_is_not_sst2_is_one_line_and_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["--precisions", "fp32", "--rounds", "1", "--steps", "1", "--data-dir", str(tmp_path / "absent")])
    assert stopped.value.code == 2
    assert "--data-dir" in capsys.readouterr().err.splitlines()[-1]


# ----------------------------------------------------------------------------------- the stream
@pytest.fixture(scope="module")
def tiny_stream(tiny_bert_dir, tmp_path_factory):
    """The bert-sst2 recipe on conftest's tiny BERT and 40 generated sentences: 5 batches of 8."""
    from benchmarks.bert import BertSetup, prepare_bert
    from tests.conftest import make_data_dir

    data = make_data_dir(tmp_path_factory.mktemp("stream") / "sst2", 40, 8)
    setup = BertSetup(
        model=str(tiny_bert_dir), data_dir=str(data), train_samples=40, eval_samples=8, batch_size=8, device="cpu"
    )
    return prepare_bert(setup)


def _loader_batches(bert, packed=True, shapes="ladder"):  # "all" trains on the ladder
    import dataclasses

    import torch

    from mixft.amp.precision import PRECISIONS

    cfg = dataclasses.replace(bert.cfg, pack_sequences=packed, batch_shapes=shapes)
    return list(bert.recipe.build(cfg, bert.prepared, PRECISIONS["fp32"], torch.device("cpu"), seed=0).train_loader)


def test_the_stream_mode_trains_the_loaders_batches_in_order_and_fixed_repeats_their_median(tiny_stream):
    from benchmarks.step_ablation import STREAM, timed_variant
    from benchmarks.stream import batch_work, median_batch

    batches = _loader_batches(tiny_stream)
    work = [(b["input_ids"].shape[0], b["input_ids"].shape[1], int(b["sequence_ids"].max()) + 1) for b in batches]
    assert len(set(work)) > 1  # the stream's shapes change: what a fixed batch hides
    seen: dict = {}
    times = timed_variant(tiny_stream, "fp32", frozenset(), warmup=1, steps=3, stream=True, seen=seen)
    assert len(times) == 3 and all(t > 0 for t in times)
    run = seen[("fp32", frozenset())]
    assert run["step_work"] == [[w] for w in work[1:4]]  # the timed steps: the loader's 2nd to 4th batches
    assert run["linear_input_shapes"] >= 2 and run["linear_calls"] > 0
    timed_variant(tiny_stream, "fp32", frozenset({STREAM}), warmup=1, steps=3, stream=True, seen=seen)
    fixed = median_batch(batches[:4])
    shape, sentences, _, _ = batch_work(fixed)
    assert seen[("fp32", frozenset({STREAM}))]["step_work"] == [[(*shape, sentences)]] * 3
    # The like-for-like comparison: time over the FLOPs each computed (bert_matmul_flops), by hand.
    from benchmarks.bert import bert_matmul_flops
    from benchmarks.step_ablation import stream_lines

    config = run["config"]
    flops = [bert_matmul_flops(config, [w]) for w in work[1:4]]
    fixed_flops = bert_matmul_flops(config, [(*shape, sentences)])
    times = {"fp32/all": {"all": [0.3, 0.2, 0.4], "rounds": [[0.3, 0.2, 0.4]]}}
    times["fp32/fixed"] = {"all": [0.1, 0.1, 0.1], "rounds": [[0.1, 0.1, 0.1]]}
    (line,) = stream_lines(times, seen, ["fp32"])
    per_flop = (0.9 / sum(flops)) / (0.1 / fixed_flops)
    assert "stream ÷ fixed 3.000 (rounds 3.000-3.000)" in line and f"stream ÷ fixed {per_flop:.3f};" in line
    # Left out of the stream, packing trains the same sentences padded, in the same order.
    timed_variant(tiny_stream, "fp32", frozenset({"packing"}), warmup=1, steps=1, stream=True, seen=seen)
    padded = _loader_batches(tiny_stream, packed=False)[1]
    assert seen[("fp32", frozenset({"packing"}))]["step_work"] == [[(*padded["input_ids"].shape, 8)]]


def test_epoch_shapes_count_distinct_shapes_and_padding_by_hand(tiny_stream):
    from benchmarks.stream import epoch_shapes, median_batch

    batches = _loader_batches(tiny_stream)
    epoch = epoch_shapes(batches)
    real = sum(int(b["attention_mask"].sum()) for b in batches)
    computed = sum(b["input_ids"].numel() for b in batches)
    assert (epoch.batches, epoch.sentences, epoch.packed) == (5, 40, True)
    assert epoch.distinct == len({tuple(b["input_ids"].shape) for b in batches})
    assert epoch.padding_efficiency == pytest.approx(real / computed)
    padded = epoch_shapes(_loader_batches(tiny_stream, packed=False))
    assert padded.real_tokens == real and padded.padding_efficiency < epoch.padding_efficiency
    sizes = sorted(b["input_ids"].numel() for b in batches)
    assert median_batch(batches)["input_ids"].numel() == sizes[2]


def test_the_floor_line_is_the_median_steps_matmuls_at_the_rate_plus_the_parameter_bytes():
    from types import SimpleNamespace

    from benchmarks.floors import FloorGauges
    from benchmarks.step_ablation import floor_figures

    config = SimpleNamespace(hidden_size=4, intermediate_size=8, num_hidden_layers=2)
    # bert_matmul_flops by hand for one (rows 1, length 2, sentences 1) micro-batch of this config
    # (per token 4*16 + 2*4*8 = 128): linear = 128 x 2 + 2*16 x 2 + (128 - 32) x 1 + (16 + 4) x 1 = 436;
    # attention = 1 x 2 x 1 x 2 x 2 x 4 + 2 x 1 x 2 x 4 = 48; x 6 (forward and backward) = 2904 FLOPs.
    seen = {("fp32", frozenset()): {"config": config, "step_work": [[(1, 2, 1)]] * 3, "parameter_bytes": 400}}
    times = {"fp32/all": {"all": [0.5, 0.3, 0.4], "rounds": [[0.5, 0.3, 0.4]]}}
    gauges = FloorGauges({"fp32": 2904 / 0.1}, 400 / 0.1, "by hand")  # 100 ms of matmuls + 100 ms of bytes
    fig = floor_figures(times, seen, ["fp32"], gauges)["fp32"]
    assert fig["floor_s"] == pytest.approx(0.2) and fig["above_floor"] == pytest.approx(2.0)
    assert fig["line"].startswith("fp32: step 400.0 ms, floor 200.0 ms (matmuls 100.0 ms")
    assert fig["line"].endswith("2.00x its floor")


def test_stream_mode_refuses_an_epoch_too_short_for_its_steps_in_one_line(tmp_path, capsys):
    from tests.conftest import make_data_dir

    data = make_data_dir(tmp_path / "sst2", 16, 8)
    argv = ["--stream", "--precisions", "fp32", "--steps", "5", "--warmup", "1", "--no-floor", "--data-dir", str(data)]
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    assert "fewer than --warmup + --steps" in capsys.readouterr().err.splitlines()[-1]
