"""mixft.data.synthetic.common: the size rule, split rngs, distinct rows and disjoint splits of every generator."""

from __future__ import annotations

import pytest

from mixft.data.synthetic.common import MAX_SIZE, check_size, disjoint_splits, distinct_rows, split_rng
from mixft.errors import UsageError


@pytest.mark.parametrize("bad", [-1, 1.5, "10", True, None])
def test_size_must_be_a_whole_number(bad):
    with pytest.raises(UsageError, match=r"^n must be an integer >= 0, got "):
        check_size("n", bad)


def test_size_past_the_largest_split_is_refused_before_any_work():
    check_size("n", MAX_SIZE)
    with pytest.raises(UsageError, match=f"^train_size must be at most {MAX_SIZE}"):
        check_size("train_size", MAX_SIZE + 1)


def test_split_rngs_are_deterministic_and_differ_per_split():
    assert split_rng("set", "train", 3).random() == split_rng("set", "train", 3).random()
    assert split_rng("set", "train", 3).random() != split_rng("set", "eval", 3).random()


def test_distinct_rows_redraws_repeats_and_refuses_excluded_texts():
    draws = iter(["a", "a", "b", "c"])
    rows = distinct_rows([0, 1, 0], lambda label: ({"t": (t := next(draws)), "label": label}, t, (t,)))
    assert [r["t"] for r in rows] == ["a", "b", "c"]  # the second "a" was redrawn
    with pytest.raises(ValueError, match="could not generate enough distinct texts"):
        distinct_rows([0], lambda label: ({"t": "x"}, "x", ("x",)), exclude={"x"}, tries=3)


def test_disjoint_splits_keep_every_train_text_out_of_eval():
    def generate(n, rng, exclude):
        return distinct_rows(
            range(n), lambda label: ({"t": (t := str(rng.randrange(40)))}, t, (t,)), exclude=exclude, tries=1000
        )

    train, dev = disjoint_splits(generate, "toy", 20, 10, seed=0, texts=lambda row: (row["t"],))
    assert (len(train), len(dev)) == (20, 10)
    assert not {r["t"] for r in train} & {r["t"] for r in dev}
    assert disjoint_splits(generate, "toy", 20, 10, seed=0, texts=lambda row: (row["t"],)) == (train, dev)
