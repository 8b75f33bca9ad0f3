"""mixft.data.user_data: files, GLUE dirs and hub datasets end to end, GLUE tasks, stand-ins, hold-out, caps."""

from __future__ import annotations

import collections
import os
import time

import pytest

import mixft.data.hubdata as hubdata
from mixft.data.glue import GLUE_TASKS, glue_task
from mixft.data.held_out import HeldOut, read_held_out, rows_digest, write_held_out
from mixft.data.labels import ModelLabels, label_key
from mixft.data.synthetic.stand_ins import SST2, stand_in_for
from mixft.data.user_data import load_glue_data, load_text_data
from mixft.errors import UsageError
from tests.data_files import write_csv

pytestmark = pytest.mark.usefixtures("isolated_hf")  # private caches, a hub that refuses connections


def _csv(path, rows, header=("text", "label")):
    return write_csv(path, header, rows)


@pytest.fixture
def topic_csv(tmp_path):
    rows = [(f"news item {i}", ("Sports", "World", "Business")[i % 3]) for i in range(30)]
    return _csv(tmp_path / "train.csv", rows)


@pytest.fixture
def unreachable(monkeypatch):
    monkeypatch.setattr(hubdata, "hub_reachable", lambda timeout=3.0: False)


# ------------------------------------------------------------------------------------ files


def test_train_and_validation_files(tmp_path, topic_csv):
    dev = _csv(tmp_path / "dev.csv", [("a match", "Sports"), ("an election", "World")])
    data = load_text_data(train_file=topic_csv, validation_file=dev)
    assert (data.source, data.name, data.notice) == ("files", str(topic_csv), None)
    assert data.description == f"{topic_csv} (30 train / 2 eval)"
    assert data.task.id2label == {0: "Business", 1: "Sports", 2: "World"}
    assert (data.task.kind, data.task.num_labels, data.task.is_pair, data.task.glue_task) == (
        "classification",
        3,
        False,
        None,
    )
    assert data.eval.to_list() == [{"text": "a match", "label": "Sports"}, {"text": "an election", "label": "World"}]


def test_user_data_is_not_capped_unless_asked(tmp_path):
    rows = [(f"row {i}", i % 2) for i in range(2500)]  # more than the demo budget of 2000
    train = _csv(tmp_path / "train.csv", rows)
    dev = _csv(tmp_path / "dev.csv", rows[:900])
    data = load_text_data(train_file=train, validation_file=dev)
    assert (len(data.train), len(data.eval)) == (2500, 900)
    capped = load_text_data(train_file=train, validation_file=dev, max_train_samples=10, max_eval_samples=4)
    assert capped.train["text"][:] == [f"row {i}" for i in range(10)]  # the first N rows
    assert capped.eval["text"][:] == [f"row {i}" for i in range(4)]


def test_validation_split_is_deterministic_and_disjoint(topic_csv):
    a = load_text_data(train_file=topic_csv, validation_split=0.2, seed=3)
    b = load_text_data(train_file=topic_csv, validation_split=0.2, seed=3)
    c = load_text_data(train_file=topic_csv, validation_split=0.2, seed=4)
    assert (len(a.train), len(a.eval)) == (24, 6)
    assert a.eval["text"][:] == b.eval["text"][:] and a.train["text"][:] == b.train["text"][:]
    assert a.eval["text"][:] != c.eval["text"][:]
    texts = set(a.train["text"][:]) | set(a.eval["text"][:])
    assert len(texts) == 30 and not set(a.train["text"][:]) & set(a.eval["text"][:])


