"""How bert-sst2 throughput and memory scale: batch size, sequence length and padding, per precision.

Two small grids, every point a fresh model (same seed) in mixft's Trainer for
``warmup + steps`` optimizer steps, timed per step by a ``StepTimer`` (median step time
after warm-up; samples/s and real tokens/s over the timed steps):

* **batch grid**: ``batch_sizes`` x precisions at the recipe's ``max_length``, dynamic padding.
  Memory per point: the peak over the run (CUDA: ``max_memory_allocated``; CPU: the
  process's peak RSS, which only grows across points in one process, so read it with
  care) and, on every device, the bytes autograd saves for backward in one forward
  pass (activations: tensors saved by ``saved_tensors_hooks``, deduplicated by storage,
  parameters excluded). The latter is exact and shows what a half-precision dtype saves.
* **length grid**: ``max_lengths`` x {``max_length`` padding, ``dynamic`` length-grouped
  padding} x precisions at one batch size. Each cap is the recipe's own ``max_length``
  (its ``prepare`` re-tokenises). ``max_length`` pads every batch to the cap (what a
  fixed-shape pipeline does: the recipe's collator with ``padding="max_length"``, same
  batches in the same order); ``dynamic`` is the recipe's loader as it is. Sentences
  longer than the cap are truncated in both, so both see the same real tokens;
  ``padding efficiency`` = real / computed tokens.

Usage::

    report = run_scaling(ScalingConfig(setup=BertSetup(), batch_sizes=[8, 16, 32]))
    print(scaling_tables(report))
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch.utils.data import DataLoader

from mixft.amp.precision import Precision, amp_precision_names, resolve_device, resolve_precision
from mixft.runs.build import build_trainer
from mixft.train.measure import device_name

from .bert import BertSetup, PreparedBert, WorkCounter, padding_collator, prepare_bert
from .timing import StepTimer, TimedRegion, markdown_table, mib

PADDINGS = ("max_length", "dynamic")


@dataclass
class ScalingConfig:
    setup: BertSetup = field(default_factory=BertSetup)
    precisions: list[str] = field(default_factory=lambda: ["fp32", "amp"])
    batch_sizes: list[int] = field(default_factory=lambda: [8, 16, 32, 64])
    max_lengths: list[int] = field(default_factory=lambda: [32, 64, 128])
    length_batch_size: int = 16
    steps: int = 6
    warmup: int = 2


@dataclass
class ScalingPoint:
    grid: str  # "batch" | "length"
    precision: str
    batch_size: int
    max_length: int
    padding: str
    median_step_s: float
    samples_per_s: float
    tokens_per_s: float | None  # real tokens
    padding_efficiency: float | None  # real / computed tokens over the timed run
    peak_memory_bytes: int | None
    peak_memory_kind: str
    saved_activation_bytes: int | None = None  # batch grid only


@dataclass
class ScalingReport:
    device: str
    device_name: str
    model: str
    dataset: str
    steps: int
    warmup: int
    points: list[ScalingPoint] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def saved_activation_bytes(
    model: torch.nn.Module, batch: dict, precision: Precision, device: torch.device, loss_fn
) -> int:
    """Bytes autograd keeps for backward after one forward + loss (parameters excluded, storages counted once)."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor):
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr not in params and ptr != 0:
            seen[ptr] = storage.nbytes()
        return t

    batch = {k: v.to(device) for k, v in batch.items()}
    labels = batch.pop("labels")
    model.train()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast(
            device.type, dtype=precision.autocast_dtype or torch.float32, enabled=precision.autocast_enabled
        ):
            loss = loss_fn(model(**batch), labels)
    del loss  # frees the graph and its saved tensors
    return sum(seen.values())


def fixed_length_loader(loader: DataLoader, max_length: int) -> DataLoader:
    """``loader``'s examples and batches, each batch padded to ``max_length`` instead of its longest.

    ``loader`` is a recipe's train loader whose collator is a Hugging Face padding collator
    (a dataclass with ``padding`` and ``max_length``, e.g. ``DataCollatorWithPadding``).
    """
    collator = padding_collator(loader.collate_fn)  # fixed-length rows: the padded form of packed batches
    if not (
        dataclasses.is_dataclass(collator)
        and {"padding", "max_length"} <= {f.name for f in dataclasses.fields(collator)}
    ):
        raise ValueError(f"cannot pad {type(collator).__name__} batches to a fixed length (not an HF padding collator)")
    fixed = dataclasses.replace(collator, padding="max_length", max_length=max_length, pad_to_multiple_of=None)
    return DataLoader(loader.dataset, batch_sampler=loader.batch_sampler, collate_fn=fixed)


