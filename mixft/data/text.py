"""Sentence rows -> tokenised examples -> padded batches, the way mixed precision likes them.

Tokenisation runs once per process through `datasets` (batched, fast tokenizers);
batches are padded dynamically, to a multiple of 8 under mixed precision (tensor cores
want dimensions divisible by 8), and grouped by length so padding stays small.
"""

from __future__ import annotations

import uuid
from typing import Any

import torch
from torch.utils.data import DataLoader

from .batching import LengthGroupedBatchSampler


def tokenize_rows(rows: list[dict], tokenizer, max_length: int) -> list[dict[str, Any]]:
    """Rows ``{"sentence", "label"}`` -> examples with ``input_ids``, ``attention_mask``, ``labels``.

    Sentences longer than ``max_length`` tokens are truncated (a 100k-character line is
    fine). Labels become floats: the loss is binary cross-entropy on one logit.

    Usage: ``examples = tokenize_rows([{"sentence": "fine", "label": 1}], tok, 128)``
    """
    import datasets

    datasets.disable_progress_bars()  # a bar per tokenisation pass is noise in the CLI output
    ds = datasets.Dataset.from_dict(
        {"sentence": [r["sentence"] for r in rows], "labels": [float(r["label"]) for r in rows]}
    )
    ds = ds.map(
        lambda b: tokenizer(b["sentence"], truncation=True, max_length=max_length),
        batched=True,
        remove_columns=["sentence"],
        # An explicit fingerprint: otherwise datasets hashes the tokenizer (~2 s) to name
        # a cache entry that an in-memory dataset never writes.
        new_fingerprint=f"mixft-tokenize-{uuid.uuid4().hex}",
    )
    # Plain dicts: indexing a list is much cheaper per example than an Arrow row lookup.
    return ds.to_list()


def _is_arrow(examples) -> bool:
    # Duck-typed: a datasets.Dataset, without importing datasets for the list-of-dicts path.
    return hasattr(examples, "column_names") and hasattr(examples, "__getitems__")


def _column(examples, name: str):
    """One scalar column of a Dataset as a numpy array (honours selections and splits)."""
    return examples.select_columns([name]).with_format("arrow")[:].column(0).to_numpy()


def _lengths_and_rows(examples):
    """Per-example token counts, and what the DataLoader indexes (Arrow: without ``lengths``)."""
    if not _is_arrow(examples):
        return [len(e["input_ids"]) for e in examples], examples
    if "lengths" in examples.column_names:
        lengths = _column(examples, "lengths").tolist()
        return lengths, examples.remove_columns(["lengths"]).with_format(None)
    lengths = [len(ids) for ids in examples.select_columns(["input_ids"])["input_ids"]]
    return lengths, examples.with_format(None)


def make_loader(
    examples,
    tokenizer,
    batch_size: int,
    *,
    shuffle: bool,
    seed: int = 0,
    pad_to_multiple_of: int | None = None,
    num_workers: int = 0,
    pin_memory: bool = False,
) -> DataLoader:
    """A DataLoader of length-grouped, dynamically padded batches (see LengthGroupedBatchSampler).

    ``examples``: a tokenised ``datasets.Dataset`` (from mixft.data.tokenize, its ``lengths``
    column drives the grouping and is not passed to the model) or a list of example dicts
    (from :func:`tokenize_rows`). From a Dataset the DataLoader fetches each batch with one
    Arrow read (``Dataset.__getitems__``), not one per example.

    Usage: ``loader = make_loader(train, tokenizer, 32, shuffle=True, seed=0)``
    """
    from transformers import DataCollatorWithPadding

    lengths, rows = _lengths_and_rows(examples)
    sampler = LengthGroupedBatchSampler(lengths, batch_size, seed=seed, shuffle=shuffle)
    collator = DataCollatorWithPadding(tokenizer, pad_to_multiple_of=pad_to_multiple_of, return_tensors="pt")
    return DataLoader(
        rows,
        batch_sampler=sampler,
        collate_fn=collator,
        num_workers=num_workers,
        pin_memory=pin_memory,
        persistent_workers=num_workers > 0,
    )


def padding_efficiency(loader: DataLoader) -> float:
    """Real tokens / padded tokens over one pass of ``loader`` (1.0 = no padding at all)."""
    real = padded = 0
    for batch in loader:
        mask = batch["attention_mask"]
        real += int(mask.sum())
        padded += mask.numel()
    return real / padded if padded else 1.0


def labels_tensor(examples) -> torch.Tensor:
    """The ``labels`` of a list of example dicts or of a tokenised ``datasets.Dataset``."""
    if _is_arrow(examples):
        return torch.from_numpy(_column(examples, "labels").copy())
    return torch.tensor([e["labels"] for e in examples])


def pad_multiple(device) -> int | None:
    """Pad batches to a multiple of this on ``device`` (None: to the batch's longest example).

    8 on CUDA (tensor cores want dimensions divisible by 8), for every precision alike:
    the runs of one --compare then see the same batch shapes and so the same dropout
    masks. A CPU has no tensor cores; extra padding only cost it time (bf16 steps 1.3x
    slower, docs/benchmarks.md).

    Usage: ``make_loader(rows, tok, 32, shuffle=True, pad_to_multiple_of=pad_multiple(device))``
    """
    return 8 if getattr(device, "type", device) == "cuda" else None
