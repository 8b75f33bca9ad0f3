"""mixft.data.sources: offline-first SST-2 resolution. No test touches the network."""

from __future__ import annotations

import http.server
import os
import threading
import time

import pytest
from huggingface_hub import constants

from mixft.data.sources import SentimentData, load_sentiment_data
from mixft.errors import UsageError

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
    data = load_sentiment_data(data_dir)
    assert data == SentimentData(
        train=[{"sentence": "it 's great", "label": 1}, {"sentence": "it 's awful", "label": 0}],
        eval=[{"sentence": "solid", "label": 1}],
        name=str(data_dir),
        source="data-dir",
        notice=None,
    )
    assert "HF_HUB_OFFLINE" not in os.environ  # no probing, no offline switch


def test_data_dir_problem_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError):
        load_sentiment_data(tmp_path / "missing")


# ---------------------------------------------------------------------------------------
# Offline fallback to the generated set (real datasets.load_dataset, nothing cached)
# ---------------------------------------------------------------------------------------


def test_offline_env_falls_back_to_generated_fast(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.monotonic()
    data = load_sentiment_data(seed=3, generated_train_size=50, generated_eval_size=20)
    assert time.monotonic() - start < 10
    from mixft.data.generated import DATASET_NAME

    assert (data.source, data.name) == ("generated", DATASET_NAME)
    assert (len(data.train), len(data.eval)) == (50, 20)
    assert data.notice == (
        "notice: GLUE SST-2 is not reachable or cached; using mixft's generated sentiment set "
        "(50 train / 20 eval, seed 3)"
    )
    assert all(set(row) == {"sentence", "label"} and row["label"] in (0, 1) for row in data.train + data.eval)


@pytest.mark.parametrize("endpoint", [None, "https://mixft-no-such-host.invalid", "http://10.255.255.1:9"])
def test_unreachable_hub_goes_offline_and_falls_back_fast(monkeypatch, endpoint):
    import datasets.config

    if endpoint:
        monkeypatch.setattr(constants, "ENDPOINT", endpoint)
        monkeypatch.setattr(datasets.config, "HF_ENDPOINT", endpoint)
    start = time.monotonic()
    data = load_sentiment_data(hub_timeout=1.0)
    elapsed = time.monotonic() - start
    assert elapsed < 6, f"took {elapsed:.1f}s"
    assert data.source == "generated"
    assert (len(data.train), len(data.eval)) == (4000, 872)
    assert data.notice.endswith("(4000 train / 872 eval, seed 0)")
    assert datasets.config.HF_HUB_OFFLINE is True and os.environ["HF_HUB_OFFLINE"] == "1"


def test_generated_is_deterministic(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    a = load_sentiment_data(seed=7, generated_train_size=30, generated_eval_size=10)
    b = load_sentiment_data(seed=7, generated_train_size=30, generated_eval_size=10)
    assert a == b


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
    data = load_sentiment_data()
    assert calls == [(("nyu-mll/glue", "sst2"), {})]
    assert data == SentimentData(
        train=[{"sentence": "a gem .", "label": 1}, {"sentence": "a mess .", "label": 0}],
        eval=[{"sentence": "fine .", "label": 1}],  # validation, never the unlabelled test split
        name="glue/sst2",
        source="hub",
        notice=None,
    )
    assert "HF_HUB_OFFLINE" not in os.environ and constants.HF_HUB_OFFLINE is False


def test_cache_branch_loads_with_offline_mode_on(monkeypatch):
    import datasets
    import datasets.config

    seen = {}

    def fake_load_dataset(*args, **kwargs):
        seen["offline"] = (datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE, os.environ.get("HF_HUB_OFFLINE"))
        return {"train": {"sentence": ["x", "y"], "label": [0, 1]}, "validation": [{"sentence": "z", "label": 1}]}

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    data = load_sentiment_data(hub_timeout=1.0)
    assert seen["offline"] == (True, True, "1")
    assert (data.source, data.name, data.notice) == ("cache", "glue/sst2", None)
    assert data.train == [{"sentence": "x", "label": 0}, {"sentence": "y", "label": 1}]
    assert data.eval == [{"sentence": "z", "label": 1}]


@pytest.mark.parametrize(
    "failure",
    [ConnectionError("Couldn't reach 'nyu-mll/glue' on the Hub"), FileNotFoundError("not cached"), KeyError("validation")],
)
def test_glue_failure_falls_back_to_generated(monkeypatch, live_hub, failure):
    import datasets

    def broken(*args, **kwargs):
        if isinstance(failure, KeyError):
            return {"train": {"sentence": ["x"], "label": [1]}}  # no validation split
        raise failure

    monkeypatch.setattr(datasets, "load_dataset", broken)
    data = load_sentiment_data(generated_train_size=10, generated_eval_size=5)
    assert data.source == "generated" and data.notice.startswith("notice: GLUE SST-2 is not reachable or cached")
