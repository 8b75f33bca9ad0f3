"""bert-sst2's data (recipes.bert_sst2.load_sst2): --data-dir, GLUE SST-2 from hub or cache, else the
generated set, all through the one Arrow path. No test touches the network."""

from __future__ import annotations

import http.server
import os
import threading
import time

import pytest
from huggingface_hub import constants

from mixft.errors import UsageError
from recipes.bert_sst2 import load_sst2

# Every test here starts from an isolated, online-looking Hugging Face state (conftest).
pytestmark = pytest.mark.usefixtures("isolated_hf")


class _OK(http.server.BaseHTTPRequestHandler):
    def do_HEAD(self):  # noqa: N802
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def live_hub(monkeypatch):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _OK)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    yield server
    server.shutdown()
    server.server_close()


def _fake_glue():
    from datasets import Dataset, DatasetDict

    return DatasetDict(
        train=Dataset.from_dict({"sentence": ["a gem .", "a mess ."], "label": [1, 0], "idx": [0, 1]}),
        validation=Dataset.from_dict({"sentence": ["fine ."], "label": [1], "idx": [0]}),
        test=Dataset.from_dict({"sentence": ["unknown ."], "label": [-1], "idx": [0]}),
    )


# ---------------------------------------------------------------------------------------
# data_dir
# ---------------------------------------------------------------------------------------


def test_data_dir(tmp_path, monkeypatch):
    data_dir = tmp_path / "SST-2"
    data_dir.mkdir()
    (data_dir / "train.tsv").write_text("sentence\tlabel\nit 's great\t1\nit 's awful\t0\n", encoding="utf-8")
    (data_dir / "dev.tsv").write_text("sentence\tlabel\nsolid\t1\n", encoding="utf-8")

    def no_glue(*args, **kwargs):
        raise AssertionError("data_dir must not touch datasets")

    import datasets

    monkeypatch.setattr(datasets, "load_dataset", no_glue)
    data = load_sst2(data_dir)
    assert data.train.to_list() == [{"sentence": "it 's great", "label": 1}, {"sentence": "it 's awful", "label": 0}]
    assert data.eval.to_list() == [{"sentence": "solid", "label": 1}]
    assert (data.name, data.source, data.notice) == (str(data_dir), "data-dir", None)
    assert data.description == f"{data_dir} (2 train / 1 eval)"  # results.json's dataset
    assert "HF_HUB_OFFLINE" not in os.environ  # no probing, no offline switch


def test_data_dir_problem_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError):
        load_sst2(tmp_path / "missing")


# ---------------------------------------------------------------------------------------
# Offline fallback to the generated set (real datasets.load_dataset, nothing cached)
# ---------------------------------------------------------------------------------------


