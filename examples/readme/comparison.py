"""Both README loops trained and measured the same way: (fp32 result, AMP result), and their table.

Each run trains a fresh copy of the encoder from the same seed (initial head, data order,
dropout draws), under mixft's device-synchronised Stopwatch and PeakMemory, then the same
evaluation; results come back as :class:`~mixft.results.RunResult`, like the Trainer's runs.

Usage::

    fp32, amp = run_comparison(prepare(ExampleConfig()))
    print(side_by_side(fp32, amp))
"""

from __future__ import annotations

import copy
import gc
from collections.abc import Callable
from dataclasses import asdict

import torch
from torch import nn

from mixft.amp.precision import Precision
from mixft.models.classifiers import BertClassifier
from mixft.results import RunResult
from mixft.train.measure import PeakMemory, Stopwatch, device_name

from .loops import mixed_precision_loop, single_precision_loop
from .setup import Prepared


class RecordingLoss(nn.Module):
    """The criterion both loops call: BCEWithLogitsLoss that keeps each step's loss on the
    device (no host sync in the loop); read once after training."""

    def __init__(self):
        super().__init__()
        self.loss = nn.BCEWithLogitsLoss()
        self.values: list[torch.Tensor] = []

    def forward(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        loss = self.loss(logits, labels.float())  # autocast runs this loss in fp32 either way
        self.values.append(loss.detach())
        return loss


def _loader(prepared: Prepared, examples, batch_size: int, shuffle: bool, seed: int):
    from torch.utils.data import DataLoader
    from transformers import DataCollatorWithPadding

    # A plain shuffled DataLoader as in the README, with its own seeded generator so both
    # loops see the same batches; the same padding (multiples of 8) for both as well.
    generator = torch.Generator().manual_seed(seed)
    return DataLoader(
        examples,
        batch_size=batch_size,
        shuffle=shuffle,
        generator=generator,
        collate_fn=DataCollatorWithPadding(prepared.tokenizer, pad_to_multiple_of=8, return_tensors="pt"),
    )


@torch.inference_mode()
def evaluate(model: nn.Module, loader, device: torch.device, precision: Precision) -> dict[str, float]:
    """Accuracy (logit > 0 means positive) and mean BCE loss, under ``precision``'s autocast."""
    model.eval()
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    correct = torch.zeros((), dtype=torch.int64, device=device)
    count = 0
    dtype = precision.autocast_dtype or torch.float32
    for batch in loader:
        ids, mask, labels = (batch[k].to(device) for k in ("input_ids", "attention_mask", "labels"))
        with torch.autocast(device.type, dtype=dtype, enabled=precision.autocast_enabled):
            logits = model(input_ids=ids, attention_mask=mask)
        logits = logits.float()
        loss_sum += nn.functional.binary_cross_entropy_with_logits(logits, labels.float(), reduction="sum").double()
        correct += ((logits > 0).long() == labels.long()).sum()
        count += labels.shape[0]
    model.train()
    return {"accuracy": float(correct) / max(count, 1), "loss": float(loss_sum) / max(count, 1)}


def run_loop(prepared: Prepared, precision: Precision) -> RunResult:
    """Train a fresh copy of the README model with the README loop for ``precision``; measure it.

    fp32 runs :func:`single_precision_loop`, anything else :func:`mixed_precision_loop`.
    Usage: ``result = run_loop(prepared, prepared.amp)``
    """
    cfg, device = prepared.cfg, prepared.device
    torch.manual_seed(cfg.seed)  # the head's initial weights: the same for both precisions
    model = BertClassifier(copy.deepcopy(prepared.encoder), dropout=0.1).to(device)
    # Built after model.to(device), so its state lives with the parameters.
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    criterion = RecordingLoss()
    train_loader = _loader(prepared, prepared.train_examples, cfg.batch_size, shuffle=True, seed=cfg.seed)
    eval_loader = _loader(prepared, prepared.eval_examples, cfg.batch_size * 2, shuffle=False, seed=cfg.seed)

    # GradScaler skips optimizer.step() when it finds inf/NaN gradients; counting the
    # real steps with a hook measures that without adding a line to the loop.
    stepped = [0]
    hook = optimizer.register_step_post_hook(lambda *_: stepped.__setitem__(0, stepped[0] + 1))

    clock, memory = Stopwatch(device), PeakMemory(device)
    torch.manual_seed(cfg.seed)  # dropout draws
    model.train()
    memory.start()
    try:
        with clock:
            if precision.autocast_enabled:
                scaler = mixed_precision_loop(
                    model,
                    train_loader,
                    optimizer,
                    criterion,
                    cfg.epochs,
                    device,
                    precision.autocast_dtype,
                    precision.grad_scaler,
                )
            else:
                single_precision_loop(model, train_loader, optimizer, criterion, cfg.epochs, device)
                scaler = None
    finally:
        memory.stop()
        hook.remove()

    attempted = len(train_loader) * cfg.epochs
    metrics = evaluate(model, eval_loader, device, precision)
    losses = torch.stack(criterion.values).float().tolist() if criterion.values else []
    samples = len(prepared.train_examples) * cfg.epochs
    time_s = clock.elapsed_s
    scaled = scaler is not None and scaler.is_enabled()
    result = RunResult(
        precision=precision.name,
        autocast_dtype=precision.autocast_dtype_name,
        grad_scaler=scaled,
        device=device.type,
        device_name=device_name(device),
        steps=attempted,
        skipped_steps=attempted - stepped[0],
        final_loss_scale=scaler.get_scale() if scaled else None,
        train_time_s=time_s,
        train_samples_per_s=samples / time_s if time_s > 0 else 0.0,
        peak_memory_bytes=memory.peak_bytes,
        peak_memory_kind=memory.kind,
        eval=metrics,
        eval_history=[{"epoch": cfg.epochs, "step": attempted, **metrics}],
        history={"step": list(range(1, len(losses) + 1)), "loss": losses},
        seed=cfg.seed,
        model=prepared.model_description,
        dataset=prepared.dataset_description,
        config={**asdict(cfg), "loop": "readme"},
    )
    del model, optimizer, criterion
    gc.collect()  # release this run's tensors before the next run's memory is measured
    return result


def run_comparison(
    prepared: Prepared, on_start: Callable[[Precision], None] | None = None
) -> tuple[RunResult, RunResult]:
    """Both loops on the same data, seed and initial weights: (fp32 result, AMP result).

    Usage: ``fp32, amp = run_comparison(prepare(ExampleConfig()))``
    """
    results = []
    for precision in (prepared.fp32, prepared.amp):
        if on_start is not None:
            on_start(precision)
        results.append(run_loop(prepared, precision))
    return results[0], results[1]


def _mib(result: RunResult) -> str:
    if result.peak_memory_bytes is None:
        return "n/a"
    return f"{result.peak_memory_bytes / 2**20:.0f}"


def _ratio(num: float | None, den: float | None) -> str:
    if num is None or den is None or den == 0:
        return "n/a"
    return f"{num / den:.2f}×"


def side_by_side(fp32: RunResult, amp: RunResult) -> str:
    """The two runs as a table: metric | fp32 | AMP | AMP vs fp32.

    Usage: ``print(side_by_side(*run_comparison(prepared)))``
    """
    acc32, acc16 = fp32.eval.get("accuracy"), amp.eval.get("accuracy")
    kind = {"cpu_rss": "RSS", "cuda_max_allocated": "allocated"}.get(fp32.peak_memory_kind or "", "")
    amp_name = f"{amp.precision} (AMP)"

    def scale(r: RunResult) -> str:
        return f"{r.final_loss_scale:g}" if r.final_loss_scale is not None else "— (no GradScaler)"

    rows = [
        ("accuracy", f"{acc32:.4f}", f"{acc16:.4f}", f"{(acc16 - acc32) * 100:+.2f} pts"),
        ("eval loss", f"{fp32.eval['loss']:.4f}", f"{amp.eval['loss']:.4f}", ""),
        (
            "train time (s)",
            f"{fp32.train_time_s:.1f}",
            f"{amp.train_time_s:.1f}",
            f"{_ratio(fp32.train_time_s, amp.train_time_s)} speedup",
        ),
        (
            "samples/s",
            f"{fp32.train_samples_per_s:.1f}",
            f"{amp.train_samples_per_s:.1f}",
            _ratio(amp.train_samples_per_s, fp32.train_samples_per_s),
        ),
        (
            f"peak memory (MiB{', ' + kind if kind else ''})",
            _mib(fp32),
            _mib(amp),
            _ratio(amp.peak_memory_bytes, fp32.peak_memory_bytes),
        ),
        ("optimizer steps", str(fp32.steps), str(amp.steps), ""),
        ("skipped steps", str(fp32.skipped_steps), str(amp.skipped_steps), ""),
        ("final loss scale", scale(fp32), scale(amp), ""),
    ]
    header = ("", fp32.precision, amp_name, "AMP vs fp32")
    widths = [max(len(r[i]) for r in (*rows, header)) for i in range(4)]
    fmt = lambda r: f"{r[0]:<{widths[0]}}  {r[1]:>{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]:>{widths[3]}}".rstrip()  # noqa: E731
    return "\n".join([fmt(header), *(fmt(r) for r in rows)])
