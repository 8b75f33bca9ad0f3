"""Tokenise a checked text data set once, in Arrow, cached by `datasets`.

Usage::

    from mixft.data.tokenize import tokenize_text_data
    train, dev = tokenize_text_data(data, tokenizer, max_length=128)
    loader = make_loader(train, tokenizer, 32, shuffle=True)      # mixft.data.loaders

Output columns: the tokenizer's (``input_ids``, ``attention_mask``, and
``token_type_ids`` where the model uses them), ``labels`` (int64 class ids, or float32
for regression and, with ``float_labels=True``, for a one-logit binary head's 0./1.)
and ``lengths`` (tokens per example, for length-grouped batching).

File and hub data are memory-mapped Arrow in the `datasets` cache, and so is the
tokenised result: a second run with the same data, tokenizer and max_length loads it
from the cache instead of tokenising again. Its cache key (``_cache_fingerprint``) hashes
the fast tokenizer's own serialisation, not the tokenizer object: `datasets`' default
pickles every vocabulary entry as a Python object, 0.65 s per split for a BERT vocabulary
(measured 2026-11-28 on a 2-core AMD EPYC, AVX2 only), on every run. Data built in memory
(the generated sets) has nowhere to be cached, so it gets a fresh fingerprint instead.
"""

from __future__ import annotations

import functools
import hashlib
import uuid
from pathlib import Path

from mixft.data.files import datasets_bars_off
from mixft.data.labels import LabelInfo
from mixft.options import POSITIVE_INT

_MAP_BATCH = 1000  # rows per tokenizer call: large enough for the fast tokenizer's threads


def pair_boundary(tokenizer) -> str:
    """What mixft starts the second text of a pair with: ``""`` where ``tokenizer`` marks the boundary itself.

    Encoders' tokenizers mark it (``[CLS] a [SEP] b [SEP]``, or a second ``<s>``); GPT-2's and Qwen2's add no
    token to a pair, so ``("the film is", "good")`` became ``the film isgood``: the boundary gone and the last
    word of one text merged with the first of the other. There a line break starts the second text (the
    delimiter of decoder fine-tuning), or, for a vocabulary without one, the tokenizer's end-of-text token.

    Usage: ``pair_boundary(AutoTokenizer.from_pretrained("gpt2"))  # "\\n"``
    """
    if tokenizer.num_special_tokens_to_add(pair=True) != tokenizer.num_special_tokens_to_add(pair=False):
        return ""
    plain = tokenizer("a", "b")["input_ids"]
    for candidate in ("\n", tokenizer.sep_token, tokenizer.eos_token):  # the first a pair keeps
        if candidate and tokenizer("a", candidate + "b")["input_ids"] != plain:
            return candidate
    return ""


class _Encode:
    """The batched map function. A class (not a closure) so `datasets` hashes exactly its fields."""

    def __init__(
        self,
        tokenizer,
        text_columns: tuple[str, ...],
        label_column: str,
        labels: LabelInfo,
        max_length: int,
        float_labels: bool,
    ):
        self.tokenizer = tokenizer
        self.text_columns = text_columns
        self.label_column = label_column
        self.labels = labels
        self.max_length = max_length
        self.float_labels = float_labels

    def __call__(self, batch: dict) -> dict:
        import numpy as np

        texts = [batch[c] for c in self.text_columns]
        boundary = pair_boundary(self.tokenizer) if len(texts) == 2 else ""
        if boundary:
            texts[1] = [boundary + text for text in texts[1]]
        # Pairs are truncated longest-first: the longer text gives up tokens before the shorter (from its end,
        # so a boundary at the start of the second text stays).
        encoded = self.tokenizer(*texts, truncation=True, max_length=self.max_length)
        out = dict(encoded)
        out["lengths"] = np.fromiter((len(ids) for ids in encoded["input_ids"]), dtype=np.int32)
        dtype = np.float32 if _float_labels(self.labels, self.float_labels) else np.int64
        out["labels"] = np.asarray(self.labels.encode(batch[self.label_column]), dtype=dtype)
        return out


def _float_labels(labels: LabelInfo, float_labels: bool) -> bool:
    return labels.kind == "regression" or float_labels