def test_offline_env_falls_back_to_generated_fast(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.monotonic()
    data = load_sst2(seed=3, max_train_samples=50, max_eval_samples=20)
    assert time.monotonic() - start < 10
    from mixft.data.synthetic.sentiment import DATASET_NAME

    assert (data.source, data.name) == ("generated", DATASET_NAME)
    assert (len(data.train), len(data.eval)) == (50, 20)
    assert data.notice == (
        "notice: GLUE SST-2 is not reachable or cached; using mixft's generated sentiment set "
        "(50 train / 20 eval, seed 3)"
    )
    rows = data.train.to_list() + data.eval.to_list()
    assert all(set(row) == {"sentence", "label", "idx"} and row["label"] in (0, 1) for row in rows)


@pytest.mark.parametrize("endpoint", [None, "https://mixft-no-such-host.invalid", "http://10.255.255.1:9"])
def test_unreachable_hub_goes_offline_and_falls_back_fast(monkeypatch, endpoint):
    import datasets.config

    if endpoint:
        monkeypatch.setattr(constants, "ENDPOINT", endpoint)
        monkeypatch.setattr(datasets.config, "HF_ENDPOINT", endpoint)
    start = time.monotonic()
    data = load_sst2(hub_timeout=1.0)
    elapsed = time.monotonic() - start
    assert elapsed < 6, f"took {elapsed:.1f}s"
    assert data.source == "generated"
    assert (len(data.train), len(data.eval)) == (2000, 872)  # bert-sst2's demo budget, generated data only
    assert data.notice.endswith("(2000 train / 872 eval, seed 0)")
    assert datasets.config.HF_HUB_OFFLINE is True and os.environ["HF_HUB_OFFLINE"] == "1"


def test_generated_is_deterministic(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    a = load_sst2(seed=7, max_train_samples=30, max_eval_samples=10)
    b = load_sst2(seed=7, max_train_samples=30, max_eval_samples=10)
    assert a.train.to_list() == b.train.to_list() and a.eval.to_list() == b.eval.to_list()
    assert a.description == b.description == "mixft-generated-sentiment (30 train / 10 eval)"


# ---------------------------------------------------------------------------------------
# GLUE SST-2 branches (datasets.load_dataset monkeypatched)
# ---------------------------------------------------------------------------------------


def test_hub_branch(monkeypatch, live_hub):
    import datasets

    calls = []

    def fake_load_dataset(*args, **kwargs):
        calls.append((args, kwargs))
        return _fake_glue()

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    data = load_sst2()
    assert calls == [(("nyu-mll/glue", "sst2"), {})]
    assert data.train["sentence"][:] == ["a gem .", "a mess ."] and data.train["label"][:] == [1, 0]
    # validation, never the unlabelled test split
    assert data.eval["sentence"][:] == ["fine ."] and data.eval["label"][:] == [1]
    assert (data.name, data.source, data.notice) == ("glue/sst2", "hub", None)
    assert "HF_HUB_OFFLINE" not in os.environ and constants.HF_HUB_OFFLINE is False


def test_cache_branch_loads_with_offline_mode_on(monkeypatch):
    import datasets
    import datasets.config

    seen = {}

    def fake_load_dataset(*args, **kwargs):
        seen["offline"] = (datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE, os.environ.get("HF_HUB_OFFLINE"))
        return datasets.DatasetDict(
            train=datasets.Dataset.from_dict({"sentence": ["x", "y"], "label": [0, 1]}),
            validation=datasets.Dataset.from_dict({"sentence": ["z"], "label": [1]}),
        )

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    data = load_sst2(hub_timeout=1.0)
    assert seen["offline"] == (True, True, "1")
    assert (data.source, data.name, data.notice) == ("cache", "glue/sst2", None)
    assert data.train.to_list() == [{"sentence": "x", "label": 0}, {"sentence": "y", "label": 1}]
    assert data.eval.to_list() == [{"sentence": "z", "label": 1}]


@pytest.mark.parametrize(
    "failure", [ConnectionError("Couldn't reach 'nyu-mll/glue' on the Hub"), FileNotFoundError("not cached")]
)
def test_glue_failure_falls_back_to_generated(monkeypatch, live_hub, failure):
    import datasets

    def broken(*args, **kwargs):
        raise failure

    monkeypatch.setattr(datasets, "load_dataset", broken)
    data = load_sst2(max_train_samples=10, max_eval_samples=5)
    assert data.source == "generated" and data.notice.startswith("notice: GLUE SST-2 is not reachable or cached")


def test_glue_without_a_validation_split_is_one_line(monkeypatch, live_hub):
    # A GLUE SST-2 that loads but has no validation split is broken data, said in one line
    # (the list-based path used to fall back to the generated set instead).
    import datasets

    def no_validation(*args, **kwargs):
        return datasets.DatasetDict(train=datasets.Dataset.from_dict({"sentence": ["x", "y"], "label": [1, 0]}))

    monkeypatch.setattr(datasets, "load_dataset", no_validation)
    # Named without a flag: bert-sst2 has no --dataset (or --eval-split) to point at.
    with pytest.raises(UsageError, match=r"^glue/sst2: no split 'validation'; splits: train$"):
        load_sst2()


def test_more_generated_data_than_it_offers_names_data_dir(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UsageError) as info:
        load_sst2(max_train_samples=10**7)
    assert str(info.value) == (
        "--max-train-samples 10000000: mixft's generated sentiment set offers at most 1000000 "
        "training sentences (GLUE SST-2 is not reachable or cached here); pass --data-dir "
        "for more data"
    )
