"""mixft's generated demo sets standing in for hub datasets that cannot be reached.

Usage::

    from mixft.data.standins import stand_in
    found = stand_in("glue", "mrpc", train_size=2000, eval_size=872, seed=0)
    if found: splits, name = found      # a DatasetDict (train, validation) in MRPC's schema

Stand-ins exist for ``glue/sst2`` (generated sentiment), ``glue/mrpc`` (generated paraphrase
pairs) and ``ag_news`` (generated 4-topic news), each in the original's columns and
label names, so a recipe reads them exactly as it would read the real dataset.
"""

from __future__ import annotations

from mixft.data.hubdata import ALIASES, canonical_name


def _build_sst2(train_size, eval_size, seed):
    import datasets

    from mixft.data.generated import DATASET_NAME, generated_splits

    features = datasets.Features({
        "sentence": datasets.Value("string"),
        "label": datasets.ClassLabel(names=["negative", "positive"]),
        "idx": datasets.Value("int32"),
    })
    splits = generated_splits(train_size, eval_size, seed)
    rows = [[{**r, "idx": i} for i, r in enumerate(split)] for split in splits]
    return rows, features, DATASET_NAME


def _build_mrpc(train_size, eval_size, seed):
    import datasets

    from mixft.data.paraphrase import DATASET_NAME, LABEL_NAMES, paraphrase_splits

    features = datasets.Features({
        "sentence1": datasets.Value("string"),
        "sentence2": datasets.Value("string"),
        "label": datasets.ClassLabel(names=list(LABEL_NAMES)),
        "idx": datasets.Value("int32"),
    })
    return list(paraphrase_splits(train_size, eval_size, seed)), features, DATASET_NAME


def _build_ag_news(train_size, eval_size, seed):
    import datasets

    from mixft.data.topics import DATASET_NAME, TOPIC_NAMES, topics_splits

    features = datasets.Features({
        "text": datasets.Value("string"),
        "label": datasets.ClassLabel(names=list(TOPIC_NAMES)),
    })
    return list(topics_splits(train_size, eval_size, seed)), features, DATASET_NAME


# (dataset name without namespace, config) -> builder
_STAND_INS = {
    ("glue", "sst2"): _build_sst2,
    ("glue", "mrpc"): _build_mrpc,
    ("ag_news", None): _build_ag_news,
    ("ag_news", "default"): _build_ag_news,
}


def _key(name: str, config: str | None) -> tuple[str, str | None]:
    repo = canonical_name(name)
    short = next((alias for alias, full in ALIASES.items() if full == repo), repo)
    return short, (config or None)


def has_stand_in(name: str, config: str | None = None) -> bool:
    """Whether mixft can generate a stand-in for this dataset. Usage: ``has_stand_in("glue", "sst2")``"""
    return _key(name, config) in _STAND_INS


def stand_in(name: str, config: str | None, *, train_size: int, eval_size: int, seed: int = 0):
    """``(DatasetDict with train and validation, generated set's name)``, or None without a stand-in.

    Usage: ``splits, name = stand_in("ag_news", None, train_size=2000, eval_size=872)``
    """
    build = _STAND_INS.get(_key(name, config))
    if build is None:
        return None
    import datasets

    (train, dev), features, generated_name = build(train_size, eval_size, seed)
    splits = datasets.DatasetDict(
        train=datasets.Dataset.from_list(train, features=features),
        validation=datasets.Dataset.from_list(dev, features=features),
    )
    return splits, generated_name