def _features(tokenizer, text_columns: tuple[str, ...], labels: LabelInfo, float_labels: bool):
    """Narrow Arrow types (int32 ids, int8 masks): half the disk and memory of the int64 default."""
    import datasets

    probe = tokenizer(*(["a"] for _ in text_columns), truncation=True, max_length=8)
    narrow = {"attention_mask": "int8", "token_type_ids": "int8", "special_tokens_mask": "int8"}
    features = {name: datasets.Sequence(datasets.Value(narrow.get(name, "int32"))) for name in probe}
    features["lengths"] = datasets.Value("int32")
    features["labels"] = datasets.Value("float32" if _float_labels(labels, float_labels) else "int64")
    return datasets.Features(features)


def tokenize_dataset(
    ds,
    tokenizer,
    *,
    text_columns: tuple[str, ...],
    label_column: str,
    labels: LabelInfo,
    max_length: int,
    float_labels: bool = False,
):
    """One Arrow dataset -> its tokenised form (see module docstring for the columns).

    ``float_labels``: class ids as float32 (0./1. for a one-logit BCE head such as bert-sst2's).
    Usage: ``tok = tokenize_dataset(ds, tokenizer, text_columns=("text",), label_column="label",
    labels=info, max_length=128)``
    """
    import datasets

    # The lower bound of --max-length is RunConfig's rule; here only what the tokenizer needs.
    POSITIVE_INT.validate("max_length", max_length)
    encode = _Encode(tokenizer, tuple(text_columns), label_column, labels, max_length, float_labels)
    features = _features(tokenizer, tuple(text_columns), labels, float_labels)
    if len(ds) == 0:  # map() skips an empty dataset and keeps its columns: give it the tokenised ones
        return datasets.Dataset.from_dict({name: [] for name in features}, features=features)
    in_memory = not ds.cache_files
    with datasets_bars_off():
        return ds.map(
            encode,
            batched=True,
            batch_size=_MAP_BATCH,
            remove_columns=ds.column_names,
            features=features,
            new_fingerprint=f"mixft-tokenize-{uuid.uuid4().hex}"
            if in_memory
            else _cache_fingerprint(ds, encode, features),
        )


def _cache_fingerprint(ds, encode: _Encode, features) -> str | None:
    """The tokenised dataset's cache key: everything its rows depend on, hashed without pickling the tokenizer.

    The source rows (``ds``'s own fingerprint), the fast tokenizer's complete serialisation (vocabulary,
    normaliser, truncation, special tokens), its class, init arguments and returned inputs, the encoding's
    options and label ids, the output types, and this module's code. None for a tokenizer without that
    serialisation (a slow, pure-Python one): `datasets` then hashes the whole transform itself.
    """
    backend = getattr(encode.tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    tok, labels = encode.tokenizer, encode.labels
    parts = (
        ds._fingerprint,
        f"{type(tok).__module__}.{type(tok).__qualname__}",
        backend.to_str(),
        repr(sorted((str(k), repr(v)) for k, v in tok.init_kwargs.items())),
        repr(list(tok.model_input_names)),
        repr((encode.text_columns, encode.label_column, encode.max_length, encode.float_labels)),
        repr((labels.kind, labels.value_type, labels.names, sorted(labels.mapping.items(), key=repr))),
        repr(features),
        _this_code(),
    )
    digest = hashlib.sha256()
    for part in parts:
        digest.update(str(part).encode("utf-8") + b"\0")
    return digest.hexdigest()


@functools.cache
def _this_code() -> str:
    # A change to how rows are encoded must not find the old encoding in the cache.
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()


def tokenize_text_data(data, tokenizer, max_length: int = 128, *, float_labels: bool = False):
    """``(train, eval)`` tokenised from a :class:`mixft.data.user_data.TextData`.

    Usage: ``train, dev = tokenize_text_data(load_text_data(train_file="t.csv", validation_split=0.1), tok)``
    """
    task = data.task
    kwargs = dict(
        text_columns=task.text_columns,
        label_column=task.label_column,
        labels=task.labels,
        max_length=max_length,
        float_labels=float_labels,
    )
    return tokenize_dataset(data.train, tokenizer, **kwargs), tokenize_dataset(data.eval, tokenizer, **kwargs)
