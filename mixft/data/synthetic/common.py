"""What every generated set shares: size rules, a seeded rng per split, distinct rows, disjoint splits.

Usage::

    from mixft.data.synthetic.common import check_size, disjoint_splits, distinct_rows, split_rng
    rows = distinct_rows(labels, lambda label: draw(rng, label), exclude=frozenset(), what="texts")
    train, dev = disjoint_splits(generate, NAME, 2000, 872, seed=0, texts=lambda row: (row["text"],))

Each generator (sentiment, topics, paraphrase) supplies only its grammar; the rules that
make its data usable (deterministic per seed, balanced labels, no text in both splits,
sizes refused before any work) live here once.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable

from mixft.errors import UsageError
from mixft.options import NON_NEGATIVE_INT

# Rows per split of any generated set: a million sentences take ~12 s and ~1 GiB to make;
# ten million would end in a MemoryError after half a minute instead of a message now.
MAX_SIZE = 1_000_000


def check_size(name: str, value) -> None:
    """The size rule of every generated set: a whole number from 0 to MAX_SIZE (UsageError otherwise)."""
    NON_NEGATIVE_INT.validate(name, value)
    if value > MAX_SIZE:
        raise UsageError(f"{name} must be at most {MAX_SIZE} (a generated set's largest split), got {value}")


def split_rng(dataset_name: str, split: str, seed: int) -> random.Random:
    """The split's own generator. A string seed is hashed deterministically (sha512), unlike hash()."""
    return random.Random(f"{dataset_name}/{split}/{seed}")


def distinct_rows(
    labels: Iterable[int],
    draw: Callable[[int], tuple[dict, str, tuple[str, ...]]],
    *,
    exclude: frozenset | set = frozenset(),
    tries: int = 100,
    what: str = "texts",
) -> list[dict]:
    """One row per label: ``draw(label) -> (row, key, texts)``, redrawn until ``key`` is new and no text is excluded.

    The text spaces are huge, so a redraw is rare; ``tries`` only stops a runaway size from
    looping forever (a repeated key is then accepted, an excluded text never is).
    """
    seen: set[str] = set()
    rows = []
    for label in labels:
        for _ in range(tries):
            row, key, texts = draw(label)
            clash = any(t in exclude for t in texts)
            if key not in seen and not clash:
                break
        else:
            if clash:
                raise ValueError(f"could not generate enough distinct {what}")
        seen.add(key)
        rows.append(row)
    return rows


def disjoint_splits(
    generate: Callable,
    dataset_name: str,
    train_size: int,
    eval_size: int,
    seed: int,
    *,
    texts: Callable[[dict], Iterable[str]],
    train_rng: random.Random | None = None,
):
    """``(train, eval)`` where no eval text appears anywhere in train.

    ``generate(n, rng, exclude)`` makes rows; train uses ``train_rng`` (default: the
    ``train`` split's rng), eval the ``eval`` split's rng and excludes every train text.
    """
    check_size("train_size", train_size)
    check_size("eval_size", eval_size)
    train = generate(train_size, train_rng or split_rng(dataset_name, "train", seed), frozenset())
    exclude = frozenset(t for row in train for t in texts(row))
    return train, generate(eval_size, split_rng(dataset_name, "eval", seed), exclude)
