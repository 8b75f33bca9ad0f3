"""mixft.data.tokenize + loaders.make_loader / run_loaders: Arrow in, Arrow out, cached by datasets, length-grouped batches."""

from __future__ import annotations

import json

import pytest
import torch

from mixft.data import tokenize as tokenize_module
from mixft.data.loaders import make_loader
from mixft.data.synthetic.stand_ins import MRPC
from mixft.data.tokenize import tokenize_text_data
from mixft.data.user_data import load_text_data
from mixft.errors import UsageError
from tests.data_files import write_csv

pytestmark = pytest.mark.usefixtures("isolated_hf")


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from mixft.models.hub import shipped_model_dir

    return AutoTokenizer.from_pretrained(shipped_model_dir())


@pytest.fixture
def topic_files(tmp_path):
    names = ("Sports", "World", "Business")
    rows = [(("a goal " * (1 + i % 7)).strip(), names[i % 3]) for i in range(40)]
    rows[5] = ("word " * 500, "World")  # far past max_length: truncated, not an error
    paths = []
    for name, part in (("train.csv", rows), ("dev.csv", rows[:9])):
        paths.append(write_csv(tmp_path / name, ["text", "label"], part))
    return paths


def test_tokenised_columns_labels_and_truncation(topic_files, tokenizer):
    data = load_text_data(train_file=topic_files[0], validation_file=topic_files[1])
    train, dev = tokenize_text_data(data, tokenizer, max_length=16)
    assert train.column_names == ["input_ids", "token_type_ids", "attention_mask", "lengths", "labels"]
    assert train.features["labels"].dtype == "int64"
    rows = train.to_list()
    texts, labels = data.train["text"][:], data.train["label"][:]
    for row, text, label in zip(rows, texts, labels):
        assert row["input_ids"] == tokenizer(text, truncation=True, max_length=16)["input_ids"]
        assert row["labels"] == data.task.label2id[label]
        assert row["lengths"] == len(row["input_ids"]) == sum(row["attention_mask"]) <= 16
    assert rows[5]["lengths"] == 16
    assert dev["labels"][:] == [data.task.label2id[v] for v in data.eval["label"][:]]


