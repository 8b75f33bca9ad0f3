"""Offline-first SST-2 data resolution.

In order: a user-supplied ``--data-dir`` (``train.tsv`` / ``dev.tsv``); GLUE SST-2 from the
local datasets cache (when the hub is unreachable) or from the hub; otherwise mixft's
generated sentiment set, with a one-line notice. Rows are ``{"sentence": str, "label": int}``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from mixft.hub import go_offline, hub_reachable
from mixft.errors import UsageError
from mixft.log import logger

GLUE_REPO = "nyu-mll/glue"
MAX_GENERATED = 1_000_000  # sentences per split of the generated set: ~12 s and ~1 GiB to make
GLUE_CONFIG = "sst2"
GLUE_NAME = "glue/sst2"
# GLUE's test split is unlabelled (label -1): never use it.
_GLUE_SPLITS = ("train", "validation")


@dataclass(frozen=True)
class SentimentData:
    train: list[dict]
    eval: list[dict]
    name: str
    source: str  # "data-dir" | "cache" | "hub" | "generated"
    notice: str | None = None


def _split_rows(split: Any) -> list[dict]:
    """Rows from a ``datasets.Dataset`` (or a dict of columns, or a list of row dicts)."""
    if isinstance(split, list):
        pairs = ((row["sentence"], row["label"]) for row in split)
    else:
        pairs = zip(split["sentence"], split["label"])
    rows = [{"sentence": str(sentence), "label": int(label)} for sentence, label in pairs]
    return [row for row in rows if row["label"] >= 0]


def _load_glue_sst2() -> tuple[list[dict], list[dict]]:
    import datasets

    loaded = datasets.load_dataset(GLUE_REPO, GLUE_CONFIG)
    train, evaluation = (_split_rows(loaded[name]) for name in _GLUE_SPLITS)
    if not train or not evaluation:
        raise ValueError(f"{GLUE_NAME}: empty train or validation split")
    return train, evaluation


def load_sentiment_data(
    data_dir: str | os.PathLike | None = None,
    *,
    seed: int = 0,
    generated_train_size: int = 4000,
    generated_eval_size: int = 872,
    hub_timeout: float = 3.0,
) -> SentimentData:
    """The sentiment data to train and evaluate on; takes seconds when offline.

    1. ``data_dir`` given: its ``train.tsv`` / ``dev.tsv`` (source ``"data-dir"``).
    2. GLUE SST-2 (``nyu-mll/glue``, ``sst2``; train and validation splits): from the hub
       when it is reachable (source ``"hub"``), else from the local datasets cache after
       :func:`mixft.hub.go_offline` so that ``load_dataset`` fails at once instead of
       retrying (source ``"cache"``).
    3. Otherwise mixft's generated sentiment set (source ``"generated"``) with a notice.

    Usage: ``data = load_sentiment_data(); print(data.name, len(data.train), data.notice)``
    """
    if data_dir is not None:
        from mixft.data.tsv import read_data_dir

        train, dev = read_data_dir(data_dir)
        return SentimentData(train=list(train), eval=list(dev), name=str(data_dir), source="data-dir")

    online = hub_reachable(hub_timeout)
    if not online:
        go_offline()
    try:
        train, evaluation = _load_glue_sst2()
    except Exception as exc:  # offline and not cached, download failure, datasets missing...
        logger.debug("GLUE SST-2 unavailable (%s): %s", type(exc).__name__, exc)
    else:
        return SentimentData(train=train, eval=evaluation, name=GLUE_NAME, source="hub" if online else "cache")

    from mixft.data.generated import DATASET_NAME, generated_splits

    for what, size in (("training", generated_train_size), ("evaluation", generated_eval_size)):
        if size > MAX_GENERATED:
            # Checked before generating: 10 million sentences would end in a MemoryError
            # after half a minute instead.
            raise UsageError(f"--max-{'train' if what == 'training' else 'eval'}-samples {size}: mixft's generated "
                             f"sentiment set offers at most {MAX_GENERATED} {what} sentences (GLUE SST-2 is not "
                             "reachable or cached here); pass --data-dir for more data")
    train, evaluation = generated_splits(generated_train_size, generated_eval_size, seed)
    train, evaluation = list(train), list(evaluation)
    notice = (
        f"notice: GLUE SST-2 is not reachable or cached; using mixft's generated sentiment set "
        f"({len(train)} train / {len(evaluation)} eval, seed {seed})"
    )
    logger.debug(notice)  # returned to the caller, who decides when the user sees it
    return SentimentData(train=train, eval=evaluation, name=DATASET_NAME, source="generated", notice=notice)
