"""Shared fixtures: a tiny config-built BERT (fast) with the real bert-base-uncased vocabulary."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

# The suite keeps the bytecode of what it imports. README's test command installs with pip's
# --no-compile (compiling all of torch and transformers up front was 170 s of a 310 s install),
# so each module is compiled by the first process that imports it. Where PYTHONDONTWRITEBYTECODE is
# set, nothing would be kept and each of the suite's ~80 processes (workers, CLI runs, torchrun
# ranks) would compile torch and transformers again: a tiny CLI run took 38 s instead of 16.6 s
# (2-core Xeon without amx_bf16/avx512_bf16/avx512_fp16, 2026-11-29). Set here, before torch is
# imported, so the first process writes it, and the environment that the xdist workers and every
# started process inherit says the same.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

# Under pytest-xdist each worker is one of several torch processes on the same cores: one
# thread each (set before torch starts its pool; inherited by the CLI processes a test
# starts), or they oversubscribe the cores and every test slows down many times over.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402  (after the thread setting above)
import torch  # noqa: E402

# trackio reads TRACKIO_DIR once, when it is first imported: point it at a folder of this
# session's before any test imports it, so no test writes into the user's trackio store.
os.environ["TRACKIO_DIR"] = tempfile.mkdtemp(prefix="mixft-tests-trackio-")
atexit.register(shutil.rmtree, os.environ["TRACKIO_DIR"], ignore_errors=True)

TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def make_tiny_bert_dir(path: Path, seed: int = 0, layers: int = 1) -> Path:
    """Save a ``layers``-layer (default 1), 32-wide BertModel plus the shipped tokenizer into ``path``."""
    from transformers import BertConfig, BertModel

    from mixft.models.hub import shipped_model_dir

    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=layers,
        num_attention_heads=2,
        intermediate_size=37,
        max_position_embeddings=128,
    )
    BertModel(config).save_pretrained(path)
    shipped = shipped_model_dir()
    for name in TOKENIZER_FILES:
        if (shipped / name).exists():
            shutil.copy(shipped / name, path / name)
    return path


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory) -> Path:
    return make_tiny_bert_dir(tmp_path_factory.mktemp("tiny-bert"))


def write_tsv(path: Path, rows: list[tuple[str, int]]) -> Path:
    path.write_text("sentence\tlabel\n" + "".join(f"{s}\t{label}\n" for s, label in rows), encoding="utf-8")
    return path


def make_data_dir(path: Path, n_train: int, n_eval: int) -> Path:
    """A GLUE-layout directory (train.tsv, dev.tsv) of generated sentences at ``path``."""
    from mixft.data.synthetic.sentiment import generated_splits

    train, dev = generated_splits(n_train, n_eval, seed=0)
    path.mkdir()
    write_tsv(path / "train.tsv", [(r["sentence"], r["label"]) for r in train])
    write_tsv(path / "dev.tsv", [(r["sentence"], r["label"]) for r in dev])
    return path


@pytest.fixture
def tiny_data_dir(tmp_path) -> Path:
    """A GLUE-layout directory with 16 train and 8 dev sentences."""
    return make_data_dir(tmp_path / "sst2", 16, 8)


def made_once(tmp_path_factory, name: str, make) -> Path:
    """The folder ``name`` that ``make(folder)`` fills once per test session, however many xdist
    workers ask for it: for module fixtures that cost tens of seconds (a torchrun launch, runs
    measured in fresh processes), which each worker would otherwise pay again. The first worker
    makes it under a file lock while another asking waits; a failed attempt is made again.

    Usage: ``folder = made_once(tmp_path_factory, "fsdp-runs", lambda folder: launch(folder))``
    """
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # this session's folder, shared by its workers (each has its own below it)
    folder = base / name
    with FileLock(str(base / f"{name}.lock")):
        if not (folder / ".made").exists():
            shutil.rmtree(folder, ignore_errors=True)  # what a failed attempt left
            folder.mkdir()
            make(folder)
            (folder / ".made").touch()
    return folder


@pytest.fixture(autouse=True)
def _a_probe_cache_of_its_own(tmp_path, monkeypatch):
    """Each test's probe cache (``MIXFT_CACHE``) is a folder of its own, empty: a probe this machine's
    user cached would change what ``--amp`` chooses, and a first ``--amp`` on a CPU where torch says bf16
    is native measures and keeps its probe there (``mixft.runs.plan.measures_first``). CLI processes a
    test starts inherit it."""
    monkeypatch.setenv("MIXFT_CACHE", str(tmp_path / "mixft-cache"))


@pytest.fixture(autouse=True)
def _compared_runs_measure_memory_in_process(request, monkeypatch):
    """A compared run's CPU peak RSS taken in the test's own process, unless the test is marked
    ``fresh_memory``.

    Each run of a ``--compare`` / ``--seeds`` on the CPU otherwise starts a fresh Python that
    imports torch and transformers to train three steps (mixft.runs.fresh_process): 9.2-10.8 s
    a run, a third of the suite's time (measured 2026-11-27 on a 2-core AMD EPYC, AVX2 only: none
    of amx_bf16, avx512_bf16, avx512_fp16). The tests that check that figure (its scope, that run
    order cannot move it, what the report says of it) carry the mark and measure it for real;
    the rest measure what one process gives, the figure a single run reports
    (``device_figure_scope == "run"``), and assert nothing about it. CLI processes that a test
    starts are not affected.
    """
    if request.node.get_closest_marker("fresh_memory"):
        yield
        return
    import mixft.runs.runner as runner

    measure = runner.measure_before_fit

    def in_this_process(*args, fresh, **kwargs):
        return measure(*args, fresh=False, **kwargs)

    monkeypatch.setattr(runner, "measure_before_fit", in_this_process)
    yield


# What may differ between two runs of the same computation: clocks and memory gauges.
TIMING_KEYS = {
    "train_time_s",
    "train_samples_per_s",
    "train_tokens_per_s",
    "peak_memory_bytes",
    "start_memory_bytes",
    "config",
    "device_figure",  # memory.device_figure: the peak RSS or allocated bytes, a gauge too
    "time_s",
    "samples_per_s",
    "checkpoint_time_s",
}


def without_timings(value):
    """A results.json run (or any part of it) with every timing/memory figure removed."""
    if isinstance(value, dict):
        return {k: without_timings(v) for k, v in value.items() if k not in TIMING_KEYS}
    if isinstance(value, list):
        return [without_timings(v) for v in value]
    return value


@contextlib.contextmanager
def another_run_holding(out: Path):
    """Another process holds ``out``'s output lock (flock locks are per open file) until the block ends:
    yields its pid. Usage: ``with another_run_holding(tmp_path) as pid: ...``"""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from mixft.runs.outdir import OutputLock
        with OutputLock(Path({str(out)!r})):
            print("held", flush=True)
            sys.stdin.read()
    """),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        yield holder.pid
    finally:
        holder.communicate("")  # releases the lock by exiting


