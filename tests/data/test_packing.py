"""Packed batches (mixft.data.packing): every real token once, in order, in rows no longer than the longest sentence."""

from __future__ import annotations

import random

import pytest
import torch

from mixft.data.packing import PackingCollator, first_fit_decreasing, is_packed, pack_batch, samples_in
from tests.tiny_models import make_tokenizer, toy_batch


def padded(lengths: list[int], left: bool = False, seed: int = 0) -> dict[str, torch.Tensor]:
    """A padded batch: token ids 1..len, token types alternating, labels 0..B-1 as floats."""
    rng = random.Random(seed)
    width = max(lengths)
    ids = torch.zeros(len(lengths), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    types = torch.zeros_like(ids)
    for i, n in enumerate(lengths):
        cols = slice(width - n, width) if left else slice(0, n)
        ids[i, cols] = torch.tensor([rng.randrange(5, 1000) for _ in range(n)])
        mask[i, cols] = 1
        types[i, cols] = torch.tensor([j % 2 for j in range(n)])
    return {
        "input_ids": ids,
        "token_type_ids": types,
        "attention_mask": mask,
        "labels": torch.arange(len(lengths)) * 1.0,
    }


def sentences_of(packed: dict) -> dict[int, dict[str, list[int]]]:
    """Each sentence's tokens, types and positions read back out of packed rows (row-major order)."""
    out: dict[int, dict[str, list[int]]] = {}
    seq = packed["sequence_ids"].flatten().tolist()
    for key in ("input_ids", "token_type_ids", "position_ids", "attention_mask"):
        for s, value in zip(seq, packed[key].flatten().tolist() if key in packed else []):
            if s >= 0:
                out.setdefault(s, {}).setdefault(key, []).append(value)
    return out


def test_first_fit_decreasing_fills_rows_longest_first():
    assert first_fit_decreasing([5, 3, 2, 4], 6) == [[0], [3, 2], [1]]
    rows = first_fit_decreasing([7, 1, 1, 7, 3, 4, 2, 6], 8)
    assert sorted(i for row in rows for i in row) == list(range(8))
    assert all(sum([7, 1, 1, 7, 3, 4, 2, 6][i] for i in row) <= 8 for row in rows)
    with pytest.raises(ValueError, match="does not fit"):
        first_fit_decreasing([9], 8)


@pytest.mark.parametrize("left", [False, True], ids=["right-padded", "left-padded"])
def test_every_real_token_lands_once_in_order_with_positions_from_zero(left):
    lengths = [9, 3, 14, 2, 5, 7, 1, 11]
    batch = padded(lengths, left=left)
    packed = pack_batch(batch, pad_token_id=0)
    rows, capacity = packed["input_ids"].shape
    assert capacity == max(lengths) and rows < len(lengths)
    back = sentences_of(packed)
    assert sorted(back) == list(range(len(lengths)))
    for i, n in enumerate(lengths):
        real = batch["attention_mask"][i].bool()
        assert back[i]["input_ids"] == batch["input_ids"][i][real].tolist()
        assert back[i]["token_type_ids"] == batch["token_type_ids"][i][real].tolist()
        assert back[i]["position_ids"] == list(range(n))
        assert back[i]["attention_mask"] == [1] * n
    # token counters sum the attention mask: the same real tokens as the padded batch
    assert int(packed["attention_mask"].sum()) == sum(lengths)
    assert torch.equal(packed["labels"], batch["labels"])  # per sentence, in the batch's order
    padding = packed["sequence_ids"] < 0
    assert int(padding.sum()) == rows * capacity - sum(lengths)
    assert (packed["input_ids"][padding] == 0).all() and (packed["attention_mask"][padding] == 0).all()


def test_a_sentence_stays_in_one_row_and_padding_sits_at_row_ends():
    packed = pack_batch(padded([6, 6, 6, 2, 2, 2, 4]))
    seq = packed["sequence_ids"]
    for s in range(7):
        assert len(set((seq == s).nonzero()[:, 0].tolist())) == 1  # one row each
    for row in seq.tolist():
        real = [s for s in row if s >= 0]
        assert row == real + [-1] * (len(row) - len(real))


def test_rows_round_up_to_the_padding_multiple():
    packed = pack_batch(padded([5, 3, 9]), pad_to_multiple_of=8)
    assert packed["input_ids"].shape[1] == 16
    assert sorted(sentences_of(packed)) == [0, 1, 2]


def test_random_batches_roundtrip_and_pad_less():
    rng = random.Random(1)
    for trial in range(40):
        lengths = [rng.randint(1, 60) for _ in range(rng.randint(1, 40))]
        batch = padded(lengths, seed=trial)
        packed = pack_batch(batch)
        back = sentences_of(packed)
        assert [back[i]["input_ids"] for i in range(len(lengths))] == [
            batch["input_ids"][i, :n].tolist() for i, n in enumerate(lengths)
        ]
        assert packed["input_ids"].numel() <= batch["input_ids"].numel()
        assert samples_in(packed) == samples_in(batch) == len(lengths)


def test_the_collator_packs_what_the_padding_collator_returns():
    from transformers import DataCollatorWithPadding

    tokenizer = make_tokenizer("bert")
    features = [
        {"input_ids": ids, "label": label}
        for ids, label in zip(
            tokenizer(["a fine film", "bad", "the plot was boring and not fun"])["input_ids"], [1, 0, 0]
        )
    ]
    pad = DataCollatorWithPadding(tokenizer, return_tensors="pt")
    collate = PackingCollator(pad, tokenizer.pad_token_id)
    packed = collate(features)
    assert is_packed(packed) and not is_packed(pad(features))
    assert packed["labels"].tolist() == [1, 0, 0]
    back = sentences_of(packed)
    assert [back[i]["input_ids"] for i in range(3)] == [f["input_ids"] for f in features]
    assert collate.padding_collator is pad


def test_a_tokenizer_batch_with_pairs_keeps_its_segments():
    batch = toy_batch(make_tokenizer("bert"), "2-class", pairs=True)
    packed = pack_batch(batch, pad_token_id=0)
    back = sentences_of(packed)
    for i in range(len(batch["labels"])):
        real = batch["attention_mask"][i].bool()
        assert back[i]["token_type_ids"] == batch["token_type_ids"][i][real].tolist()


def test_per_sentence_tensors_pass_through_whatever_their_shape():
    # A (B, L) float tensor with L the padded length (multi-label targets, per-sentence features) is one
    # row per sentence: packing must not scatter it like tokens (it did when tokens were told by shape).
    lengths = [9, 3, 14, 2, 5]
    batch = padded(lengths)
    width = batch["input_ids"].shape[1]
    features = torch.rand(len(lengths), width)
    multi_label = torch.randint(0, 2, (len(lengths), width)).float()
    packed = pack_batch({**batch, "features": features, "labels": multi_label})
    assert packed["input_ids"].shape != (len(lengths), width)  # the tokens did move into rows
    assert torch.equal(packed["features"], features) and torch.equal(packed["labels"], multi_label)
    back = sentences_of(packed)  # the token-aligned tensors still moved, in order
    assert [back[i]["token_type_ids"] for i in range(len(lengths))] == [
        batch["token_type_ids"][i, :n].tolist() for i, n in enumerate(lengths)
    ]


def test_a_token_tensor_of_the_wrong_shape_is_refused():
    batch = padded([4, 2])
    with pytest.raises(ValueError, match=r"token_type_ids is one value per token: expected shape \(2, 4\)"):
        pack_batch({**batch, "token_type_ids": batch["token_type_ids"][:, :3]})
