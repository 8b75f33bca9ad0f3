"""Batch shapes on a ladder (mixft.data.shape_ladder): few shapes, bounded padding, the same tokens, and when.

The ladder rounds up by less than a quarter and is stable (a ladder value stays); packed rows
and row lengths land on it with every real token once, in order, and the added rows padding
only; padded batches reach a ladder length, never past --max-length, keeping CUDA's multiple of
8; ``--batch-shapes auto`` takes the ladder only for bf16 compute on a CPU with AMX that torch says
runs it natively (the machine simulated by ``fake_probes.simulate_cpu``).
That the model computes the same on ladder shapes is tested in tests/models/test_packed.py,
through the trainer too.
"""

from __future__ import annotations

import random

import pytest
import torch
from fake_probes import simulate_cpu

from mixft.amp.precision import resolve_precision
from mixft.data.packing import pack_batch
from mixft.data.shape_ladder import LadderPadding, ShapeLadder, batch_shape_ladder, ladder_up
from tests.data.test_packing import padded, sentences_of
from tests.tiny_models import make_tokenizer

CPU = torch.device("cpu")


def test_the_ladder_is_every_integer_to_eight_then_four_steps_per_doubling():
    assert sorted({ladder_up(n) for n in range(1, 130)}) == [
        *range(1, 9), 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160
    ]  # fmt: skip
    assert [ladder_up(n, steps=2) for n in (4, 5, 6, 7, 9, 13)] == [4, 6, 6, 8, 12, 16]


def test_a_value_is_rounded_up_by_less_than_a_quarter_and_a_ladder_value_stays():
    for n in range(1, 5000):
        up = ladder_up(n)
        assert n <= up < 1.25 * n, n
        assert ladder_up(up) == up


def test_steps_that_are_not_a_power_of_two_are_refused():
    with pytest.raises(ValueError, match="power of two"):
        ladder_up(40, steps=3)


def test_the_row_length_stops_at_max_length_but_never_below_the_longest():
    ladder = ShapeLadder(max_length=36)
    assert [ladder.row_length(n) for n in (9, 33, 36)] == [10, 36, 36]  # 33 -> 40 on the ladder, capped at 36
    assert ShapeLadder(max_length=None).row_length(33) == 40
    assert ShapeLadder(max_length=30).row_length(33) == 33  # a longer batch than the cap keeps its own length
    assert ladder.rows(11) == 12  # row counts have no cap


@pytest.mark.parametrize("left", [False, True], ids=["right-padded", "left-padded"])
def test_packed_rows_on_the_ladder_hold_every_real_token_once_in_order(left):
    lengths = [17] * 9 + [3, 2, 1]  # rows of 20 on the ladder: 9 of them, and a tenth of padding only
    batch = padded(lengths, left=left)
    exact = pack_batch(batch)
    on_ladder = pack_batch(batch, ladder=ShapeLadder())
    assert tuple(exact["input_ids"].shape) == (10, 17)
    assert tuple(on_ladder["input_ids"].shape) == (10, 20)
    assert sentences_of(on_ladder) == sentences_of(exact)  # the same tokens, types, positions per sentence
    assert int(on_ladder["attention_mask"].sum()) == sum(lengths)
    assert bool((on_ladder["sequence_ids"][9] == -1).all())  # the row added for the ladder: padding only
    assert torch.equal(on_ladder["labels"], batch["labels"])


def test_every_packed_shape_of_random_batches_is_on_the_ladder():
    rng = random.Random(0)
    for _ in range(50):
        lengths = [rng.randint(1, 60) for _ in range(rng.randint(1, 40))]
        rows, capacity = pack_batch(padded(lengths, seed=rng.randrange(99)), ladder=ShapeLadder())["input_ids"].shape
        assert ladder_up(rows) == rows and ladder_up(capacity) == capacity


def test_a_packed_batch_on_the_ladder_still_takes_a_multiple_of_eight():
    packed = pack_batch(padded([9, 3, 14]), pad_to_multiple_of=8, ladder=ShapeLadder())
    assert packed["input_ids"].shape[1] == 16  # 14 -> 14 on the ladder -> 16


def test_padded_batches_reach_a_ladder_length_capped_at_max_length():
    from transformers import DataCollatorWithPadding

    tokenizer = make_tokenizer("bert")
    texts = ["a fine film", "a very long and rather boring film about nothing at all really", "bad"]
    features = [dict(tokenizer(t)) | {"label": i % 2} for i, t in enumerate(texts)]
    longest = max(len(f["input_ids"]) for f in features)
    plain = DataCollatorWithPadding(tokenizer, return_tensors="pt")
    exact = plain(features)
    on_ladder = LadderPadding(plain, ShapeLadder())(features)
    width = on_ladder["input_ids"].shape[1]
    assert exact["input_ids"].shape[1] == longest and width == ladder_up(longest) > longest
    assert torch.equal(on_ladder["input_ids"][:, :longest], exact["input_ids"])
    assert int(on_ladder["attention_mask"].sum()) == int(exact["attention_mask"].sum())  # added columns: padding
    assert torch.equal(on_ladder["labels"], exact["labels"])
    assert LadderPadding(plain, ShapeLadder(max_length=longest))(features)["input_ids"].shape[1] == longest
    cuda_like = DataCollatorWithPadding(tokenizer, pad_to_multiple_of=8, return_tensors="pt")
    assert LadderPadding(cuda_like, ShapeLadder())(features)["input_ids"].shape[1] % 8 == 0


@pytest.mark.parametrize(
    "native_bf16,native_fp16,amx,precision,expected",
    [
        (True, True, True, "bf16", True),  # AMX: a new shape costs a bf16 kernel build (3.2x, issue 41)
        (True, True, True, "bf16-pure", True),  # computes in bf16 as bf16 does
        (True, True, True, "fp32", False),  # fp32 takes the same time either way: padding would only cost
        (True, True, True, "fp16", False),  # not measured: exact shapes
        (True, False, False, "bf16", False),  # AVX-512 without bf16 instructions, native to torch: 1.03x measured
        (False, False, False, "bf16", False),  # emulated bf16 (AVX2 only): no kernel to reuse
    ],
)
def test_auto_takes_the_ladder_only_for_bf16_on_a_cpu_with_amx(
    monkeypatch, native_bf16, native_fp16, amx, precision, expected
):
    simulate_cpu(monkeypatch, bf16=native_bf16, fp16=native_fp16, amx=amx)
    chosen = batch_shape_ladder("auto", resolve_precision(precision, CPU, policy=False), CPU, max_length=64)
    assert (chosen == ShapeLadder(max_length=64)) if expected else chosen is None


def test_ladder_and_exact_are_what_they_say_wherever_they_run(monkeypatch):
    simulate_cpu(monkeypatch, bf16=False)
    fp32 = resolve_precision("fp32", CPU)
    assert batch_shape_ladder("ladder", fp32, CPU, max_length=128) == ShapeLadder(max_length=128)
    simulate_cpu(monkeypatch, bf16=True)
    assert batch_shape_ladder("exact", resolve_precision("bf16", CPU, policy=False), CPU) is None
    with pytest.raises(ValueError, match="auto, ladder, exact"):
        batch_shape_ladder("round", fp32, CPU)


def test_auto_keeps_exact_shapes_off_the_cpu(monkeypatch):
    simulate_cpu(monkeypatch, bf16=True, fp16=True, amx=True)  # a kernel library's question, asked of CUDA it is not
    fp16 = resolve_precision("fp16", CPU, policy=False)
    assert batch_shape_ladder("auto", fp16, torch.device("cuda")) is None