def test_eval_only_evaluates_the_rows_the_training_run_held_out(topic_csv):
    # --eval-only --train-file F --validation-split 0.2 --seed 3: the same rows the training run held out,
    # read against the saved model's labels (here in another id order), and nothing to train on.
    trained = load_text_data(train_file=topic_csv, validation_split=0.2, seed=3)
    model = ModelLabels(names=("World", "Sports", "Business"), source="model-dir")
    evaluated = load_text_data(train_file=topic_csv, validation_split=0.2, seed=3, model_labels=model)
    assert evaluated.eval["text"][:] == trained.eval["text"][:] and len(evaluated.train) == 0
    assert evaluated.task.id2label == {0: "World", 1: "Sports", 2: "Business"}  # the model's label space
    assert evaluated.eval.to_list() == trained.eval.to_list()  # each row with its label, as the training run saw it
    other_seed = load_text_data(train_file=topic_csv, validation_split=0.2, seed=4, model_labels=model)
    assert other_seed.eval["text"][:] != trained.eval["text"][:]  # the seed picks the rows, as in training


def test_a_saved_models_record_says_which_rows_it_was_held_out_from_whatever_the_seed_now(topic_csv):
    # Was: --seeds 1,2 hold out the first seed's rows for both runs; --eval-only of the seed-2 model with
    # --seed 2 carved other rows, some of them trained on, and scored them without a word.
    trained = load_text_data(train_file=topic_csv, validation_split=0.2, seed=1)
    assert trained.held_out == HeldOut(0.2, 1, 30, rows_digest(trained.eval, ["text", "label"]))
    model = ModelLabels(names=("World", "Sports", "Business"), source="--model m", held_out=trained.held_out)
    evaluated = load_text_data(train_file=topic_csv, validation_split=0.2, seed=2, model_labels=model)
    assert evaluated.eval["text"][:] == trained.eval["text"][:]
    assert evaluated.notice == (
        "--eval-only: evaluating on the rows --model m was held out from in training "
        "(--validation-split 0.2 with seed 1), not those --seed 2 would hold out"
    )
    assert load_text_data(train_file=topic_csv, validation_split=0.2, seed=1, model_labels=model).notice is None
    with pytest.raises(UsageError) as info:
        load_text_data(train_file=topic_csv, validation_split=0.3, seed=1, model_labels=model)
    assert str(info.value) == (
        "--validation-split 0.3: --model m held out 0.2 of its training data; another fraction would "
        "evaluate on rows it trained on: pass --validation-split 0.2"
    )
    fewer = ModelLabels(model.names, "--model m", held_out=HeldOut(0.2, 1, 31))
    with pytest.raises(UsageError, match=r"30 rows, but --model m held out its evaluation rows from 31: the data"):
        load_text_data(train_file=topic_csv, validation_split=0.2, seed=1, model_labels=fewer)
    capped = load_text_data(train_file=topic_csv, validation_split=0.2, seed=1, max_train_samples=5, max_eval_samples=2)
    assert capped.held_out == trained.held_out  # carved from the whole file, its digest before the caps
    assert load_text_data(train_file=topic_csv, validation_file=topic_csv).held_out is None


def test_the_same_number_of_rows_reordered_is_refused_not_scored(tmp_path, topic_csv):
    # Was: a re-export or a sort keeps the row count; the same fraction and seed then picked other rows, most of
    # them trained on (9 of 10 in the case found), and --eval-only scored them.
    trained = load_text_data(train_file=topic_csv, validation_split=0.2, seed=1)
    lines = topic_csv.read_text(encoding="utf-8").splitlines()
    shuffled = tmp_path / "sorted.csv"  # the same rows, sorted
    shuffled.write_text("\n".join([lines[0], *sorted(lines[1:])]) + "\n", encoding="utf-8")
    model = ModelLabels(names=("World", "Sports", "Business"), source="--model m", held_out=trained.held_out)
    with pytest.raises(UsageError) as info:
        load_text_data(train_file=shuffled, validation_split=0.2, seed=1, model_labels=model)
    assert "holds out now are not those --model m was held out from (the data was edited or reordered" in str(
        info.value
    )
    again = load_text_data(train_file=topic_csv, validation_split=0.2, seed=1, model_labels=model)
    assert again.eval.to_list() == trained.eval.to_list()


