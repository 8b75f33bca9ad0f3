#!/usr/bin/env python
"""The README example, corrected and measured: its FP32 loop and its AMP loop, side by side.

The README shows a BERT classifier and two training loops, single and mixed precision.
As written it does not run (three bugs, :data:`BUGS`), and once they are fixed the
mixed-precision loop meets the autocast trap (:data:`AUTOCAST_TRAP`): sigmoid + ``BCELoss``.
This module keeps the two loops as real functions (:func:`single_precision_loop`,
:func:`mixed_precision_loop`), corrected and otherwise as the README has them; the diff
the script prints is taken from their source, so it is exactly the code that runs.

Usage::

    python examples/readme_example.py                 # offline defaults, minutes on a laptop CPU
    python examples/readme_example.py --model bert-base-uncased --data-dir glue/SST-2 --epochs 5

(``scripts/readme_example.py`` is the same entry point) or in Python, from the repository root::

    from examples.readme_example import ExampleConfig, prepare, run_comparison
    fp32, amp = run_comparison(prepare(ExampleConfig(max_train_samples=200)))

Both loops are measured the same way (mixft's device-synchronised Stopwatch and
PeakMemory around the call, the same evaluation afterwards) and come back as
:class:`~mixft.results.RunResult`, like the Trainer's runs.
"""

from __future__ import annotations

import argparse
import copy
import difflib
import gc
import inspect
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mixft.amp.precision import Precision, precision_notice, resolve_device, resolve_precision
from mixft.errors import UsageError
from mixft.log import logger
from mixft.models.classifiers import BertClassifier
from mixft.results import RunResult
from mixft.train.measure import PeakMemory, Stopwatch, device_name

PROG = "readme_example.py"
README_EPOCHS = 5  # what the README trains for; the default here is smaller, see ExampleConfig
README_LR = 2e-5

# ---------------------------------------------------------------------------------------
# What is wrong with the README code, and why
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bug:
    title: str
    readme: str  # the README's line
    fix: str  # what mixft does instead
    why: str  # one line


BUGS: tuple[Bug, ...] = (
    Bug(
        "hidden size",
        "self.linear = nn.Linear(512, 1)",
        "nn.Linear(encoder.config.hidden_size, 1)",
        "bert-base-uncased is 768 wide (the shipped MiniLM 384); a hard-coded 512 fails with a shape error",
    ),
    Bug(
        "model outputs",
        "_, pooled = self.bert(input_ids, attention_mask)",
        "out = self.bert(input_ids=..., attention_mask=...); pooled = out.pooler_output",
        "outputs are a ModelOutput, and unpacking one yields its *keys*, so `pooled` is the string "
        "'pooler_output'; pass the mask by keyword too, positions are not a documented contract",
    ),
    Bug(
        "loss module",
        "criterion = torch.loss.BCELoss()",
        "criterion = nn.BCEWithLogitsLoss()",
        "there is no torch.loss (losses live in torch.nn); and see the autocast trap for why not BCELoss",
    ),
)

AUTOCAST_TRAP = (
    "sigmoid + BCELoss under autocast: CUDA autocast refuses binary_cross_entropy ('unsafe to "
    "autocast'), because in fp16 the sigmoid rounds to exactly 0 or 1 and BCELoss then takes log(0). "
    "CPU autocast (torch 2.13) does not refuse: it runs BCELoss in fp32 on the already-rounded "
    "probability, so the loss is clamped at 100 and the gradient is NaN (fp16) or 0 (bf16). "
    "Fix: return logits and use BCEWithLogitsLoss (autocast runs it in fp32, as one stable log-sum-exp); "
    "apply the sigmoid only for predictions."
)

