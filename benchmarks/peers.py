"""mixft against its peers: the same BERT fine-tune in three frameworks, one process, one after another.

1. ``mixft``      ``build_trainer`` with the ``bert-sst2`` recipe's parts, evaluation off
                  during training.
2. ``hf-trainer`` ``transformers.Trainer``: ``bf16=True`` / ``fp16=True`` (nothing for fp32),
                  ``optimizers=(the recipe's optimizer, the recipe's schedule)``, the recipe's
                  collator and tokenised examples, ``train_sampling_strategy="group_by_length"``
                  (transformers 5's spelling of ``group_by_length=True``: its fastest setting
                  here), no evaluation, ``report_to=[]``, ``save_strategy="no"``, ``use_cpu=True`` on CPU.
   ``hf-trainer-random`` the same with Trainer's default sampling (``"random"``).
   ``hf-trainer-packed`` Trainer with the same packing as mixft: its default random sampling, the
                  recipe's batches packed as mixft packs them (``mixft.data.packing.PackingCollator``)
                  and the model wrapped in ``PackedClsReader``, which reads one [CLS] per sentence
                  through the model's own pooler and head (``mixft.models.packed``'s helpers). The
                  model computes what it computes in every other framework here, so mixft ÷ this is
                  what mixft's loop buys, and this ÷ ``hf-trainer-random`` what packing buys.
3. ``accelerate`` a plain loop under ``Accelerator(mixed_precision="no" | "bf16" | "fp16")`` on
                  the recipe's train loader, optimizer and schedule: ``prepare`` -> forward ->
                  ``accelerator.backward`` -> ``clip_grad_norm_`` -> step -> schedule -> zero_grad.

Held equal, by construction: every framework trains the parts of one ``recipe.build`` call
(the recipe protocol; nothing here knows the recipe's constants): its model (initial
weights compared tensor by tensor with the first run's: ``initial_weights_identical``),
tokenised data, collator and padding, its optimizer factory (param groups, weight decay
per group, lr, fused or not: recorded per run as ``extra["optimizer_groups"]``), its
schedule factory over the same number of steps, batch size, epochs (or ``max_steps``)
and gradient clipping. Not equal, by design: each framework's own sampler (mixft's and
the accelerate loop's ``LengthGroupedBatchSampler``, HF's ``LengthGroupedSampler``) and
its own loop.

Measured per run: wall time of the training call (device-synchronised; mixft ``fit()``,
``hf_trainer.train()``, the accelerate loop with its ``Accelerator`` and ``prepare``; the
optimizers are built before the clock starts), peak memory (CPU: process RSS, which an
earlier run in the same process can leave high: compare with care), samples/s and real
tokens/s from a forward pre-hook counting what each model really computed (so padding
differences show), and accuracy from one shared evaluator (the recipe's eval loader and
``predict_fn``) after training. ``ratio`` is mixft's samples/s divided by the peer's
(> 1: mixft is faster).

Before the timed runs of a precision every framework trains ``warmup_steps`` untimed steps, so
none pays the process's cold start for the others. With ``rounds > 1`` every framework trains
``rounds`` times, in a rotated order each round
(a shared, noisy machine then hurts every framework alike); with several ``seeds`` every
round trains each framework once per seed (the order rotated again). The table shows the
median run by time for speed and, for accuracy, the mean ± standard deviation over the
seeds (one accuracy per seed: a seed's rounds train the same trajectory); the JSON keeps
every run.

Usage::

    report = run_peers(PeersConfig(setup=BertSetup(train_samples=1000)))
    print(peers_table(report))
"""

from __future__ import annotations

import functools
import os
import shutil
import statistics
import tempfile
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch
from torch import nn

from mixft.amp.precision import Precision, amp_precision_names, resolve_device, resolve_precision
from mixft.config.run_config import RunConfig
from mixft.errors import UsageError
from mixft.log import logger
from mixft.models.first_token_encoder import first_token_states, reads_first_tokens_only
from mixft.models.packed import block_diagonal_mask, first_token_places
from mixft.models.positions import first_position
from mixft.recipe import TrainerParts
from mixft.runs.build import build_trainer
from mixft.train.measure import device_name
from mixft.train.optim import planned_steps

from .bert import (
    BertSetup,
    WorkCounter,
    evaluate_accuracy,
    make_optimizer,
    make_scheduler,
    optimizer_groups,
    packing_collator,
    pad_description,
    padding_collator,
    prepare_bert,
    sampling_description,
)
from .timing import TimedRegion, markdown_table, mib, ratio, rotated