def test_the_hold_out_record_round_trips_and_a_damaged_one_is_one_line(tmp_path):
    assert read_held_out(tmp_path) is None  # saved before the record, or trained on a validation file
    write_held_out(tmp_path, HeldOut(0.1, -3, 1000, "ab" * 32))
    assert read_held_out(tmp_path) == HeldOut(0.1, -3, 1000, "ab" * 32)
    for damage in (
        '{"format": 1, "fraction": 0.1}',
        "not json",
        '{"format": 2, "fraction": 0.1, "seed": 0, "rows": 9}',
    ):
        (tmp_path / "held-out.json").write_text(damage)
        with pytest.raises(UsageError) as info:
            read_held_out(tmp_path)
        assert str(info.value).startswith(f"{tmp_path / 'held-out.json'}: unreadable record of the rows")
        assert "\n" not in str(info.value)


def test_validation_file_missing_a_column(tmp_path, topic_csv):
    dev = _csv(tmp_path / "dev.csv", [("x", "y")], header=("body", "label"))
    with pytest.raises(UsageError) as info:
        load_text_data(train_file=topic_csv, validation_file=dev)
    assert (
        str(info.value)
        == f"--validation-file {dev}: no column 'text' (found in the training data); columns: 'body', 'label'"
    )


def test_validation_split_stratifies_by_class_not_by_spelling(tmp_path):
    # "1", "01" and "+1" are one class. Was: split as three groups, so the one "+1" row could never be held out,
    # and the 20 % of class 1 was taken per spelling.
    rows = [(f"zero {i}", "0") for i in range(10)] + [(f"one {i}", "1") for i in range(5)]
    rows += [(f"uno {i}", "01") for i in range(4)] + [("ein", "+1")]
    data = load_text_data(train_file=_csv(tmp_path / "spell.csv", rows), validation_split=0.2, seed=0)
    held = collections.Counter(label_key(v) for v in data.eval["label"])
    assert held == {0: 2, 1: 2}  # 20 % of 10 rows and of 10 rows
    assert len(data.train) + len(data.eval) == 20


def test_validation_label_unseen_in_training(tmp_path, topic_csv):
    dev = _csv(tmp_path / "dev.csv", [("a chip", "Sci/Tech")])
    with pytest.raises(UsageError, match=r"validation label 'Sci/Tech' never seen in training"):
        load_text_data(train_file=topic_csv, validation_file=dev)