#: The README's model, as written (it loads the encoder itself; here the encoder is passed in).
README_MODEL_CODE = """\
class ClassificationModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.bert = AutoModel.from_pretrained('bert-base-uncased')
        self.dropout = nn.Dropout(0.1)
        self.linear = nn.Linear(512, 1)
        self.sigmoid = nn.Sigmoid()
    def forward(self, input_ids, attention_mask):
        _, pooled = self.bert(input_ids, attention_mask)
        return self.sigmoid(self.linear(self.dropout(pooled)))
criterion = torch.loss.BCELoss()"""


class ReadmeModelAsWritten(nn.Module):
    """The README's ``ClassificationModel`` line for line, bugs included (for showing them).

    Usage: ``ReadmeModelAsWritten(AutoModel.from_pretrained(path))(ids, mask)`` raises.
    """

    def __init__(self, encoder: nn.Module):
        super().__init__()
        self.bert = encoder
        self.dropout = nn.Dropout(0.1)
        self.linear = nn.Linear(512, 1)
        self.sigmoid = nn.Sigmoid()

    def forward(self, input_ids, attention_mask):
        _, pooled = self.bert(input_ids, attention_mask)
        return self.sigmoid(self.linear(self.dropout(pooled)))


class TupleOutputs(nn.Module):
    """An encoder that returns plain tuples, as transformers did when the README was written.

    With it the README's ``_, pooled = ...`` unpacks as intended, which is what lets the
    next bug (the 512-wide Linear) show.
    """

    def __init__(self, encoder: nn.Module):
        super().__init__()
        self.encoder = encoder

    def forward(self, *args, **kwargs):
        return self.encoder(*args, return_dict=False, **kwargs)


@dataclass(frozen=True)
class BugReport:
    bug: Bug
    observed: str | None  # "ExceptionType: message" (first line), or None when nothing failed


def _error_of(fn: Callable[[], Any]) -> str | None:
    try:
        fn()
    except Exception as exc:  # what the README code really raises, reported verbatim
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return None


@torch.no_grad()
def reproduce_readme_bugs(encoder: nn.Module) -> list[BugReport]:
    """Run the README's code on ``encoder`` and report what each bug raises.

    Usage: ``for r in reproduce_readme_bugs(encoder): print(r.bug.title, r.observed)``
    """
    was_training = encoder.training
    encoder.eval()
    ids = torch.ones(1, 4, dtype=torch.long, device=_device_of(encoder))
    mask = torch.ones_like(ids)
    try:
        # Outputs as tuples (the README's era), so the unpacking works and Linear(512) is reached.
        hidden = _error_of(lambda: ReadmeModelAsWritten(TupleOutputs(encoder)).to(ids.device)(ids, mask))
        outputs = _error_of(lambda: ReadmeModelAsWritten(encoder).to(ids.device)(ids, mask))
        loss = _error_of(lambda: torch.loss.BCELoss())
    finally:
        encoder.train(was_training)
    return [BugReport(bug, observed) for bug, observed in zip(BUGS, (hidden, outputs, loss))]


def _device_of(module: nn.Module) -> torch.device:
    param = next(module.parameters(), None)
    return param.device if param is not None else torch.device("cpu")


# ---------------------------------------------------------------------------------------
# The autocast trap, live
# ---------------------------------------------------------------------------------------

#: Three examples, the first confidently wrong (logit 9, label 0): the one that saturates.
TRAP_LOGITS = (9.0, 2.0, -3.0)
TRAP_LABELS = (0.0, 1.0, 0.0)


