"""mixft's generated sets standing in for hub datasets that cannot be reached, in their schemas.

Usage::

    from mixft.data.synthetic.stand_ins import stand_in_for, SST2
    stand_in = stand_in_for("glue", "mrpc")              # a StandIn, or None without one
    splits = SST2.build(train_size=2000, eval_size=872, seed=0)   # DatasetDict(train, validation)
    AG_NEWS.build(train_size=100, eval_size=10)                   # DatasetDict(train, test), as ag_news
    load_text_data(dataset="glue", dataset_config="sst2", stand_in=SST2)   # a recipe's choice

Stand-ins exist for ``glue/sst2`` (generated sentiment), ``glue/mrpc`` (generated paraphrase
pairs) and ``ag_news`` (generated 4-topic news), each in the original's columns and label
names, so the data path reads them exactly as it would read the real dataset. Which one a
run may use is the recipe's decision: the user-data path only receives it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mixft.data.glue import GLUE_REPO
from mixft.data.hubdata import canonical_name
from mixft.data.synthetic.common import MAX_SIZE

GENERIC_NOTICE = (
    "notice: {label} is not reachable or cached; using {name}, mixft's generated stand-in in its schema "
    "({train} train / {eval} eval, seed {seed})"
)


@dataclass(frozen=True)
class StandIn:
    """A generated set in a hub dataset's schema, used when that dataset cannot be had.

    ``notice`` is the one line the user sees (fields: label, name, train, eval, seed);
    ``label`` names the original to the user (default: as the caller asked for it);
    ``described``, ``unit`` and ``more_data`` word the message that refuses more rows than
    ``max_size``. A recipe may ``dataclasses.replace`` any of them for its own wording.
    """

    name: str  # the generated set's name, as results.json records the dataset
    rows: Callable[[int, int, int], tuple[list[dict], list[dict]]]  # (train, eval, seed) -> rows
    features: Callable[[], object]  # -> datasets.Features of the original
    notice: str = GENERIC_NOTICE
    described: str = "mixft's generated stand-in"
    unit: str = "rows"
    label: str | None = None
    more_data: str = "--train-file/--validation-file"
    max_size: int = MAX_SIZE
    # The original's name for its evaluation split: ag_news has train and test only, so its
    # stand-in has the same two, and a command that works offline works online too.
    eval_split: str = "validation"

    def build(self, *, train_size: int, eval_size: int, seed: int = 0):
        """``DatasetDict(train=..., <eval_split>=...)`` in the original's features and split names.

        Usage: ``splits = SST2.build(train_size=2000, eval_size=872, seed=0)``
        """
        import datasets

        train, dev = self.rows(train_size, eval_size, seed)
        features = self.features()
        return datasets.DatasetDict(
            {
                "train": datasets.Dataset.from_list(train, features=features),
                self.eval_split: datasets.Dataset.from_list(dev, features=features),
            }
        )


def _sst2_rows(train_size, eval_size, seed):
    from mixft.data.synthetic.sentiment import generated_splits

    splits = generated_splits(train_size, eval_size, seed)
    return tuple([{**r, "idx": i} for i, r in enumerate(split)] for split in splits)


def _sst2_features():
    import datasets

    return datasets.Features(
        {
            "sentence": datasets.Value("string"),
            "label": datasets.ClassLabel(names=["negative", "positive"]),
            "idx": datasets.Value("int32"),
        }
    )


def _mrpc_rows(train_size, eval_size, seed):
    from mixft.data.synthetic.paraphrase import paraphrase_splits

    return paraphrase_splits(train_size, eval_size, seed)


def _mrpc_features():
    import datasets

    from mixft.data.synthetic.paraphrase import LABEL_NAMES

    return datasets.Features(
        {
            "sentence1": datasets.Value("string"),
            "sentence2": datasets.Value("string"),
            "label": datasets.ClassLabel(names=list(LABEL_NAMES)),
            "idx": datasets.Value("int32"),
        }
    )


def _ag_news_rows(train_size, eval_size, seed):
    from mixft.data.synthetic.topics import topics_splits

    return topics_splits(train_size, eval_size, seed)


def _ag_news_features():
    import datasets

    from mixft.data.synthetic.topics import TOPIC_NAMES

    return datasets.Features({"text": datasets.Value("string"), "label": datasets.ClassLabel(names=list(TOPIC_NAMES))})


SST2 = StandIn(
    "mixft-generated-sentiment",
    _sst2_rows,
    _sst2_features,
    described="mixft's generated sentiment set",
    unit="sentences",
)
MRPC = StandIn("mixft-generated-paraphrase", _mrpc_rows, _mrpc_features, unit="sentence pairs")
AG_NEWS = StandIn("mixft-generated-topics", _ag_news_rows, _ag_news_features, unit="texts", eval_split="test")

# (hub repository, config) -> its stand-in
_BY_DATASET = {
    (GLUE_REPO, "sst2"): SST2,
    (GLUE_REPO, "mrpc"): MRPC,
    (canonical_name("ag_news"), None): AG_NEWS,
    (canonical_name("ag_news"), "default"): AG_NEWS,
}


def stand_in_for(dataset: str | None, config: str | None = None) -> StandIn | None:
    """The stand-in for a hub dataset (any spelling of its name), or None where mixft has none.

    Usage: ``load_text_data(dataset=name, stand_in=stand_in_for(name, config))``
    """
    if dataset is None:
        return None
    return _BY_DATASET.get((canonical_name(dataset), config or None))