FRAMEWORKS = ("mixft", "hf-trainer", "hf-trainer-random", "hf-trainer-packed", "accelerate")


@dataclass
class PeersConfig:
    setup: BertSetup = field(default_factory=BertSetup)
    precisions: list[str] = field(default_factory=lambda: ["fp32", "amp"])
    frameworks: list[str] = field(default_factory=lambda: list(FRAMEWORKS))
    max_steps: int | None = None  # optimizer steps per run; None: the epochs
    rounds: int = 1
    seeds: list[int] | None = None  # None: [setup.seed]; accuracy is reported as mean ± std over them
    # Untimed optimizer steps each framework trains per precision before the timed runs: without them the first
    # framework listed paid the process's cold kernel set-up (mixft ÷ accelerate, bf16, 6 steps: 0.63x listed
    # first, 1.25x listed second). 0 turns it off.
    warmup_steps: int = 2


@dataclass
class PeerRun:
    framework: str
    precision: str
    round: int
    seed: int
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
    seeds: list[int] = field(default_factory=lambda: [0])
    runs: list[PeerRun] = field(default_factory=list)

    def median_run(self, framework: str, precision: str) -> PeerRun:
        """The round with the median time (the lower middle one for an even count)."""
        runs = sorted(
            (r for r in self.runs if r.framework == framework and r.precision == precision), key=lambda r: r.time_s
        )
        if not runs:
            raise KeyError((framework, precision))
        return runs[(len(runs) - 1) // 2]

    def accuracy_over_seeds(self, framework: str, precision: str) -> list[float]:
        """One accuracy per seed (its first round's), in seed order."""
        first: dict[int, float] = {}
        for r in sorted(self.runs, key=lambda r: r.round):
            if r.framework == framework and r.precision == precision:
                first.setdefault(r.seed, r.accuracy)
        return [first[seed] for seed in sorted(first)]

    def summary(self) -> list[dict[str, Any]]:
        """One row per (precision, framework): the median run by time, mixft ÷ it, accuracy over seeds."""
        rows = []
        for precision in dict.fromkeys(r.precision for r in self.runs):
            frameworks = list(dict.fromkeys(r.framework for r in self.runs if r.precision == precision))
            ref = self.median_run("mixft", precision) if "mixft" in frameworks else None
            ref_acc = self.accuracy_over_seeds("mixft", precision) if ref else None
            for fw in frameworks:
                run = self.median_run(fw, precision)
                times = [r.time_s for r in self.runs if r.framework == fw and r.precision == precision]
                acc = self.accuracy_over_seeds(fw, precision)
                mean = statistics.mean(acc)
                rows.append(
                    {
                        **asdict(run),
                        "rounds_time_s": times,
                        "accuracy_per_seed": acc,
                        "accuracy_mean": mean,
                        "accuracy_std": statistics.stdev(acc) if len(acc) > 1 else None,
                        "mixft_ratio": ratio(ref.samples_per_s, run.samples_per_s) if ref else None,
                        "accuracy_gap_pts": (statistics.mean(ref_acc) - mean) * 100 if ref else None,
                        "padding_efficiency": run.real_tokens / run.padded_tokens if run.padded_tokens else None,
                    }
                )
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


class PackedClsReader(nn.Module):
    """``transformers.Trainer``'s model for packed batches: one [CLS] per sentence, through the model's own pooler and head.

    Wraps a classifier made of ``encoder`` (a Hugging Face encoder, its ``pooler`` optional),
    ``dropout`` and ``classifier`` (the head), as ``BertClassifier`` is: what a Trainer user adds to
    train on mixft's packed rows, from mixft's public helpers (``mixft.models.packed``,
    ``mixft.models.positions``): attention within each sentence (a block-diagonal mask), positions
    restarting at each sentence (the batch's ``position_ids``, in the encoder's own numbering),
    each sentence's first token read out. Where the encoder allows it
    the last layer computes those tokens only (``mixft.models.first_token_encoder``), as in every
    other framework here: the model's work is held equal. Returns ``{"logits", "loss"}`` with the
    recipe's loss, like ``LossOutputModel``.

    Usage: ``Trainer(model=PackedClsReader(parts.model, parts.loss_fn), data_collator=PackingCollator(...))``
    """

    def __init__(self, classifier: nn.Module, loss_fn):
        super().__init__()
        self.encoder = classifier.encoder
        self.pooler = getattr(classifier.encoder, "pooler", None)
        self.dropout = classifier.dropout
        self.head = classifier.classifier
        self.loss_fn = loss_fn

    def forward(
        self, input_ids, attention_mask=None, token_type_ids=None, position_ids=None, sequence_ids=None, labels=None
    ):
        config = self.encoder.config
        mask = block_diagonal_mask(sequence_ids, getattr(config, "_attn_implementation", None))
        rows, positions = first_token_places(sequence_ids, position_ids)  # each sentence counts from 0
        own = position_ids + first_position(config)  # the encoder's numbering (RoBERTa-likes: from 2)
        if reads_first_tokens_only(self.encoder):
            cls = first_token_states(self.encoder, input_ids, mask, token_type_ids, own, rows, positions)
        else:
            hidden = self.encoder(
                input_ids=input_ids, attention_mask=mask, token_type_ids=token_type_ids, position_ids=own
            ).last_hidden_state
            cls = hidden[rows, positions]
        pooled = self.pooler(cls[:, None]) if self.pooler is not None else cls  # the pooler reads position 0
        logits = self.head(self.dropout(pooled)).squeeze(-1)
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = self.loss_fn(logits, labels)
        return out


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
# Each returns (settings, train, counted): the untimed set-up (model on the device, the recipe's
# optimizer and schedule, the HF Trainer object) is done here; ``train()`` is the timed part
# and returns extra facts, among them the param groups the optimizer really stepped; ``counted``
# is the module whose forward takes the framework's batches (where WorkCounter listens).


def _optimizer_words(optimizer: torch.optim.Optimizer) -> str:
    return f"{type(optimizer).__name__} fused={bool(optimizer.defaults.get('fused'))}"


def _setup_mixft(cfg: RunConfig, parts: TrainerParts, precision: Precision, device, seed: int):
    # Evaluation off during training: every framework is scored by the same evaluator after.
    trainer = build_trainer(replace(parts, eval_loader=None), cfg, precision=precision, device=device, seed=seed)

    def train() -> dict:
        trainer.fit()
        return {
            "steps": trainer.state.step,
            "skipped_steps": trainer.state.skipped_steps,
            "optimizer_groups": optimizer_groups(trainer.optimizer, parts.model),
        }

    pad = pad_description(parts.train_loader.collate_fn)
    return f"{sampling_description(cfg)}, pad {pad}, {_optimizer_words(trainer.optimizer)}", train, parts.model


def _setup_hf(
    cfg: RunConfig,
    parts: TrainerParts,
    precision: Precision,
    device,
    seed: int,
    sampling: str = "group_by_length",
    packed: bool = False,
):
    """``sampling``: ``"group_by_length"`` (Trainer's fastest here) or ``"random"`` (its default).
    ``packed``: batches packed as mixft packs them, read by ``PackedClsReader``."""
    from transformers import PrinterCallback, TrainingArguments
    from transformers import Trainer as HFTrainer

    model = parts.model.to(device)  # before the optimizer: its state must be for these tensors
    optimizer = make_optimizer(parts, model)
    total = planned_steps(len(parts.train_loader), cfg.grad_accum, cfg.epochs, cfg.max_steps)
    scheduler = make_scheduler(parts, optimizer, total)
    out = tempfile.mkdtemp(prefix="mixft-hf-")  # save_strategy="no": stays empty
    args = TrainingArguments(
        output_dir=out,
        per_device_train_batch_size=cfg.batch_size,
        gradient_accumulation_steps=cfg.grad_accum,
        num_train_epochs=cfg.epochs,
        max_steps=cfg.max_steps or -1,
        max_grad_norm=cfg.clip_norm or 0.0,
        bf16=precision.autocast_dtype == torch.bfloat16,
        fp16=precision.autocast_dtype == torch.float16,
        train_sampling_strategy=sampling,
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
    # lr, weight decay and warm-up live in the recipe's optimizer and schedule, handed over
    # whole: TrainingArguments' own optimizer settings are then unused.
    if packed:
        wrapped, collate = PackedClsReader(model, parts.loss_fn), packing_collator(parts.train_loader.collate_fn)
    else:
        # Trainer's own batches: padded (a packed batch needs a model that reads sequence_ids).
        wrapped, collate = LossOutputModel(model, parts.loss_fn), padding_collator(parts.train_loader.collate_fn)
    hf = HFTrainer(
        model=wrapped,
        args=args,
        train_dataset=parts.train_loader.dataset,
        data_collator=collate,
        optimizers=(optimizer, scheduler),
    )
    hf.remove_callback(PrinterCallback)  # it prints the final metrics; the library does not print

    def train() -> dict:
        try:
            output = hf.train()
        finally:
            shutil.rmtree(out, ignore_errors=True)
        return {
            "steps": hf.state.global_step,
            "hf_train_runtime_s": output.metrics.get("train_runtime"),
            "optimizer_groups": optimizer_groups(hf.optimizer, model),
        }

    flag = {torch.bfloat16: "bf16=True", torch.float16: "fp16=True"}.get(precision.autocast_dtype, "no AMP flag")
    pad = pad_description(collate) + (", PackedClsReader" if packed else "")
    words = f"{flag}, {sampling}, pad {pad}, optimizers=(recipe's {_optimizer_words(optimizer)}, schedule)"
    # The wrapper reads the packed rows itself: its forward is where the batches arrive.
    return words, train, (wrapped if packed else model)


def _setup_accelerate(cfg: RunConfig, parts: TrainerParts, precision: Precision, device, seed: int):
    from accelerate import Accelerator

    mixed = {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(precision.autocast_dtype, "no")
    model = parts.model.to(device)  # before the optimizer: its state must be for these tensors
    optimizer = make_optimizer(parts, model)
    loader = parts.train_loader
    sampler = loader.batch_sampler
    total = planned_steps(len(loader), cfg.grad_accum, cfg.epochs, cfg.max_steps)
    scheduler = make_scheduler(parts, optimizer, total)

    def train() -> dict:
        accelerator = Accelerator(mixed_precision=mixed, cpu=device.type == "cpu")
        wrapped, opt, batches, sched = accelerator.prepare(model, optimizer, loader, scheduler)
        torch.manual_seed(seed)
        wrapped.train()
        step = 0
        for epoch in range(cfg.epochs):
            if hasattr(sampler, "set_epoch"):
                sampler.set_epoch(epoch)
            for batch in batches:
                labels = batch.pop("labels")
                logits = wrapped(**batch)  # prepare() wrapped forward in autocast
                loss = parts.loss_fn(logits, labels)
                accelerator.backward(loss)
                if cfg.clip_norm:
                    accelerator.clip_grad_norm_(wrapped.parameters(), cfg.clip_norm)
                opt.step()
                if sched is not None:
                    sched.step()
                opt.zero_grad(set_to_none=True)
                step += 1
                if cfg.max_steps and step >= cfg.max_steps:
                    break
            if cfg.max_steps and step >= cfg.max_steps:
                break
        accelerator.unwrap_model(wrapped, keep_fp32_wrapper=False)  # evaluation applies its own autocast
        return {"steps": step, "optimizer_groups": optimizer_groups(opt, model)}

    pad = pad_description(loader.collate_fn)
    words = (
        f'mixed_precision="{mixed}", {sampling_description(cfg)}, pad {pad}, recipe\'s {_optimizer_words(optimizer)}'
    )
    return words, train, model


_SETUP = {
    "mixft": _setup_mixft,
    "hf-trainer": _setup_hf,
    "hf-trainer-random": functools.partial(_setup_hf, sampling="random"),
    "hf-trainer-packed": functools.partial(_setup_hf, sampling="random", packed=True),
    "accelerate": _setup_accelerate,
}


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
    bert = prepare_bert(setup, device=str(dev), max_steps=cfg.max_steps)
    run_cfg = bert.cfg
    seeds = list(cfg.seeds) if cfg.seeds else [setup.seed]
    report = PeersReport(
        device=str(dev),
        device_name=device_name(dev),
        model="",
        dataset="",
        batch_size=run_cfg.batch_size,
        epochs=run_cfg.epochs,
        max_steps=cfg.max_steps,
        lr=run_cfg.lr,
        rounds=cfg.rounds,
        seeds=seeds,
    )
    references: dict[int, dict[str, torch.Tensor]] = {}  # per seed: the first run's initial weights
    warm_cfg = replace(run_cfg, max_steps=cfg.warmup_steps) if cfg.warmup_steps else None
    for precision in precisions:
        for fw in cfg.frameworks if warm_cfg is not None else ():  # untimed: every framework starts warm
            parts = bert.recipe.build(warm_cfg, bert.prepared, precision, dev, seeds[0])
            _reset_accelerate_state()
            logger.info("peers: %s %s warm-up (%d steps, untimed)", fw, precision.name, cfg.warmup_steps)
            _one_run(fw, warm_cfg, parts, precision, dev, seeds[0], -1, True)
            del parts
        for rnd in range(cfg.rounds):
            for i, seed in enumerate(seeds):
                for fw in rotated(cfg.frameworks, rnd * len(seeds) + i):
                    # A fresh recipe build per run: the same seed gives the same weights and data order.
                    parts = bert.recipe.build(run_cfg, bert.prepared, precision, dev, seed)
                    report.model = report.model or parts.run_info.get("model", "")
                    report.dataset = report.dataset or parts.run_info.get("dataset", "")
                    model = parts.model
                    reference = references.setdefault(seed, state_fingerprint(model))
                    identical = same_state(model, reference)
                    _reset_accelerate_state()
                    logger.info("peers: %s %s round %d seed %d", fw, precision.name, rnd + 1, seed)
                    report.runs.append(_one_run(fw, run_cfg, parts, precision, dev, seed, rnd, identical))
                    del model, parts
        _reset_accelerate_state()
    return report


def _one_run(
    fw: str, run_cfg: RunConfig, parts: TrainerParts, precision: Precision, dev, seed: int, rnd: int, identical: bool
) -> PeerRun:
    """Train ``fw`` on ``parts`` (timed), then score it with the shared evaluator."""
    model = parts.model
    settings, train, counted = _SETUP[fw](run_cfg, parts, precision, dev, seed)
    with WorkCounter(counted) as work, TimedRegion(dev) as region:
        extra = train()
    counts = work.totals()
    accuracy = evaluate_accuracy(model, parts.eval_loader, parts.predict_fn, precision, dev)
    return PeerRun(
        framework=fw,
        precision=precision.name,
        round=rnd + 1,
        seed=seed,
        settings=settings,
        initial_weights_identical=identical,
        time_s=region.elapsed_s,
        samples=counts["samples"],
        real_tokens=counts["real_tokens"],
        padded_tokens=counts["padded_tokens"],
        samples_per_s=counts["samples"] / region.elapsed_s,
        tokens_per_s=counts["real_tokens"] / region.elapsed_s,
        peak_memory_bytes=region.peak_bytes,
        peak_memory_kind=region.memory_kind,
        accuracy=accuracy,
        torch_threads=torch.get_num_threads(),
        load_avg_1m=_load_avg(),
        extra=extra,
    )


def _load_avg() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def _accuracy_words(row: dict[str, Any]) -> str:
    if row["accuracy_std"] is None:
        return f"{row['accuracy_mean']:.4f}"
    return f"{row['accuracy_mean']:.4f} ± {row['accuracy_std']:.4f} ({len(row['accuracy_per_seed'])} seeds)"


def peers_table(report: PeersReport) -> str:
    headers = [
        "precision",
        "framework",
        "samples/s",
        "tokens/s (real)",
        "time (s)",
        "peak memory",
        "accuracy",
        "mixft ÷ this (throughput)",
        "mixft − this (acc. pts)",
        "padding eff.",
        "same init",
        "threads",
        "load (1 min)",
        "settings",
    ]
    rows = []
    for r in report.summary():
        rows.append(
            [
                r["precision"],
                r["framework"],
                f"{r['samples_per_s']:.1f}",
                f"{r['tokens_per_s']:.0f}",
                f"{r['time_s']:.2f}"
                + (
                    f" (runs: {', '.join(f'{t:.1f}' for t in r['rounds_time_s'])})"
                    if len(r["rounds_time_s"]) > 1
                    else ""
                ),
                f"{mib(r['peak_memory_bytes'])} ({r['peak_memory_kind']})",
                _accuracy_words(r),
                f"{r['mixft_ratio']:.2f}x" if r["mixft_ratio"] is not None else "n/a",
                f"{r['accuracy_gap_pts']:+.2f}" if r["accuracy_gap_pts"] is not None else "n/a",
                f"{r['padding_efficiency']:.2f}" if r["padding_efficiency"] is not None else "n/a",
                "yes"
                if all(
                    x.initial_weights_identical
                    for x in report.runs
                    if x.framework == r["framework"] and x.precision == r["precision"]
                )
                else "NO",
                r["torch_threads"],
                f"{r['load_avg_1m']:.1f}" if r["load_avg_1m"] is not None else "n/a",
                r["settings"],
            ]
        )
    budget = f"{report.max_steps} steps" if report.max_steps else f"{report.epochs} epoch(s)"
    seeds = ", ".join(str(s) for s in report.seeds)
    head = (
        f"mixft vs peers on {report.device_name} [{report.device}]: {report.model}, {report.dataset}, "
        f"batch {report.batch_size}, {budget}, lr {report.lr:g}, {report.rounds} round(s) x seeds {seeds} "
        "(speed: the median run by time; accuracy: mean ± std over the seeds)"
    )
    return head + "\n\n" + markdown_table(headers, rows)