def test_missing_text_and_non_text_columns(tmp_path):
    gap = _csv(tmp_path / "gap.csv", [("a", 0), ("", 1), ("c", 0)])  # an empty cell reads as missing
    with pytest.raises(UsageError, match=r"1 of 3 rows have no text \(empty or only whitespace\) in column 'text' "):
        load_text_data(train_file=gap, validation_split=0.5)
    # Was: accepted in these formats, trained on as `[CLS] [SEP]` (a pair's second text: nothing), no message.
    blanks = tmp_path / "blank.jsonl"
    blanks.write_text('{"text": "a", "label": 0}\n{"text": "", "label": 1}\n{"text": " \\t ", "label": 0}\n')
    with pytest.raises(UsageError, match=r"2 of 3 rows have no text .*\(first: data row 2\)"):
        load_text_data(train_file=blanks, validation_split=0.5)
    spaces = _csv(tmp_path / "spaces.csv", [("a", 0), ("b", 1), ("   ", 0)])
    with pytest.raises(UsageError, match=r"1 of 3 rows have no text .*\(first: data row 3\)"):
        load_text_data(train_file=spaces, validation_split=0.5)
    # A JSON number is a number, not text...
    numbers = tmp_path / "numbers.jsonl"
    numbers.write_text('{"text": 1, "label": 0}\n{"text": 2, "label": 1}\n', encoding="utf-8")
    with pytest.raises(UsageError, match=r"column 'text' holds int64 values, not text; .*columns: 'text', 'label'"):
        load_text_data(train_file=numbers, validation_split=0.5)
    # ...but every CSV cell is text as written: codes such as "007" are texts to classify.
    codes = _csv(tmp_path / "codes.csv", [("007", 0), ("12", 1), ("3", 0), ("44", 1)])
    data = load_text_data(train_file=codes, validation_split=0.5)
    assert sorted(data.train["text"][:] + data.eval["text"][:]) == ["007", "12", "3", "44"]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({}, "pass either --train-file (with --validation-file or --validation-split) or --dataset NAME"),
        ({"train_file": "t.csv", "dataset": "imdb"}, "pass either --train-file"),
        ({"validation_file": "d.csv", "dataset": "imdb"}, "--validation-file needs --train-file"),
        ({"train_file": "t.csv", "dataset_config": "sst2"}, "--dataset-config needs --dataset"),
        ({"train_file": "t.csv", "validation_split": 1.0}, "--validation-split must be a fraction between 0 and 1"),
        (
            {"train_file": "t.csv", "validation_file": "d.csv", "validation_split": 0.1},
            "pass --validation-file or --validation-split, not both",
        ),
        ({"train_file": "t.csv", "max_train_samples": 0}, "--max-train-samples must be a positive integer, got 0"),
        ({"train_file": "t.csv", "task_kind": "ranking"}, "unknown task kind 'ranking'"),
        (
            {"data_dir": "d", "train_file": "t.csv"},
            "--data-dir brings its own train.tsv and dev.tsv; drop --train-file",
        ),
        (
            {"data_dir": "d", "dataset": "imdb", "validation_split": 0.1},
            "--data-dir brings its own train.tsv and dev.tsv; drop --dataset, --validation-split",
        ),
    ],
)
def test_argument_errors_come_before_any_file_is_read(kwargs, message):
    # t.csv / d.csv do not exist: the argument check must fire first.
    with pytest.raises(UsageError) as info:
        load_text_data(**kwargs)
    assert str(info.value).startswith(message)


def test_no_validation_data_says_what_to_pass(topic_csv):
    with pytest.raises(UsageError) as info:
        load_text_data(train_file=topic_csv)
    assert str(info.value) == (
        f"--train-file {topic_csv}: no validation data; pass --validation-file, or "
        "--validation-split F (0 < F < 1) to hold out a fraction of the training data"
    )


def test_float_labels_make_a_regression_task(tmp_path):
    train = _csv(
        tmp_path / "scores.csv", [("a", 0.5), ("b", 3.0), ("c", 4.75), ("d", 1.0)], header=("sentence1", "score")
    )
    data = load_text_data(train_file=train, validation_split=0.5, text_column="sentence1", label_column="score")
    assert (data.task.kind, data.task.num_labels, data.task.label_names) == ("regression", 1, ())


# -------------------------------------------------------------------------------------- hub


def test_hub_dataset_neither_cached_nor_reachable(unreachable):
    start = time.monotonic()
    with pytest.raises(UsageError) as info:
        load_text_data(dataset="imdb")
    assert time.monotonic() - start < 10
    assert str(info.value) == (
        "--dataset imdb: not in the local datasets cache and the hub is unreachable; "
        "run once with hub access or pass --train-file/--validation-file"
    )
    assert os.environ["HF_HUB_OFFLINE"] == "1"  # gone offline: nothing retries for 50 s


def test_unavailable_glue_task_without_stand_in(unreachable):
    # Named without a flag the user may not have passed, with advice no GLUE recipe refuses.
    with pytest.raises(UsageError) as info:
        load_glue_data("stsb")
    assert str(info.value) == (
        "glue/stsb: not in the local datasets cache and the hub is unreachable; "
        "run once with hub access or train on your own copy of the task's files with "
        "--recipe text-classification --train-file/--validation-file"
    )


