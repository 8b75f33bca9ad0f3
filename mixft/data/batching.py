"""Length-grouped batching: short sentences batch with short ones, so padding is cheap.

SST-2 sentences range from 2 to ~60 tokens; padding a random batch to its longest
member wastes most of the compute. Grouping by length keeps batches random (the
groups are drawn at random and shuffled) while padding far less.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence

import torch
from torch.utils.data import Sampler

from mixft.options import POSITIVE_INT


class LengthGroupedBatchSampler(Sampler[list[int]]):
    """Yields batches of indices; every index appears exactly once per epoch.

    Each epoch: shuffle all indices with ``(seed, epoch)``, cut them into mega-batches of
    ``group_factor * batch_size``, sort each mega-batch by length, cut it into batches,
    and shuffle the batch order. ``set_epoch(e)`` makes the order a pure function of
    (seed, e), which is what resuming a run relies on. ``group_factor=1`` sorts only inside
    each batch, so which examples share a batch is plain random sampling (no grouping).

    Under data parallelism each of ``num_replicas`` processes takes every
    ``num_replicas``-th batch of the same global order (rank ``rank`` starting at its
    index), so together they see every example once. For training (``shuffle=True``)
    the batch count is cut to a multiple of ``num_replicas``: every rank must take the
    same number of optimizer steps, or the gradient all-reduce would wait forever.

    Usage: ``DataLoader(ds, batch_sampler=LengthGroupedBatchSampler(lengths, 32, seed=0))``
    """

    def __init__(
        self,
        lengths: Sequence[int],
        batch_size: int,
        seed: int = 0,
        group_factor: int = 50,
        shuffle: bool = True,
        num_replicas: int | None = None,
        rank: int | None = None,
    ):
        POSITIVE_INT.validate("batch_size", batch_size)
        POSITIVE_INT.validate("group_factor", group_factor)
        from mixft.distributed import rank as current_rank
        from mixft.distributed import world_size

        self.lengths = list(lengths)
        self.batch_size = batch_size
        self.seed = seed
        self.group_factor = group_factor
        self.shuffle = shuffle
        self.num_replicas = num_replicas if num_replicas is not None else world_size()
        self.rank = rank if rank is not None else current_rank()
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        total = (len(self.lengths) + self.batch_size - 1) // self.batch_size
        if self.num_replicas == 1:
            return total
        if self.shuffle:
            return total // self.num_replicas
        return len(range(self.rank, total, self.num_replicas))

    def __iter__(self) -> Iterator[list[int]]:
        batches = self._global_batches()
        if self.num_replicas > 1:
            if self.shuffle:
                batches = batches[: len(batches) - len(batches) % self.num_replicas]
            batches = batches[self.rank :: self.num_replicas]
        yield from batches

    def gathered_order(self) -> list[int] | None:
        """The dataset indices in the order an evaluation over every process gathers them (each rank's batches
        in turn, rank 0 first); None for training (``shuffle=True``), whose order is not kept."""
        if self.shuffle:
            return None
        batches = self._global_batches()
        return [i for r in range(self.num_replicas) for batch in batches[r :: self.num_replicas] for i in batch]

    def _global_batches(self) -> list[list[int]]:
        indices = list(range(len(self.lengths)))
        if not self.shuffle:
            # Deterministic evaluation order, longest first: any out-of-memory shows at once.
            indices.sort(key=lambda i: -self.lengths[i])
            return list(_chunks(indices, self.batch_size))
        rng = random.Random(self.seed * 100_003 + self.epoch)
        rng.shuffle(indices)
        group = self.group_factor * self.batch_size
        batches: list[list[int]] = []
        for start in range(0, len(indices), group):
            mega = sorted(indices[start : start + group], key=lambda i: self.lengths[i])
            batches.extend(_chunks(mega, self.batch_size))
        rng.shuffle(batches)
        return batches


def _chunks(items: list[int], size: int) -> Iterator[list[int]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def in_input_order(loader, values):
    """``values`` (a tensor, one row per example, in the order ``loader``'s evaluation gathered them) in the
    dataset's own order; unchanged when the loader's sampler cannot say its order.

    The evaluation loader batches longest first: per-example figures (results.json's
    ``eval_predictions``, a ``--predict-file``'s rows) go back to the file's order.

    Usage: ``in_input_order(eval_loader, torch.tensor(predictions))``
    """
    order_of = getattr(getattr(loader, "batch_sampler", None), "gathered_order", None)
    order = order_of() if callable(order_of) else None
    if order is None or len(order) != len(values) or sorted(order) != list(range(len(order))):
        return values
    in_order = torch.empty_like(values)
    in_order[torch.tensor(order, dtype=torch.long)] = values
    return in_order