@dataclass
class TrapDemo:
    """What sigmoid + BCELoss and BCEWithLogitsLoss did under one autocast precision."""

    device: str
    precision: str
    logits: list[float]
    labels: list[float]
    refused: str | None  # autocast's RuntimeError for BCELoss on this device, if it refused
    cuda_policy: str | None  # torch's CUDA autocast verdict, asked directly when not refused here
    probabilities: list[float] | None  # sigmoid outputs in the autocast dtype
    bce_loss: float | None  # nn.BCELoss on them (when not refused)
    bce_grads: list[float] | None  # d loss / d logit through sigmoid + BCELoss
    logits_loss: float = math.nan  # nn.BCEWithLogitsLoss under the same autocast
    logits_grads: list[float] = field(default_factory=list)
    reference_loss: float = math.nan  # BCEWithLogitsLoss in fp32, no autocast
    reference_grads: list[float] = field(default_factory=list)

    @property
    def bce_is_wrong(self) -> bool:
        """BCELoss ran but its loss or gradients are off (NaN, or far from the fp32 reference)."""
        if self.bce_loss is None or self.bce_grads is None:
            return False
        if not math.isclose(self.bce_loss, self.reference_loss, rel_tol=0.05):
            return True
        return any(
            not math.isclose(g, r, rel_tol=0.1, abs_tol=1e-3) for g, r in zip(self.bce_grads, self.reference_grads)
        )


def _head(device: torch.device) -> nn.Linear:
    # A 1 -> 1 Linear with weight 1: under autocast it emits the logits in the autocast
    # dtype, exactly as the README's classifier head does.
    head = nn.Linear(1, 1).to(device)
    with torch.no_grad():
        head.weight.fill_(1.0)
        head.bias.zero_()
    return head


def demonstrate_bce_trap(device: str | torch.device = "cpu", precision: str | Precision = "fp16") -> TrapDemo:
    """Run the README's sigmoid + ``nn.BCELoss`` under ``torch.autocast``, then the fix.

    On CUDA autocast refuses BCELoss with a RuntimeError ("... unsafe to autocast"),
    recorded in ``refused``. CPU autocast lets it run; the numbers show the damage
    (``probabilities`` of exactly 1.0, a clamped loss, NaN or zero gradients), and
    ``cuda_policy`` holds the error CUDA would raise. fp16 on CPU is emulated: slow, but
    these tensors are tiny.

    Usage: ``demo = demonstrate_bce_trap("cpu", "fp16"); print(demo.refused or demo.bce_grads)``
    """
    device = resolve_device(device)
    precision = resolve_precision(precision, device)
    if not precision.autocast_enabled:
        raise UsageError(f"the autocast trap needs a mixed precision (fp16 or bf16), got {precision.name}")
    labels = torch.tensor(TRAP_LABELS, device=device)

    def logits_leaf() -> torch.Tensor:
        return torch.tensor(TRAP_LOGITS, device=device).unsqueeze(-1).requires_grad_(True)

    def autocast():
        return torch.autocast(device.type, dtype=precision.autocast_dtype)

    head = _head(device)
    refused = cuda_policy = None
    probabilities = bce_loss = bce_grads = None

    # The README's pattern: sigmoid on the head's output, then BCELoss, inside autocast.
    z = logits_leaf()
    try:
        with autocast():
            probs = nn.Sigmoid()(head(z)).squeeze(-1)
            loss = nn.BCELoss()(probs, labels)
    except RuntimeError as exc:
        refused = str(exc)
    else:
        (grad,) = torch.autograd.grad(loss, z)
        probabilities = probs.detach().float().cpu().tolist()
        bce_loss = float(loss.detach())
        bce_grads = grad.squeeze(-1).float().cpu().tolist()
        cuda_policy = cuda_autocast_bce_verdict()

    # mixft's fix: the model returns logits; BCEWithLogitsLoss is autocast-safe.
    z = logits_leaf()
    with autocast():
        loss = nn.BCEWithLogitsLoss()(head(z).squeeze(-1), labels)
    (grad,) = torch.autograd.grad(loss, z)

    # The fp32 truth, for comparison.
    z_ref = logits_leaf()
    ref = nn.BCEWithLogitsLoss()(head(z_ref).squeeze(-1), labels)
    (ref_grad,) = torch.autograd.grad(ref, z_ref)

    return TrapDemo(
        device=device.type,
        precision=precision.name,
        logits=list(TRAP_LOGITS),
        labels=list(TRAP_LABELS),
        refused=refused,
        cuda_policy=cuda_policy,
        probabilities=probabilities,
        bce_loss=bce_loss,
        bce_grads=bce_grads,
        logits_loss=float(loss.detach()),
        logits_grads=grad.squeeze(-1).float().cpu().tolist(),
        reference_loss=float(ref.detach()),
        reference_grads=ref_grad.squeeze(-1).float().cpu().tolist(),
    )


