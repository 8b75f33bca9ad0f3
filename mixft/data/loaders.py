"""Tokenised examples -> padded batches, the way mixed precision likes them.

Usage::

    from mixft.data.loaders import make_loader, pad_multiple
    loader = make_loader(train, tokenizer, 32, shuffle=True, seed=0, pad_to_multiple_of=pad_multiple(device))

Batches are padded dynamically (to a multiple of 8 on CUDA: tensor cores want dimensions
divisible by 8) and grouped by length so padding stays small. Tokenisation itself is
mixft.data.tokenize.
"""

from __future__ import annotations

from torch.utils.data import DataLoader

from mixft.data.batching import LengthGroupedBatchSampler
from mixft.data.packing import PackingCollator
from mixft.data.shape_ladder import LadderPadding, ShapeLadder


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
    group_size: int = 1,
    pack: bool = False,
    shapes: ShapeLadder | None = None,
) -> DataLoader:
    """A DataLoader of length-grouped, dynamically padded batches (see LengthGroupedBatchSampler).

    ``examples``: a tokenised ``datasets.Dataset`` (from mixft.data.tokenize; its ``lengths``
    column drives the grouping and is not passed to the model) or a list of example dicts
    with ``input_ids``. From a Dataset the DataLoader fetches each batch with one Arrow read
    (``Dataset.__getitems__``), not one per example. ``group_size``: batches per length
    group when training (the sampler's ``group_factor``); 1, the default as in every recipe, draws
    every batch at random (grouping pads less but cost accuracy at small budgets: docs/benchmarks.md;
    the default was 50 until 2026-11-29). ``seed`` orders the shuffled batches: a ``Trainer``'s own
    ``seed`` (its weights' draws, dropout) does not, so give each seed's loader its own.
    ``pack``: each batch's sentences packed into rows without padding (``mixft.data.packing``;
    the model must take ``sequence_ids``, as ``BertClassifier`` does). ``shapes``: each batch's rows and
    row length rounded up this ladder so shapes repeat (``mixft.data.shape_ladder``; None: exact).

    Usage: ``loader = make_loader(train, tokenizer, 32, shuffle=True, seed=0)``
    """
    from transformers import DataCollatorWithPadding

    lengths, rows = _lengths_and_rows(examples)
    sampler = LengthGroupedBatchSampler(lengths, batch_size, seed=seed, group_factor=group_size, shuffle=shuffle)
    collator = DataCollatorWithPadding(tokenizer, pad_to_multiple_of=pad_to_multiple_of, return_tensors="pt")
    if pack:
        collator = PackingCollator(collator, tokenizer.pad_token_id, ladder=shapes)
    elif shapes is not None:
        collator = LadderPadding(collator, shapes)
    return DataLoader(
        rows,
        batch_sampler=sampler,
        collate_fn=collator,
        num_workers=num_workers,
        pin_memory=pin_memory,
        persistent_workers=num_workers > 0,
    )


def run_loaders(
    train,
    evaluation,
    tokenizer,
    batch_size: int,
    *,
    device,
    seed: int,
    num_workers: int = 0,
    group_size: int = 1,
    pack: bool = False,
    shapes: ShapeLadder | None = None,
) -> tuple[DataLoader, DataLoader]:
    """A recipe's (training, evaluation) loaders for one run on ``device``, built alike for every recipe.

    Training batches are shuffled with ``seed`` (``group_size``, ``pack`` and ``shapes`` as in
    ``make_loader``). Evaluation batches are twice as large (no activations are kept for a backward)
    and keep their own shapes: they come length-sorted, in the same order at every evaluation, so
    their shapes repeat from one evaluation to the next already (``mixft.data.shape_ladder``). Both
    are padded for the device (``pad_multiple``) and pin memory on CUDA.

    Usage: ``train_loader, eval_loader = run_loaders(train, dev, tokenizer, 32, device=cpu, seed=0)``
    """
    pad = pad_multiple(device)
    pin = getattr(device, "type", None) == "cuda"
    train_loader = make_loader(
        train,
        tokenizer,
        batch_size,
        shuffle=True,
        seed=seed,
        pad_to_multiple_of=pad,
        num_workers=num_workers,
        pin_memory=pin,
        group_size=group_size,
        pack=pack,
        shapes=shapes,
    )
    eval_loader = make_loader(
        evaluation,
        tokenizer,
        batch_size * 2,
        shuffle=False,
        pad_to_multiple_of=pad,
        num_workers=num_workers,
        pin_memory=pin,
    )
    return train_loader, eval_loader


def pad_multiple(device) -> int | None:
    """Pad batches to a multiple of this on ``device`` (None: to the batch's longest example).

    8 on CUDA (tensor cores want dimensions divisible by 8), for every precision alike:
    the runs of one --compare then see the same batch shapes and so the same dropout
    masks. A CPU has no tensor cores; extra padding only cost it time (bf16 steps 1.3x
    slower, docs/benchmarks.md).

    Usage: ``make_loader(rows, tok, 32, shuffle=True, pad_to_multiple_of=pad_multiple(device))``
    """
    kind = getattr(device, "type", None) or str(device).split(":", 1)[0]  # "cuda:1" is CUDA too
    return 8 if kind == "cuda" else None