@pytest.mark.parametrize(
    "name, config, generated, columns, names, eval_split",
    [
        ("glue", "sst2", "mixft-generated-sentiment", ("sentence",), ("negative", "positive"), None),
        (
            "glue",
            "mrpc",
            "mixft-generated-paraphrase",
            ("sentence1", "sentence2"),
            ("not_equivalent", "equivalent"),
            None,
        ),
        # ag_news has train and test only, and so has its stand-in: --eval-split test works online and offline.
        ("ag_news", None, "mixft-generated-topics", ("text",), ("World", "Sports", "Business", "Sci/Tech"), "test"),
        (
            "fancyzhx/ag_news",
            None,
            "mixft-generated-topics",
            ("text",),
            ("World", "Sports", "Business", "Sci/Tech"),
            "test",
        ),
    ],
)
def test_stand_ins_when_the_hub_is_out_of_reach(unreachable, name, config, generated, columns, names, eval_split):
    stand_in = stand_in_for(name, config)
    data = load_text_data(dataset=name, dataset_config=config, seed=1, stand_in=stand_in, eval_split=eval_split)
    label = f"{name}/{config}" if config else name
    assert (data.source, data.name) == ("generated", generated)
    assert data.notice == (
        f"notice: {label} is not reachable or cached; using {generated}, mixft's generated "
        "stand-in in its schema (2000 train / 872 eval, seed 1)"
    )
    assert (len(data.train), len(data.eval)) == (2000, 872)  # the demo budget belongs to generated data
    assert data.task.text_columns == columns and data.task.label_names == names
    assert data.task.glue_task == config
    again = load_text_data(
        dataset=name,
        dataset_config=config,
        seed=1,
        max_train_samples=50,
        max_eval_samples=10,
        stand_in=stand_in,
        eval_split=eval_split,
    )
    assert (len(again.train), len(again.eval)) == (50, 10)  # a cap sizes the generated set itself


def test_no_stand_in_unless_the_caller_passes_one(unreachable):
    # The user-data path never picks a generated set itself: that is the recipe's decision.
    with pytest.raises(UsageError, match=r"^glue/sst2: not in the local datasets cache"):
        load_glue_data("sst2")
    assert stand_in_for("imdb") is None and stand_in_for(None) is None


def test_a_stand_in_refuses_more_rows_than_it_offers_before_making_any(unreachable):
    with pytest.raises(UsageError) as info:
        load_glue_data("sst2", stand_in=SST2, max_train_samples=10**7)
    assert str(info.value) == (
        "--max-train-samples 10000000: mixft's generated sentiment set offers at most 1000000 "
        "training sentences (glue/sst2 is not reachable or cached here); pass "
        "--train-file/--validation-file for more data"
    )