def _measure(
    bert: PreparedBert,
    precision: Precision,
    dev,
    cfg: ScalingConfig,
    *,
    batch_size: int,
    fixed_length: int | None = None,
) -> dict[str, Any]:
    """One grid point: the recipe's parts at ``batch_size`` (optionally every batch padded to ``fixed_length``)."""
    seed = cfg.setup.seed
    run_cfg = dataclasses.replace(bert.cfg, batch_size=batch_size, epochs=1, max_steps=cfg.warmup + cfg.steps)
    parts = bert.recipe.build(run_cfg, bert.prepared, precision, dev, seed)
    if fixed_length is not None:
        parts = dataclasses.replace(parts, train_loader=fixed_length_loader(parts.train_loader, fixed_length))
    timer = StepTimer()
    trainer = build_trainer(
        dataclasses.replace(parts, eval_loader=None),
        run_cfg,
        precision=precision,
        device=dev,
        seed=seed,
        callbacks=[timer],
    )
    with WorkCounter(parts.model) as work, TimedRegion(dev) as region:
        trainer.fit()
    s = timer.summary(cfg.warmup)
    counts = work.totals()
    return {
        "median_step_s": s["median_step_s"],
        "samples_per_s": s["samples_per_s"],
        "tokens_per_s": s["tokens_per_s"],
        "padding_efficiency": counts["real_tokens"] / counts["padded_tokens"] if counts["padded_tokens"] else None,
        "peak_memory_bytes": region.peak_bytes,
        "peak_memory_kind": region.memory_kind,
        "parts": parts,
    }


def run_scaling(cfg: ScalingConfig) -> ScalingReport:
    """Both grids, smallest point first (CPU RSS peaks only grow within a process)."""
    setup = cfg.setup
    dev = resolve_device(setup.device)
    names = [amp_precision_names(dev)[0] if n == "amp" else n for n in cfg.precisions]
    precisions = [resolve_precision(n, dev) for n in dict.fromkeys(names)]
    need = max(max(cfg.batch_sizes), cfg.length_batch_size) * (cfg.steps + cfg.warmup)
    samples = max(setup.train_samples, need)
    bert = prepare_bert(setup, max_train_samples=samples, device=str(dev))
    report = ScalingReport(
        device=str(dev), device_name=device_name(dev), model="", dataset="", steps=cfg.steps, warmup=cfg.warmup
    )

    for batch_size in sorted(cfg.batch_sizes):
        for precision in precisions:
            m = _measure(bert, precision, dev, cfg, batch_size=batch_size)
            parts = m.pop("parts")
            report.model, report.dataset = parts.run_info.get("model", ""), parts.run_info.get("dataset", "")
            batch = next(iter(parts.train_loader))
            saved = saved_activation_bytes(parts.model, batch, precision, dev, parts.loss_fn)
            report.points.append(
                ScalingPoint(
                    "batch",
                    precision.name,
                    batch_size,
                    bert.cfg.max_length,
                    "dynamic",
                    saved_activation_bytes=saved,
                    **m,
                )
            )
            del parts, batch

    # The same rows tokenised at each cap by the recipe's own prepare (its truncation keeps [SEP]).
    for max_length in sorted(cfg.max_lengths):
        capped = prepare_bert(setup, max_train_samples=samples, max_length=max_length, device=str(dev))
        for padding in PADDINGS:
            for precision in precisions:
                m = _measure(
                    capped,
                    precision,
                    dev,
                    cfg,
                    batch_size=cfg.length_batch_size,
                    fixed_length=max_length if padding == "max_length" else None,
                )
                m.pop("parts")
                report.points.append(
                    ScalingPoint("length", precision.name, cfg.length_batch_size, max_length, padding, **m)
                )
    return report


def scaling_tables(report: ScalingReport) -> str:
    head = (
        f"Scaling on {report.device_name} [{report.device}]: {report.model}, {report.dataset}; "
        f"median of {report.steps} steps after {report.warmup} warm-up"
    )
    batch = [pt for pt in report.points if pt.grid == "batch"]
    length = [pt for pt in report.points if pt.grid == "length"]
    t1 = markdown_table(
        [
            "batch",
            "precision",
            "median step (ms)",
            "samples/s",
            "tokens/s (real)",
            "padding eff.",
            "saved for backward (1 fwd)",
            "peak memory",
        ],
        [
            [
                pt.batch_size,
                pt.precision,
                f"{pt.median_step_s * 1e3:.0f}",
                f"{pt.samples_per_s:.1f}",
                f"{pt.tokens_per_s:.0f}" if pt.tokens_per_s else "n/a",
                f"{pt.padding_efficiency:.2f}" if pt.padding_efficiency else "n/a",
                mib(pt.saved_activation_bytes),
                f"{mib(pt.peak_memory_bytes)} ({pt.peak_memory_kind})",
            ]
            for pt in batch
        ],
    )
    t2 = markdown_table(
        [
            "max length",
            "padding",
            "precision",
            "batch",
            "median step (ms)",
            "samples/s",
            "tokens/s (real)",
            "padding eff.",
        ],
        [
            [
                pt.max_length,
                pt.padding,
                pt.precision,
                pt.batch_size,
                f"{pt.median_step_s * 1e3:.0f}",
                f"{pt.samples_per_s:.1f}",
                f"{pt.tokens_per_s:.0f}" if pt.tokens_per_s else "n/a",
                f"{pt.padding_efficiency:.2f}" if pt.padding_efficiency else "n/a",
            ]
            for pt in length
        ],
    )
    return (
        f"{head}\n\nThroughput and memory vs batch size (dynamic padding)\n\n{t1}\n\n"
        f"Throughput vs sequence cap and padding (batch {length[0].batch_size if length else '-'})\n\n{t2}"
    )