def cuda_autocast_bce_verdict() -> str | None:
    """The RuntimeError torch's CUDA autocast raises for ``binary_cross_entropy``, without a GPU.

    Calls the kernel torch registers for that op under the AutocastCUDA dispatch key
    (a private torch API, hence the broad guard). None when it accepts the op or when
    this torch build cannot be asked.
    """
    try:
        keys = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCUDA)
        p, y = torch.full((1,), 0.5), torch.ones(1)
        torch.ops.aten.binary_cross_entropy.default.redispatch(keys, p, y, None, 1)
    except RuntimeError as exc:
        return str(exc)
    except Exception as exc:  # private API moved: say nothing rather than guess
        logger.debug("could not query CUDA autocast's binary_cross_entropy policy: %s", exc)
    return None


# ---------------------------------------------------------------------------------------
# The two loops, corrected (their source is what the script diffs)
# ---------------------------------------------------------------------------------------


def single_precision_loop(model, loader, optimizer, criterion, epochs, device):
    for epoch in range(epochs):
        for batch in loader:
            ids, mask, labels = (batch[k].to(device) for k in ("input_ids", "attention_mask", "labels"))
            optimizer.zero_grad()
            out = model(input_ids=ids, attention_mask=mask)
            loss = criterion(out, labels)
            loss.backward()
            optimizer.step()


def mixed_precision_loop(model, loader, optimizer, criterion, epochs, device, amp_dtype, use_scaler):
    # fp16 needs loss scaling (its narrow exponent underflows small gradients); bf16 does
    # not, and a disabled scaler is a no-op, so the loop is the same for both.
    scaler = torch.amp.GradScaler(device.type, enabled=use_scaler)
    for epoch in range(epochs):
        for batch in loader:
            ids, mask, labels = (batch[k].to(device) for k in ("input_ids", "attention_mask", "labels"))
            optimizer.zero_grad()
            with torch.autocast(device.type, dtype=amp_dtype):
                out = model(input_ids=ids, attention_mask=mask)
                loss = criterion(out, labels)  # BCEWithLogitsLoss: autocast-safe
            scaler.scale(loss).backward()  # backward outside autocast
            scaler.step(optimizer)  # skipped when the gradients hold inf/NaN
            scaler.update()
    return scaler


def loop_diff(context: int = 3) -> str:
    """A unified diff from the single- to the mixed-precision loop, from their source.

    Usage: ``print(loop_diff())``
    """
    a = inspect.getsource(single_precision_loop).splitlines()
    b = inspect.getsource(mixed_precision_loop).splitlines()
    return "\n".join(
        difflib.unified_diff(a, b, "single precision (fp32)", "mixed precision (AMP)", lineterm="", n=context)
    )


# ---------------------------------------------------------------------------------------
# Running and measuring both loops
# ---------------------------------------------------------------------------------------


