"""mixft against its peers: the same BERT fine-tune in three frameworks, one process, one after another.

1. ``mixft``      mixft's ``Trainer`` with the ``bert-sst2`` recipe's parts (its loaders and
                  fused AdamW), evaluation off during training.
2. ``hf-trainer`` ``transformers.Trainer``: ``bf16=True`` / ``fp16=True`` (nothing for fp32),
                  ``DataCollatorWithPadding``, ``train_sampling_strategy="group_by_length"``
                  (transformers 5's spelling of ``group_by_length=True``),
                  ``optim="adamw_torch_fused"`` where the device has it, no evaluation,
                  ``report_to=[]``, ``save_strategy="no"``, ``use_cpu=True`` on CPU.
3. ``accelerate`` a plain loop under ``Accelerator(mixed_precision="no" | "bf16" | "fp16")`` on
                  the recipe's loaders: ``prepare`` -> forward -> ``accelerator.backward`` ->
                  ``clip_grad_norm_`` -> step -> schedule -> zero_grad.

Held equal: initial weights (``build_model(path, seed)`` for each, compared tensor by tensor
with the first: ``initial_weights_identical``), tokenised data, batch size, epochs (or
``max_steps``), lr, weight decay, linear warm-up (the same integer number of steps),
gradient clipping, AdamW (fused where available), padding policy (the recipe's, for all
three: multiples of 8 under mixed precision on CUDA, for tensor cores; the batch's longest
otherwise, on CPU at every precision). Not equal, by design:
each framework's own sampler (mixft's ``LengthGroupedBatchSampler``, HF's
``LengthGroupedSampler``) and its own loop.

Measured per run: wall time of the training call (device-synchronised; mixft ``fit()``,
``hf_trainer.train()``, the accelerate loop), peak memory (CPU: process RSS, which an
earlier run in the same process can leave high: compare with care), samples/s and real
tokens/s from a forward pre-hook counting what each model really computed (so padding
differences show), and accuracy from one shared evaluator on one eval set after training.
``ratio`` is mixft's samples/s divided by the peer's (> 1: mixft is faster).

With ``rounds > 1`` every framework trains ``rounds`` times, in a rotated order each round
(a shared, noisy machine then hurts every framework alike); the table shows the median
round by time and the JSON keeps every round.

Usage::

    report = run_peers(PeersConfig(setup=BertSetup(train_samples=1000)))
    print(peers_table(report))
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from mixft.errors import UsageError
from mixft.log import logger
from mixft.measure import device_name
from mixft.precision import Precision, amp_precision_names, resolve_device, resolve_precision
from mixft.speed import SpeedOptions, fused_adamw_available
from mixft.trainer import Trainer

from .bert import BertSetup, PreparedBert, WorkCounter, evaluate_accuracy, eval_loader, pad_multiple, prepare_bert
from .timing import TimedRegion, markdown_table, mib, ratio, rotated

FRAMEWORKS = ("mixft", "hf-trainer", "accelerate")
WARMUP_FRACTION = 0.1
WEIGHT_DECAY = 0.01


@dataclass
class PeersConfig:
    setup: BertSetup = field(default_factory=BertSetup)
    precisions: list[str] = field(default_factory=lambda: ["fp32", "amp"])
    frameworks: list[str] = field(default_factory=lambda: list(FRAMEWORKS))
    max_steps: int | None = None  # optimizer steps per run; None: the epochs
    rounds: int = 1


@dataclass
class PeerRun:
    framework: str
    precision: str
    round: int
    settings: str  # what this framework ran with, in words
    initial_weights_identical: bool
    time_s: float
    samples: int
    real_tokens: int
    padded_tokens: int
    samples_per_s: float
    tokens_per_s: float
    peak_memory_bytes: int | None
    peak_memory_kind: str
    accuracy: float
    torch_threads: int  # torch.get_num_threads() right after training
    load_avg_1m: float | None  # os.getloadavg()[0] at the end: how shared the machine was
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class PeersReport:
    device: str
    device_name: str
    model: str
    dataset: str
    batch_size: int
    epochs: int
    max_steps: int | None
    lr: float
    rounds: int
    runs: list[PeerRun] = field(default_factory=list)

    def median_run(self, framework: str, precision: str) -> PeerRun:
        """The round with the median time (the lower middle one for an even count)."""
        runs = sorted((r for r in self.runs if r.framework == framework and r.precision == precision),
                      key=lambda r: r.time_s)
        if not runs:
            raise KeyError((framework, precision))
        return runs[(len(runs) - 1) // 2]

    def summary(self) -> list[dict[str, Any]]:
        """One row per (precision, framework): the median round, mixft ÷ it, Δaccuracy."""
        rows = []
        for precision in dict.fromkeys(r.precision for r in self.runs):
            frameworks = list(dict.fromkeys(r.framework for r in self.runs if r.precision == precision))
            ref = self.median_run("mixft", precision) if "mixft" in frameworks else None
            for fw in frameworks:
                run = self.median_run(fw, precision)
                times = [r.time_s for r in self.runs if r.framework == fw and r.precision == precision]
                rows.append({
                    **asdict(run),
                    "rounds_time_s": times,
                    "mixft_ratio": ratio(ref.samples_per_s, run.samples_per_s) if ref else None,
                    "accuracy_gap_pts": (ref.accuracy - run.accuracy) * 100 if ref else None,
                    "padding_efficiency": run.real_tokens / run.padded_tokens if run.padded_tokens else None,
                })
        return rows

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "summary": self.summary()}


def check_frameworks(text: str) -> list[str]:
    """``"mixft,hf-trainer"`` -> the list; an unknown name is a UsageError (before any work)."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names or any(n not in FRAMEWORKS for n in names):
        raise UsageError(f"--frameworks must list some of {', '.join(FRAMEWORKS)}, got {text!r}")
    return list(dict.fromkeys(names))