def test_user_data_path_imports_no_generator():
    import subprocess
    import sys

    code = (
        "import sys, mixft.data, mixft.data.user_data, mixft.data.glue_dir, mixft.data.files, mixft.data.hubdata; "
        "print(sorted(m for m in sys.modules if m.startswith('mixft.data.synthetic')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_data_dir_reads_the_glue_layout_into_arrow(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    d = tmp_path / "SST-2"
    d.mkdir()
    (d / "train.tsv").write_text("sentence\tlabel\nit 's great\t1\nit 's awful\t0\n", encoding="utf-8")
    (d / "dev.tsv").write_text("sentence\tlabel\nsolid\t1\n", encoding="utf-8")
    data = load_text_data(data_dir=d)
    assert (data.source, data.name, data.notice) == ("data-dir", str(d), None)
    assert data.train.to_list() == [{"sentence": "it 's great", "label": 1}, {"sentence": "it 's awful", "label": 0}]
    assert data.eval.to_list() == [{"sentence": "solid", "label": 1}]
    assert (data.task.text_columns, data.task.label_names) == (("sentence",), ("negative", "positive"))
    assert data.description == f"{d} (2 train / 1 eval)"
    assert "HF_HUB_OFFLINE" not in os.environ  # no probing, no offline switch


def test_glue_sst2_stand_in_is_todays_generated_set(unreachable):
    from mixft.data.synthetic.sentiment import generated_splits

    data = load_glue_data("sst2", max_train_samples=40, max_eval_samples=10, seed=2, stand_in=SST2)
    train, dev = generated_splits(40, 10, seed=2)
    assert data.train.to_list() == [{**r, "idx": i} for i, r in enumerate(train)]
    assert data.eval["sentence"][:] == [r["sentence"] for r in dev]
    assert data.task.glue_task == "sst2"


def test_hub_dataset_from_the_cache_uses_its_validation_split(monkeypatch):
    import datasets

    calls = []

    def fake_load(name, config=None, **kwargs):
        calls.append((name, config, datasets.config.HF_HUB_OFFLINE))
        row = {"premise": ["p1", "p2", "p3"], "hypothesis": ["h1", "h2", "h3"], "label": [0, 1, 2]}
        features = datasets.Features(
            {
                "premise": datasets.Value("string"),
                "hypothesis": datasets.Value("string"),
                "label": datasets.ClassLabel(names=["entailment", "neutral", "contradiction"]),
            }
        )
        split = datasets.Dataset.from_dict(row, features=features)
        return datasets.DatasetDict(
            train=split, validation_matched=split.select([0, 2]), validation_mismatched=split.select([1]), test=split
        )

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    data = load_glue_data("mnli")
    assert calls == [("nyu-mll/glue", "mnli", True)]  # the canonical repo, loaded offline from the cache
    assert (data.source, data.name, data.description) == ("cache", "glue/mnli", "glue/mnli (3 train / 2 eval)")
    assert data.task.text_columns == ("premise", "hypothesis")
    assert data.task.id2label == {0: "entailment", 1: "neutral", 2: "contradiction"}


def test_hub_dataset_without_validation_split(monkeypatch):
    import datasets

    def fake_load(name, config=None, **kwargs):
        split = datasets.Dataset.from_dict({"text": ["a", "b", "c", "d"], "label": [0, 1, 0, 1]})
        return datasets.DatasetDict(train=split, test=split.select([0, 1]))

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    with pytest.raises(UsageError) as info:
        load_text_data(dataset="imdb")
    # --validation-file goes with --train-file only: not offered for a hub dataset.
    assert str(info.value) == (
        "--dataset imdb (train split): no validation data; its splits are train, test: pass "
        "--eval-split NAME, or --validation-split F (0 < F < 1) to hold out a fraction of the "
        "training data"
    )
    assert len(load_text_data(dataset="imdb", eval_split="test").eval) == 2
    assert len(load_text_data(dataset="imdb", validation_split=0.5).eval) == 2
    with pytest.raises(UsageError, match=r"no split 'dev' \(--eval-split\); splits: train, test"):
        load_text_data(dataset="imdb", eval_split="dev")


# ------------------------------------------------------------------------------------- GLUE


def test_glue_table():
    assert list(GLUE_TASKS) == ["cola", "sst2", "mrpc", "qqp", "stsb", "mnli", "qnli", "rte", "wnli"]
    assert glue_task("MNLI").validation_split == "validation_matched"
    assert glue_task("sst-2").name == "sst2"
    assert (glue_task("stsb").kind, glue_task("stsb").num_labels) == ("regression", 1)
    assert glue_task("qnli").text_columns == ("question", "sentence")
    assert glue_task("cola").metrics == ("matthews_correlation",)


def test_unknown_glue_task():
    with pytest.raises(UsageError) as info:
        load_glue_data("squad")
    assert (
        str(info.value) == "unknown GLUE task 'squad'; GLUE tasks: cola, sst2, mrpc, qqp, stsb, mnli, qnli, rte, wnli"
    )


def test_pair_column_on_single_text_glue_task(unreachable):
    with pytest.raises(UsageError, match=r"GLUE sst2 is single-text data \(column 'sentence'\)"):
        load_text_data(dataset="glue", dataset_config="sst2", text_column="sentence", text_pair_column="idx")


# ------------------------------------------------------------------- issue 19: read as written


def test_a_negative_seed_holds_out_its_own_rows(topic_csv):
    # Was: ValueError from numpy ("expected non-negative integer"); the CLI allows seeds down to -2**63.
    a = load_text_data(train_file=topic_csv, validation_split=0.2, seed=-1)
    b = load_text_data(train_file=topic_csv, validation_split=0.2, seed=-1)
    assert a.eval["text"][:] == b.eval["text"][:] and len(a.eval) == 6
    low = load_text_data(train_file=topic_csv, validation_split=0.2, seed=-(2**63))
    assert len(low.eval) == 6


def test_a_label_error_the_cap_caused_names_the_cap(tmp_path):
    rows = [(f"r{i}", "a" if i < 10 else "b") for i in range(20)]
    train = _csv(tmp_path / "t.csv", rows)
    with pytest.raises(UsageError) as info:
        load_text_data(train_file=train, validation_split=0.2, max_train_samples=5)
    assert str(info.value).endswith(
        "classification needs at least two (after --max-train-samples 5 kept the first "
        "5 training rows; raise it, or shuffle the file)"
    )
    three = _csv(tmp_path / "three.csv", [(f"r{i}", "a" if i < 10 else "b" if i < 15 else "c") for i in range(20)])
    dev = _csv(tmp_path / "d.csv", [("x", "c")])
    with pytest.raises(UsageError, match=r"validation label 'c' never seen in training .*--max-train-samples 12"):
        load_text_data(train_file=three, validation_file=dev, max_train_samples=12)
    # ...and one it did not cause does not blame it.
    other = _csv(tmp_path / "o.csv", [("x", "z")])
    with pytest.raises(UsageError) as info:
        load_text_data(train_file=three, validation_file=other, max_train_samples=12)
    assert "never seen in training" in str(info.value) and "--max-train-samples" not in str(info.value)


def test_the_same_file_for_training_and_validation_gets_a_warning(topic_csv, tmp_path):
    data = load_text_data(train_file=topic_csv, validation_file=tmp_path / "." / topic_csv.name)
    assert data.notice.startswith(f"warning: --validation-file {tmp_path / '.' / topic_csv.name} is the --train-file")
    assert load_text_data(train_file=topic_csv, validation_split=0.2).notice is None


def test_evaluation_rows_that_repeat_training_rows_are_counted_in_a_warning(tmp_path):
    """Was: a file with each text three times, split by --validation-split, scored 0.93 on random labels (0.60
    deduplicated) with nothing said; two files sharing rows were silent too (only the same path was warned of)."""
    rows = [(f"review number {i} of the film", ("pos", "neg")[i % 2]) for i in range(20)]
    repeated = _csv(tmp_path / "dup.csv", rows * 3)
    data = load_text_data(train_file=repeated, validation_split=0.25, seed=0)
    count = sum((t,) in {(x,) for x in data.train["text"]} for t in data.eval["text"])
    assert count > 0 and f"warning: {count} of {len(data.eval)} evaluation rows have the text of a training row" in (
        data.notice or ""
    )
    train = _csv(tmp_path / "train.csv", rows)
    shared = _csv(tmp_path / "dev.csv", [(" review  number 3 of the film", "neg"), ("an unseen text", "pos")])
    data = load_text_data(train_file=train, validation_file=shared)
    assert "1 of 2 evaluation rows have the text of a training row" in data.notice  # whitespace runs aside
    disjoint = _csv(tmp_path / "other.csv", [("an unseen text", "pos"), ("another one", "neg")])
    assert load_text_data(train_file=train, validation_file=disjoint).notice is None