@dataclass
class ExampleConfig:
    """The example's budget. The README trains 5 epochs on all of SST-2 (67k sentences) at
    lr 2e-5: hours on a CPU. The default (1000 sentences, 1 epoch, lr 1e-4, both
    precisions) takes minutes on a 2-core CPU; ``--epochs 5 --lr 2e-5`` with the full data
    is the README's run, for a GPU."""

    model: str = "bert-base-uncased"  # resolved offline-first (mixft.models.hub.resolve_model)
    data_dir: str | None = None  # GLUE layout train.tsv / dev.tsv; default: SST-2 or generated
    max_train_samples: int = 1000
    max_eval_samples: int = 500
    epochs: int = 1  # the README's 5 is --epochs 5
    batch_size: int = 32
    # The README's 2e-5 suits 5 epochs of all SST-2; in the default 32 steps it barely
    # moves (measured on the shipped MiniLM: accuracy 0.52 at 2e-5, 0.68 at 1e-4).
    lr: float = 1e-4
    max_length: int = 128  # tokens per sentence; longer ones are truncated
    seed: int = 0  # same initial head, data order and dropout draws for both loops
    device: str = "auto"
    amp: str = "auto"  # "auto": the device's AMP (fp16 on CUDA, bf16 on CPU), or fp16 / bf16

    def validate(self) -> ExampleConfig:
        for name in ("max_train_samples", "max_eval_samples", "epochs", "batch_size", "max_length"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be a positive integer, got {value!r}")
        if self.max_length < 8:
            raise UsageError(f"--max-length must be at least 8 tokens, got {self.max_length}")
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            raise UsageError(f"--lr must be a positive finite number, got {self.lr!r}")
        if self.amp not in ("auto", "fp16", "bf16"):
            raise UsageError(f"--amp must be auto, fp16 or bf16, got {self.amp!r}")
        return self

    def precisions(self, device: torch.device) -> tuple[Precision, Precision]:
        """(fp32, the AMP precision) for ``device``; UsageError where the device cannot run it."""
        return resolve_precision("fp32", device), resolve_precision(
            "amp" if self.amp == "auto" else self.amp, device, policy=False
        )  # a comparison measures AMP


@dataclass
class Prepared:
    """Everything loaded once, before any training, shared by both runs."""

    cfg: ExampleConfig
    device: torch.device
    fp32: Precision
    amp: Precision
    encoder: nn.Module  # pretrained weights, fp32; each run trains a deep copy
    tokenizer: Any
    train_examples: Any  # tokenised datasets.Dataset (Arrow), float 0./1. labels
    eval_examples: Any
    model_description: str
    dataset_description: str
    notices: list[str]


def prepare(cfg: ExampleConfig) -> Prepared:
    """Validate ``cfg``, resolve device, precisions, model and data; tokenise. UsageError on bad input.

    Usage: ``prepared = prepare(ExampleConfig(max_train_samples=200))``
    """
    from transformers import AutoModel, AutoTokenizer
    from transformers.utils import logging as hf_logging

    from mixft.data.tokenize import tokenize_text_data
    from mixft.models.hub import resolve_model
    from recipes.bert_sst2 import load_sst2

    cfg.validate()
    device = resolve_device(cfg.device)
    fp32, amp = cfg.precisions(device)
    # Data first: a bad --data-dir fails in milliseconds, before a model is looked up. The
    # same data path as the bert-sst2 recipe (GLUE dir, hub or cache, else generated).
    data = load_sst2(
        cfg.data_dir, max_train_samples=cfg.max_train_samples, max_eval_samples=cfg.max_eval_samples, seed=cfg.seed
    )
    resolved = resolve_model(cfg.model)
    hf_logging.disable_progress_bar()  # the per-tensor "Loading weights" bar
    try:
        tokenizer = AutoTokenizer.from_pretrained(resolved.path)
        encoder = AutoModel.from_pretrained(resolved.path, dtype=torch.float32)  # fp32 master weights
    except (OSError, ValueError) as exc:
        raise UsageError(f"--model {cfg.model}: cannot load a tokenizer and encoder ({exc})") from None
    if getattr(getattr(encoder, "config", None), "hidden_size", None) is None:
        raise UsageError(f"--model {cfg.model}: not an encoder with a hidden_size (a BERT-like model)")
    notices = [n for n in (resolved.notice, data.notice, precision_notice(amp, device)) if n]
    train, evaluation = tokenize_text_data(data, tokenizer, cfg.max_length, float_labels=True)
    return Prepared(
        cfg=cfg,
        device=device,
        fp32=fp32,
        amp=amp,
        encoder=encoder,
        tokenizer=tokenizer,
        # The README's loops take plain batches: the lengths column is for mixft's length grouping.
        train_examples=train.remove_columns(["lengths"]),
        eval_examples=evaluation.remove_columns(["lengths"]),
        model_description=resolved.description,
        dataset_description=data.description,
        notices=notices,
    )


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


# ---------------------------------------------------------------------------------------
# Text for the terminal (the library returns strings; main prints them)
# ---------------------------------------------------------------------------------------


def format_bugs(reports: Sequence[BugReport] | None = None) -> str:
    """The three README bugs, one line each, with the error seen live when ``reports`` are given."""
    lines = []
    for i, bug in enumerate(BUGS, 1):
        lines.append(f"{i}. {bug.title}: `{bug.readme}` -> `{bug.fix}`")
        lines.append(f"   why: {bug.why}")
        if reports is not None:
            observed = reports[i - 1].observed
            lines.append(f"   raises here: {observed}" if observed else "   raises here: nothing (with this encoder)")
    return "\n".join(lines)


def _floats(values: Sequence[float] | None, fmt: str = ".4g") -> str:
    return "n/a" if values is None else "[" + ", ".join(f"{v:{fmt}}" for v in values) + "]"


def format_trap(demo: TrapDemo) -> str:
    """What :func:`demonstrate_bce_trap` found, for the terminal."""
    head = f"sigmoid + nn.BCELoss under torch.autocast({demo.device!r}, {demo.precision}), logits {_floats(demo.logits, 'g')}, labels {_floats(demo.labels, 'g')}:"
    lines = [head]
    if demo.refused is not None:
        lines.append("  RuntimeError: " + demo.refused.strip().replace("\n", "\n    "))
    else:
        lines.append(
            f"  no error on {demo.device}: sigmoid gave {_floats(demo.probabilities, '.6g')} in {demo.precision}"
        )
        saturated = any(p in (0.0, 1.0) for p in demo.probabilities or ())
        why = ": log(0) = -inf, which BCELoss clamps at -100" if saturated else ""
        lines.append(f"  BCELoss = {demo.bce_loss:.4f} (fp32 truth {demo.reference_loss:.4f}{why})")
        lines.append(f"  d loss/d logit = {_floats(demo.bce_grads)} (truth {_floats(demo.reference_grads)})")
        if demo.cuda_policy:
            lines.append(
                "  torch's CUDA autocast raises instead: RuntimeError: " + demo.cuda_policy.strip().splitlines()[0]
            )
    lines.append(
        f"  fix, BCEWithLogitsLoss on the logits under the same autocast: loss {demo.logits_loss:.4f}, "
        f"d loss/d logit = {_floats(demo.logits_grads)}"
    )
    return "\n".join(lines)


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


# ---------------------------------------------------------------------------------------
# The script
# ---------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    from mixft.cli.parser import (
        OneLineParser as _Parser,
    )
    from mixft.cli.parser import (
        positive_float as _positive_float,
    )
    from mixft.cli.parser import (
        positive_int as _positive_int,
    )

    d = ExampleConfig()
    p = _Parser(
        prog=PROG,
        description="The README's BERT example, corrected, trained with its FP32 loop and its AMP loop side by side.",
    )
    p.add_argument("--model", default=d.model, help="model name or path (default: %(default)s, offline-first)")
    p.add_argument("--data-dir", help="directory with GLUE-layout train.tsv and dev.tsv (default: SST-2 or generated)")
    p.add_argument("--max-train-samples", type=_positive_int, default=d.max_train_samples)
    p.add_argument("--max-eval-samples", type=_positive_int, default=d.max_eval_samples)
    p.add_argument(
        "--epochs",
        type=_positive_int,
        default=d.epochs,
        help=f"default %(default)s; the README says {README_EPOCHS}, which takes five times as long",
    )
    p.add_argument("--batch-size", type=_positive_int, default=d.batch_size)
    p.add_argument(
        "--lr",
        type=_positive_float,
        default=d.lr,
        help=f"default %(default)g; the README's {README_LR:g} barely moves in the default budget",
    )
    p.add_argument("--max-length", type=_positive_int, default=d.max_length)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default=d.device)
    p.add_argument(
        "--amp",
        choices=["auto", "fp16", "bf16"],
        default=d.amp,
        help="the mixed precision (auto: fp16 on CUDA, bf16 on CPU)",
    )
    p.add_argument("--output-dir", help="also write results.json and report.md (with charts) here")
    return p