class LossOutputModel(nn.Module):
    """``transformers.Trainer`` expects ``model(**batch)`` to return the loss when labels are given.

    Wraps a ``BertClassifier``: returns ``{"loss", "logits"}`` with the recipe's loss
    (BCE-with-logits: autocast-safe, computed in fp32 under autocast).
    """

    def __init__(self, classifier: nn.Module, loss_fn):
        super().__init__()
        self.classifier = classifier
        self.loss_fn = loss_fn

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None):
        logits = self.classifier(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = self.loss_fn(logits, labels)
        return out


def planned_steps(n_train: int, batch_size: int, epochs: int, max_steps: int | None) -> int:
    total = math.ceil(n_train / batch_size) * epochs
    return min(total, max_steps) if max_steps else total


def state_fingerprint(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def same_state(model: nn.Module, reference: dict[str, torch.Tensor]) -> bool:
    state = model.state_dict()
    return state.keys() == reference.keys() and all(torch.equal(state[k].cpu(), reference[k].cpu()) for k in reference)


def _reset_accelerate_state() -> None:
    # Accelerator state is a process-wide singleton that refuses a second, different
    # mixed_precision; each run here (HF Trainer builds an Accelerator too) starts clean.
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()


# ----------------------------------------------------------------------------- frameworks
# Each returns (settings, train): the untimed set-up (loaders, the HF Trainer object) is done
# here; ``train()`` is the timed part and returns extra facts. What each ``train()`` covers:
# mixft: Trainer construction (its optimizer factory) + fit(); hf-trainer: train() (which
# builds its optimizer, scheduler and dataloader); accelerate: Accelerator + prepare + loop.


def _setup_mixft(bert: PreparedBert, model, precision: Precision, device, max_steps, seed):
    parts = bert.recipe.build(bert.cfg, bert.prepared, precision, device, seed)
    parts.model = None  # the recipe built its own copy; train the shared-init model instead
    pad = pad_multiple(precision, device) or "longest"
    fused = fused_adamw_available(device)

    def train() -> dict:
        trainer = Trainer(
            model, parts.optimizer, parts.loss_fn, parts.train_loader, eval_loader=None, precision=precision,
            device=device, lr_scheduler=parts.lr_scheduler, max_grad_norm=bert.cfg.clip_norm,
            epochs=bert.cfg.epochs, max_steps=max_steps, seed=seed,
        )
        trainer.fit()
        return {"steps": trainer.state.step, "skipped_steps": trainer.state.skipped_steps}

    switches = ", ".join(k for k, on in SpeedOptions().to_dict().items() if on)
    return f"LengthGroupedBatchSampler, pad {pad}, AdamW fused={fused}, speed switches: {switches}", train


def _setup_hf(bert: PreparedBert, model, precision: Precision, device, max_steps, seed):
    from transformers import DataCollatorWithPadding, PrinterCallback, TrainingArguments
    from transformers import Trainer as HFTrainer

    cfg, p = bert.cfg, bert.prepared
    fused = fused_adamw_available(device)
    total = planned_steps(len(p.train_examples), cfg.batch_size, cfg.epochs, max_steps)
    out = tempfile.mkdtemp(prefix="mixft-hf-")  # save_strategy="no": stays empty
    args = TrainingArguments(
        output_dir=out,
        per_device_train_batch_size=cfg.batch_size,
        num_train_epochs=cfg.epochs,
        max_steps=max_steps or -1,
        learning_rate=cfg.lr,
        weight_decay=WEIGHT_DECAY,
        warmup_steps=int(WARMUP_FRACTION * total),  # the same integer as the recipe's schedule
        lr_scheduler_type="linear",
        max_grad_norm=cfg.clip_norm or 0.0,
        bf16=precision.autocast_dtype == torch.bfloat16,
        fp16=precision.autocast_dtype == torch.float16,
        optim="adamw_torch_fused" if fused else "adamw_torch",
        train_sampling_strategy="group_by_length",
        eval_strategy="no",
        save_strategy="no",
        logging_strategy="no",
        report_to=[],
        use_cpu=device.type == "cpu",
        dataloader_pin_memory=device.type == "cuda",
        dataloader_num_workers=0,
        disable_tqdm=True,
        seed=seed,
    )
    collator = DataCollatorWithPadding(p.tokenizer, pad_to_multiple_of=pad_multiple(precision, device), return_tensors="pt")
    hf = HFTrainer(
        model=LossOutputModel(model, bert.recipe.loss_fn), args=args, train_dataset=p.train_examples,
        data_collator=collator, processing_class=p.tokenizer,
    )
    hf.remove_callback(PrinterCallback)  # it prints the final metrics; the library does not print

    def train() -> dict:
        try:
            output = hf.train()
        finally:
            shutil.rmtree(out, ignore_errors=True)
        return {"steps": hf.state.global_step, "hf_train_runtime_s": output.metrics.get("train_runtime")}

    pad = pad_multiple(precision, device) or "longest"
    flag = {torch.bfloat16: "bf16=True", torch.float16: "fp16=True"}.get(precision.autocast_dtype, "no AMP flag")
    optim = getattr(args.optim, "value", args.optim)
    return f"{flag}, group_by_length, pad {pad}, optim={optim}", train


def _setup_accelerate(bert: PreparedBert, model, precision: Precision, device, max_steps, seed):
    from accelerate import Accelerator
    from transformers import get_linear_schedule_with_warmup

    from mixft.data.text import make_loader

    cfg, p = bert.cfg, bert.prepared
    mixed = {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(precision.autocast_dtype, "no")
    loader = make_loader(p.train_examples, p.tokenizer, cfg.batch_size, shuffle=True, seed=seed,
                         pad_to_multiple_of=pad_multiple(precision, device), pin_memory=device.type == "cuda")
    sampler = loader.batch_sampler
    fused = fused_adamw_available(device)
    total = planned_steps(len(p.train_examples), cfg.batch_size, cfg.epochs, max_steps)
    loss_fn = bert.recipe.loss_fn

    def train() -> dict:
        nonlocal model, loader
        accelerator = Accelerator(mixed_precision=mixed, cpu=device.type == "cpu")
        model = model.to(accelerator.device)  # before the optimizer: its state must be for these tensors
        optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=WEIGHT_DECAY, fused=fused)
        scheduler = get_linear_schedule_with_warmup(optimizer, int(WARMUP_FRACTION * total), total)
        model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
        torch.manual_seed(seed)
        model.train()
        step = 0
        for epoch in range(cfg.epochs):
            sampler.set_epoch(epoch)
            for batch in loader:
                labels = batch.pop("labels")
                logits = model(**batch)  # prepare() wrapped forward in autocast
                loss = loss_fn(logits, labels)
                accelerator.backward(loss)
                if cfg.clip_norm:
                    accelerator.clip_grad_norm_(model.parameters(), cfg.clip_norm)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                step += 1
                if max_steps and step >= max_steps:
                    break
            if max_steps and step >= max_steps:
                break
        accelerator.unwrap_model(model, keep_fp32_wrapper=False)  # evaluation applies its own autocast
        return {"steps": step}

    pad = pad_multiple(precision, device) or "longest"
    return f'mixed_precision="{mixed}", LengthGroupedBatchSampler, pad {pad}, AdamW fused={fused}', train


_SETUP = {"mixft": _setup_mixft, "hf-trainer": _setup_hf, "accelerate": _setup_accelerate}


# ----------------------------------------------------------------------------- driver
def run_peers(cfg: PeersConfig) -> PeersReport:
    """Train every (precision, framework) ``rounds`` times in this process; return all measurements."""
    unknown = [f for f in cfg.frameworks if f not in _SETUP]
    if unknown:
        raise ValueError(f"unknown framework(s) {unknown}; choose from {list(_SETUP)}")
    if cfg.rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {cfg.rounds}")
    setup = cfg.setup
    dev = resolve_device(setup.device)
    names = [amp_precision_names(dev)[0] if n == "amp" else n for n in cfg.precisions]
    precisions = [resolve_precision(n, dev) for n in dict.fromkeys(names)]
    bert = prepare_bert(setup, device=str(dev))
    report = PeersReport(
        device=str(dev), device_name=device_name(dev), model=bert.prepared.model_description,
        dataset=bert.prepared.dataset_description, batch_size=bert.cfg.batch_size, epochs=bert.cfg.epochs,
        max_steps=cfg.max_steps, lr=bert.cfg.lr, rounds=cfg.rounds,
    )
    reference: dict[str, torch.Tensor] | None = None
    for precision in precisions:
        evaluation = eval_loader(bert, precision, dev)
        for rnd in range(cfg.rounds):
            for fw in rotated(cfg.frameworks, rnd):
                model = bert.recipe.build_model(bert.prepared.model_path, setup.seed)
                if reference is None:
                    reference = state_fingerprint(model)
                identical = same_state(model, reference)
                _reset_accelerate_state()
                logger.info("peers: %s %s round %d", fw, precision.name, rnd + 1)
                settings, train = _SETUP[fw](bert, model, precision, dev, cfg.max_steps, setup.seed)
                with WorkCounter(model) as work, TimedRegion(dev) as region:
                    extra = train()
                counts = work.totals()
                accuracy = evaluate_accuracy(model, evaluation, precision, dev)
                report.runs.append(PeerRun(
                    framework=fw, precision=precision.name, round=rnd + 1, settings=settings,
                    initial_weights_identical=identical, time_s=region.elapsed_s, samples=counts["samples"],
                    real_tokens=counts["real_tokens"], padded_tokens=counts["padded_tokens"],
                    samples_per_s=counts["samples"] / region.elapsed_s,
                    tokens_per_s=counts["real_tokens"] / region.elapsed_s,
                    peak_memory_bytes=region.peak_bytes, peak_memory_kind=region.memory_kind, accuracy=accuracy,
                    torch_threads=torch.get_num_threads(), load_avg_1m=_load_avg(), extra=extra,
                ))
                del model
        _reset_accelerate_state()
    return report


def _load_avg() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def peers_table(report: PeersReport) -> str:
    headers = ["precision", "framework", "samples/s", "tokens/s (real)", "time (s)", "peak memory", "accuracy",
               "mixft ÷ this (throughput)", "mixft − this (acc. pts)", "padding eff.", "same init",
               "threads", "load (1 min)", "settings"]
    rows = []
    for r in report.summary():
        rows.append([
            r["precision"], r["framework"], f"{r['samples_per_s']:.1f}", f"{r['tokens_per_s']:.0f}",
            f"{r['time_s']:.2f}" + (f" (rounds: {', '.join(f'{t:.1f}' for t in r['rounds_time_s'])})"
                                    if len(r["rounds_time_s"]) > 1 else ""),
            f"{mib(r['peak_memory_bytes'])} ({r['peak_memory_kind']})", f"{r['accuracy']:.4f}",
            f"{r['mixft_ratio']:.2f}x" if r["mixft_ratio"] is not None else "n/a",
            f"{r['accuracy_gap_pts']:+.1f}" if r["accuracy_gap_pts"] is not None else "n/a",
            f"{r['padding_efficiency']:.2f}" if r["padding_efficiency"] is not None else "n/a",
            "yes" if r["initial_weights_identical"] else "NO", r["torch_threads"],
            f"{r['load_avg_1m']:.1f}" if r["load_avg_1m"] is not None else "n/a", r["settings"],
        ])
    budget = f"{report.max_steps} steps" if report.max_steps else f"{report.epochs} epoch(s)"
    head = (f"mixft vs peers on {report.device_name} [{report.device}]: {report.model}, {report.dataset}, "
            f"batch {report.batch_size}, {budget}, lr {report.lr:g}, {report.rounds} round(s) (median shown)")
    return head + "\n\n" + markdown_table(headers, rows)