def free_port() -> int:
    """A local TCP port nothing listens on (bound, then released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def isolated_hf(monkeypatch, tmp_path):
    """Online-looking, isolated Hugging Face state, restored after each test.

    go_offline() mutates os.environ and module flags; every one of them is registered
    with monkeypatch first so it is undone. The hub endpoint is a closed local port
    (connection refused at once), the caches empty temporary folders.
    """
    import datasets.config  # imported now so its import-time flags can be restored
    from huggingface_hub import constants

    import mixft.models.hub as hub

    for name in (*hub.OFFLINE_ENV_VARS, "HF_ENDPOINT"):
        monkeypatch.setenv(name, "x")  # records the original value (or its absence)...
        monkeypatch.delenv(name)  # ...and starts the test without it
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf-hub-cache"))
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_ENDPOINT", constants.ENDPOINT)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-datasets-cache")
    monkeypatch.setattr(hub, "_went_offline", False)
    hub.hub_reachable.cache_clear()
    yield
    hub.hub_reachable.cache_clear()


@pytest.fixture
def native_bf16_cpu(monkeypatch):
    """This process answers as a CPU with native bf16 (AMX/AVX-512 BF16): a test about something else
    reads alike on every CPU kind, without the one-line "no native bf16" notice of an AVX2-only CPU
    (tests/runs/test_amp_run.py checks that notice on simulated machines of each kind)."""
    import mixft.amp.hardware

    facts = {"bf16": True, "fp16": True, "via": "oneDNN", "cpu_capability": "AVX512", "compute_capability": None}
    monkeypatch.setattr(mixft.amp.hardware, "native_precisions", lambda device: dict(facts))