def config_from_args(args: argparse.Namespace) -> ExampleConfig:
    return ExampleConfig(
        model=args.model,
        data_dir=args.data_dir,
        max_train_samples=args.max_train_samples,
        max_eval_samples=args.max_eval_samples,
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        max_length=args.max_length,
        seed=args.seed,
        device=args.device,
        amp=args.amp,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of examples/readme_example.py (and scripts/readme_example.py). Returns the exit code (2 for bad input)."""
    try:
        args = build_parser().parse_args(argv)
        cfg = config_from_args(args).validate()
        if args.output_dir:
            from mixft.report.summary import CHART_TITLES
            from mixft.runs.outdir import REPORT_NAME, RESULTS_NAME, check_output_dir

            check_output_dir(Path(args.output_dir), files=[RESULTS_NAME, REPORT_NAME, *CHART_TITLES])
        prepared = prepare(cfg)  # model, data, device, precisions: every check before any work
    except UsageError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    for notice in prepared.notices:
        print(notice, file=sys.stderr)

    say = lambda *lines: print(*lines, sep="\n", flush=True)  # noqa: E731
    say("# The README example, corrected", "")
    say(
        "## Three bugs in the README code (run here on the resolved encoder)",
        format_bugs(reproduce_readme_bugs(prepared.encoder)),
        "",
    )
    say("## The autocast trap", AUTOCAST_TRAP, "")
    device = prepared.device
    traps = ["fp16"] + (["bf16"] if device.type == "cpu" else [])
    for name in traps:
        say(format_trap(demonstrate_bce_trap(device, name)), "")
    say("## The two loops that run below (unified diff)", loop_diff(), "")

    cfg = prepared.cfg
    budget = f"{cfg.epochs} epoch(s)" + (f" (README: {README_EPOCHS})" if cfg.epochs != README_EPOCHS else "")
    budget += f", batch {cfg.batch_size}, AdamW lr {cfg.lr:g}" + (
        f" (README: {README_LR:g})" if cfg.lr != README_LR else ""
    )
    say(
        "## FP32 vs AMP",
        f"model   {prepared.model_description}",
        f"data    {prepared.dataset_description}",
        f"device  {device_name(device)}",
        f"budget  {budget}, seed {cfg.seed}",
    )
    if cfg.epochs != README_EPOCHS or cfg.lr != README_LR:
        say(
            f"        a smaller budget than the README's, to finish in minutes on a CPU; "
            f"--epochs {README_EPOCHS} --lr {README_LR:g} for the README's"
        )
    try:
        fp32, amp = run_comparison(prepared, on_start=lambda p: say(f"training {p.name} ..."))
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    say("", side_by_side(fp32, amp), "")
    if device.type == "cpu":
        say(
            "Peak memory on CPU is the process's RSS (Python, libraries and data included), and the "
            "AMP run follows the fp32 run in the same process: read it as an upper bound, not tensor memory."
        )
    if args.output_dir:
        from mixft.report.markdown import write_report
        from mixft.report.plots import write_plots
        from mixft.results import results_document, write_results
        from mixft.runs.outdir import REPORT_NAME, RESULTS_NAME

        out = Path(args.output_dir)
        write_results(out / RESULTS_NAME, [fp32, amp])
        write_report(results_document([fp32, amp]), out, charts=write_plots)
        say(f"results: {out / RESULTS_NAME}", f"report:  {out / REPORT_NAME}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
