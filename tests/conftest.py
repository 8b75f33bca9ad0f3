"""Shared fixtures: a tiny config-built BERT (fast) with the real bert-base-uncased vocabulary."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def make_tiny_bert_dir(path: Path, seed: int = 0) -> Path:
    """Save a 1-layer, 32-wide BertModel plus the shipped tokenizer into ``path``."""
    from transformers import BertConfig, BertModel

    from mixft.hub import shipped_model_dir

    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=37, max_position_embeddings=128,
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
    path.write_text("sentence\tlabel\n" + "".join(f"{s}\t{l}\n" for s, l in rows), encoding="utf-8")
    return path


@pytest.fixture
def tiny_data_dir(tmp_path) -> Path:
    """A GLUE-layout directory with 16 train and 8 dev sentences."""
    from mixft.data.generated import generated_splits

    train, dev = generated_splits(16, 8, seed=0)
    d = tmp_path / "sst2"
    d.mkdir()
    write_tsv(d / "train.tsv", [(r["sentence"], r["label"]) for r in train])
    write_tsv(d / "dev.tsv", [(r["sentence"], r["label"]) for r in dev])
    return d


# What may differ between two runs of the same computation: clocks and memory gauges.
TIMING_KEYS = {"train_time_s", "train_samples_per_s", "train_tokens_per_s", "peak_memory_bytes", "config",
               "time_s", "samples_per_s"}


def without_timings(value):
    """A results.json run (or any part of it) with every timing/memory figure removed."""
    if isinstance(value, dict):
        return {k: without_timings(v) for k, v in value.items() if k not in TIMING_KEYS}
    if isinstance(value, list):
        return [without_timings(v) for v in value]
    return value