def test_pairs_and_regression(tmp_path, tokenizer):
    path = tmp_path / "pairs.jsonl"
    rows = [{"sentence1": f"first {i}", "sentence2": f"second text {i}", "score": i / 4} for i in range(12)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    data = load_text_data(train_file=path, validation_split=0.25, label_column="score")
    assert (data.task.kind, data.task.text_columns) == ("regression", ("sentence1", "sentence2"))
    train, _ = tokenize_text_data(data, tokenizer, max_length=32)
    assert train.features["labels"].dtype == "float32"
    first = train[0]
    expected = tokenizer(data.train["sentence1"][0], data.train["sentence2"][0])
    assert first["input_ids"] == expected["input_ids"]
    assert first["token_type_ids"] == expected["token_type_ids"] and 1 in first["token_type_ids"]
    assert first["labels"] == pytest.approx(data.train["score"][0])


def test_make_loader_over_an_arrow_dataset(topic_files, tokenizer, monkeypatch):
    import datasets

    data = load_text_data(train_file=topic_files[0], validation_file=topic_files[1])
    train, _ = tokenize_text_data(data, tokenizer, max_length=16)
    calls = []
    original = datasets.Dataset.__getitems__

    def counting(self, keys):
        calls.append(len(keys))
        return original(self, keys)

    monkeypatch.setattr(datasets.Dataset, "__getitems__", counting)
    loader = make_loader(train, tokenizer, batch_size=8, shuffle=True, seed=1)
    batches = list(loader)
    assert calls == [len(b["labels"]) for b in batches]  # one Arrow read per batch
    assert sorted(torch.cat([b["labels"] for b in batches]).tolist()) == sorted(train["labels"][:])
    for batch in batches:
        assert set(batch) == {"input_ids", "token_type_ids", "attention_mask", "labels"}  # no `lengths`
        assert batch["labels"].dtype == torch.int64
        assert batch["input_ids"].shape[1] == int(batch["attention_mask"].sum(1).max())  # padded to its longest
    again = [b["labels"].tolist() for b in make_loader(train, tokenizer, batch_size=8, shuffle=True, seed=1)]
    assert again == [b["labels"].tolist() for b in batches]  # the order is a function of the seed


def test_make_loader_still_takes_a_list_of_dicts(tokenizer):
    examples = [
        {**tokenizer(text, truncation=True, max_length=16), "labels": float(label)}
        for text, label in (("fine", 1), ("not fine at all", 0))
    ]
    batch = next(iter(make_loader(examples, tokenizer, batch_size=2, shuffle=False)))
    assert batch["labels"].tolist() == [0.0, 1.0]  # longest first in evaluation order


def test_run_loaders_train_seeded_on_the_ladder_and_evaluate_in_double_batches_of_their_own_shapes(tokenizer):
    from mixft.data.loaders import run_loaders
    from mixft.data.shape_ladder import ShapeLadder, ladder_up

    # 3 to 21 tokens: most of these lengths are not on the ladder (9 -> 10, 17 -> 20).
    examples = [{**tokenizer(" ".join(["word"] * n)), "labels": float(n % 2)} for n in range(1, 20)]
    cpu = torch.device("cpu")
    train_loader, eval_loader = run_loaders(examples, examples, tokenizer, 3, device=cpu, seed=1, shapes=ShapeLadder())
    batches = list(train_loader)
    # Training: the seed's order, every example once, each batch padded to its longest up the ladder.
    again, _ = run_loaders(examples, examples, tokenizer, 3, device=cpu, seed=1, shapes=ShapeLadder())
    assert [b["labels"].tolist() for b in again] == [b["labels"].tolist() for b in batches]
    assert sorted(torch.cat([b["labels"] for b in batches]).tolist()) == sorted(e["labels"] for e in examples)
    assert [b["input_ids"].shape[1] for b in batches] == [
        ladder_up(int(b["attention_mask"].sum(1).max())) for b in batches
    ]
    # Evaluation: twice the batch, longest first, each batch padded to its own longest (no ladder).
    eval_batches = list(eval_loader)
    assert [len(b["labels"]) for b in eval_batches] == [6, 6, 6, 1]
    widths = [b["input_ids"].shape[1] for b in eval_batches]
    assert widths == sorted(widths, reverse=True)
    assert widths == [int(b["attention_mask"].sum(1).max()) for b in eval_batches]
    assert not train_loader.pin_memory and not eval_loader.pin_memory  # pinned on CUDA only


def test_float_labels_for_a_one_logit_head(tmp_path, tokenizer):
    d = tmp_path / "sst2"
    d.mkdir()
    for name in ("train.tsv", "dev.tsv"):
        (d / name).write_text("sentence\tlabel\nfine\t1\nnot fine at all\t0\n", encoding="utf-8")
    data = load_text_data(data_dir=d)
    train, _ = tokenize_text_data(data, tokenizer, max_length=16, float_labels=True)
    assert train.features["labels"].dtype == "float32" and train["labels"][:] == [1.0, 0.0]
    batch = next(iter(make_loader(train, tokenizer, batch_size=2, shuffle=False)))
    assert batch["labels"].dtype == torch.float32 and "lengths" not in batch


@pytest.mark.parametrize("bad", [0, 1.5, True, None])
def test_max_length_must_be_a_positive_integer(topic_files, tokenizer, bad):
    data = load_text_data(train_file=topic_files[0], validation_file=topic_files[1])
    with pytest.raises(UsageError, match="max_length must be a positive integer"):
        tokenize_text_data(data, tokenizer, max_length=bad)


def test_second_tokenisation_of_a_file_hits_the_datasets_cache(topic_files, tokenizer, monkeypatch):
    data = load_text_data(train_file=topic_files[0], validation_file=topic_files[1])
    first, _ = tokenize_text_data(data, tokenizer, max_length=16)

    def fail(self, batch):
        raise AssertionError("tokenised again instead of loading the cached result")

    # A fresh load of the same file, as a second run would do; the tokenizer is never called.
    monkeypatch.setattr(tokenize_module._Encode, "__call__", fail)
    again = load_text_data(train_file=topic_files[0], validation_file=topic_files[1])
    second, _ = tokenize_text_data(again, tokenizer, max_length=16)
    assert second.cache_files == first.cache_files
    assert second.to_list() == first.to_list()
    # Another max_length is another cache entry: it must tokenise (and so call the patched function).
    with pytest.raises(AssertionError, match="tokenised again"):
        tokenize_text_data(again, tokenizer, max_length=12)


def test_in_memory_stand_in_tokenises(monkeypatch, tokenizer):
    import mixft.data.hubdata as hubdata

    monkeypatch.setattr(hubdata, "hub_reachable", lambda timeout=3.0: False)
    data = load_text_data(
        dataset="glue", dataset_config="mrpc", max_train_samples=20, max_eval_samples=6, stand_in=MRPC
    )
    train, dev = tokenize_text_data(data, tokenizer, max_length=64)
    assert (len(train), len(dev)) == (20, 6)
    assert not train.cache_files  # in memory: nothing to cache, nothing hashed
    assert train["labels"][:] == data.train["label"][:]


def test_the_cache_key_changes_with_everything_the_rows_depend_on(topic_files, tokenizer):
    from mixft.data.labels import LabelInfo

    data = load_text_data(train_file=topic_files[0], validation_file=topic_files[1])
    task = data.task

    def key(tok=tokenizer, labels=task.labels, max_length=16, float_labels=False, ds=data.train):
        encode = tokenize_module._Encode(tok, task.text_columns, task.label_column, labels, max_length, float_labels)
        return tokenize_module._cache_fingerprint(
            ds, encode, tokenize_module._features(tok, task.text_columns, labels, float_labels)
        )

    same = key()
    assert same == key() and len(same) == 64  # deterministic: a second run finds its cache
    cased = type(tokenizer).from_pretrained(tokenizer.name_or_path, do_lower_case=False)  # another normaliser
    swapped = LabelInfo(task.labels.kind, task.labels.value_type, task.labels.names[::-1],
                        {k: len(task.labels.names) - 1 - v for k, v in task.labels.mapping.items()})  # fmt: skip
    others = [key(max_length=12), key(float_labels=True), key(tok=cased), key(labels=swapped), key(ds=data.eval)]
    assert len({same, *others}) == 1 + len(others)


class _WithoutSerialisation:
    """A tokenizer with no ``backend_tokenizer`` to serialise (as a pure-Python one has none)."""

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer

    def __call__(self, *texts, **kwargs):
        return self._tokenizer(*texts, **kwargs)


def test_a_tokenizer_without_a_serialisation_leaves_the_cache_key_to_datasets(topic_files, tokenizer):
    data = load_text_data(train_file=topic_files[0], validation_file=topic_files[1])
    plain = _WithoutSerialisation(tokenizer)
    task = data.task
    encode = tokenize_module._Encode(plain, task.text_columns, task.label_column, task.labels, 16, False)
    assert tokenize_module._cache_fingerprint(data.train, encode, None) is None  # datasets hashes the transform
    train, _ = tokenize_text_data(data, plain, max_length=16)
    assert train["input_ids"][:] == [
        tokenizer(t, truncation=True, max_length=16)["input_ids"] for t in data.train["text"]
    ]


@pytest.mark.parametrize("arch", ["gpt2", "qwen2", "llama", "bert", "roberta"])
def test_a_pair_keeps_a_boundary_between_its_texts_whatever_the_tokenizer(arch):
    # Was: GPT-2's and Qwen2's tokenizers add nothing to a pair: ("the film is", "good") was "the film isgood",
    # the same ids as another split of the words into two texts, or as one text.
    import datasets

    from mixft.data.labels import analyze_labels
    from mixft.data.tokenize import pair_boundary, tokenize_dataset
    from tests.tiny_models import make_tokenizer

    tok = make_tokenizer(arch)
    ds = datasets.Dataset.from_dict(
        {"a": ["the film is", "the film", "the film is good"], "b": ["good", "is good", ""], "label": [0, 1, 0]}
    )
    ids = tokenize_dataset(
        ds,
        tok,
        text_columns=("a", "b"),
        label_column="label",
        labels=analyze_labels(ds, "label", where="t"),
        max_length=32,
    )["input_ids"]
    assert ids[0] != ids[1] and ids[0] != ids[2][: len(ids[0])]  # the split shows
    boundary = pair_boundary(tok)
    if arch in ("gpt2", "qwen2", "llama"):  # the tiny Llama's tokenizer adds no <s> at all
        assert boundary == ("</s>" if arch == "llama" else "\n")  # its vocabulary has no line break
        assert ids[0] == tok("the film is", boundary + "good")["input_ids"]
    else:
        assert boundary == ""
        assert ids[0] == tok("the film is", "good")["input_ids"]  # encoders' own pair template, unchanged
