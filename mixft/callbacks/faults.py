"""Numeric faults: inject them on purpose, and notice when a run collapses by itself.

``InjectNonFinite`` puts an inf (or NaN) into one gradient element before some optimizer
steps, to check that the loop survives: with fp16 the GradScaler skips the step (and
halves its scale); with fp32/bf16 the trainer's ``skip_nonfinite_steps`` does. Either
way the weights and the LR schedule stay where they were, and ``skipped_steps`` counts it.

``CollapseDetector`` stops a run that can no longer learn - the loss scale fell below a
floor, too many optimizer steps in a row were skipped, or the loss is inf/NaN - and
attaches a diagnosis (``mixft.amp.diagnose``): the first module whose output is non-finite
and what to change. The CLI turns that into exit code 3 (see docs/reliability.md).

Usage::

    Trainer(..., precision="fp16", callbacks=[InjectNonFinite(0.1, seed=0), CollapseDetector()])
"""

from __future__ import annotations

import math
import random

import torch

from mixft.distributed import all_gather_objects, any_process, is_distributed
from mixft.log import logger
from mixft.options import POSITIVE_INT
from mixft.train.hooks import Callback, StepInfo, StopTraining, TrainerLike, stop_kind_of

# The start of the stopped_early message of a run a CollapseDetector ended (for people;
# code reads stop_kind).
COLLAPSE = "training collapsed"

_VALUES = {"inf": float("inf"), "nan": float("nan")}


def is_collapse(run) -> bool:
    """Whether a RunResult (or a results.json run dict) ended because training collapsed.

    Usage: ``[r for r in results if is_collapse(r)]``
    """
    return stop_kind_of(run) == "collapse"


class InjectNonFinite(Callback):
    """Before each optimizer step, with probability ``rate``, set one gradient element to inf/NaN.

    The draw depends only on (``seed``, step number): the same steps are hit at every
    precision, and a resumed run hits the same steps as an uninterrupted one. Which
    parameter and element get the value is drawn the same way. The gradients are still
    scaled at this point (``on_before_optimizer_step``), as a real fp16 overflow would be.

    Usage: ``Trainer(..., callbacks=[InjectNonFinite(0.1, seed=0, value="nan")])``
    """

    def __init__(self, rate: float, seed: int = 0, value: str | float = "inf"):
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not (0.0 <= rate <= 1.0):
            raise ValueError(f"rate must be a probability between 0 and 1, got {rate!r}")
        value = _VALUES.get(value, value) if isinstance(value, str) else value
        if not isinstance(value, float) or math.isfinite(value):
            raise ValueError(f"value must be 'inf', 'nan' or a non-finite float, got {value!r}")
        self.rate = float(rate)
        self.seed = int(seed)
        self.value = value
        self.injected_steps: list[int] = []  # 1-based optimizer steps that got a fault

    def fires(self, step: int) -> bool:
        """Whether optimizer step ``step`` (1-based) gets a fault."""
        return self._rng(step).random() < self.rate

    def on_before_optimizer_step(self, trainer: TrainerLike) -> None:
        step = trainer.state.step + 1  # the step about to be taken
        rng = self._rng(step)
        if not rng.random() < self.rate:
            return
        params = [p for p in trainer.params if p.grad is not None and p.grad.numel() > 0]
        if not params:
            return
        grad = params[rng.randrange(len(params))].grad
        flat = rng.randrange(grad.numel())
        if hasattr(grad, "to_local"):
            # A sharded (FSDP) gradient: every process drew the same element of the whole tensor;
            # each writes into its own shard (one element per process), so every process sees it.
            local = grad.to_local()
            if local.numel():
                local.view(-1)[flat % local.numel()] = self.value
        else:
            grad[torch.unravel_index(torch.tensor(flat), grad.shape)] = self.value
        self.injected_steps.append(step)

    def _rng(self, step: int) -> random.Random:
        return random.Random(self.seed * 1_000_003 + step)


class CollapseDetector(Callback):
    """Stop (``StopTraining``) a run that stopped learning, with a diagnosis.

    It stops when, after an optimizer step:

    - the GradScaler's scale is below ``min_loss_scale`` (default 1.0: below 1 the scaler
      shrinks gradients, so they overflow float16 even unscaled; DeepSpeed's floor too);
    - ``max_consecutive_skips`` optimizer steps in a row were skipped (inf/NaN gradients);
    - a window loss since the last check is inf/NaN, except on a step the GradScaler skipped: a loss
      the scale made non-finite (a gradient penalty's, computed from the scaled gradients) is the
      scaler's to handle, and skips that go on stop the run by the rule above. Reading losses is a host sync, so
      this is checked every ``check_every`` steps and at every epoch end (where the
      evaluation loss is checked too), not per step.

    On a stop it runs ``mixft.amp.diagnose.diagnose`` (one forward pass with hooks, up to
    ``diagnose_batches`` batches) unless ``diagnose=False``. The reason and the diagnosis
    become the run's ``stopped_early`` ("training collapsed: ..."), with ``stop_kind``
    "collapse"; ``self.diagnosis``
    keeps the structured one. Put it before a ``Checkpointer`` in the callback list so
    the collapsed state is never saved over the last good checkpoint.

    Usage: ``Trainer(..., callbacks=[CollapseDetector(max_consecutive_skips=10), Checkpointer(path)])``
    """

    def __init__(
        self,
        min_loss_scale: float = 1.0,
        max_consecutive_skips: int = 10,
        check_every: int = 10,
        diagnose: bool = True,
        diagnose_batches: int = 4,
    ):
        if not (isinstance(min_loss_scale, (int, float)) and min_loss_scale >= 0 and math.isfinite(min_loss_scale)):
            raise ValueError(f"min_loss_scale must be a finite number >= 0, got {min_loss_scale!r}")
        for name, value in (("max_consecutive_skips", max_consecutive_skips), ("check_every", check_every)):
            POSITIVE_INT.validate(name, value)  # the options' rule (a UsageError is a ValueError)
        self.min_loss_scale = float(min_loss_scale)
        self.max_consecutive_skips = max_consecutive_skips
        self.check_every = check_every
        self.diagnose = diagnose
        self.diagnose_batches = diagnose_batches
        self.reason: str | None = None
        self.diagnosis = None  # a mixft.amp.diagnose.Diagnosis after a stop
        self._checked = 0  # history entries already checked for non-finite losses

    def on_train_begin(self, trainer: TrainerLike) -> None:
        self._checked = len(trainer.state.history["loss"])  # a resumed run's past was checked

    def on_step_end(self, trainer: TrainerLike, info: StepInfo) -> None:
        reason = None
        if info.loss_scale is not None and info.loss_scale < self.min_loss_scale:
            reason = f"the loss scale fell to {info.loss_scale:g}, below the floor {self.min_loss_scale:g}"
        elif trainer.state.consecutive_skips >= self.max_consecutive_skips:
            reason = (
                f"{trainer.state.consecutive_skips} optimizer steps in a row were skipped "
                f"for inf/NaN gradients (steps {info.step - trainer.state.consecutive_skips + 1}-{info.step})"
            )
        elif info.step % self.check_every == 0:
            reason = self._check_losses(trainer)
        reason = _agreed_reason(reason)
        if reason:
            self._stop(trainer, reason)

    def on_epoch_end(self, trainer: TrainerLike, metrics: dict[str, float]) -> None:
        reason = self._check_losses(trainer)
        if reason is None and "loss" in metrics and not math.isfinite(metrics["loss"]):
            reason = f"the evaluation loss is {metrics['loss']}"
        reason = _agreed_reason(reason)
        if reason:
            self._stop(trainer, reason)

    def _check_losses(self, trainer: TrainerLike) -> str | None:
        hist = trainer.state.history
        start, self._checked = self._checked, len(hist["loss"])
        recent = hist["loss"][start:]
        if not recent:
            return None
        values = torch.stack(
            [
                v.detach().float().reshape(())
                if isinstance(v, torch.Tensor)
                else torch.tensor(float(v), device=trainer.device)
                for v in recent
            ]
        ).cpu()  # one sync for the whole window
        finite = torch.isfinite(values)
        if bool(finite.all()):
            return None
        scaled = bool(getattr(getattr(trainer, "scaler", None), "is_enabled", lambda: False)())
        skipped = hist.get("skipped") or []
        bad = [
            i
            for i in (~finite).nonzero().flatten().tolist()
            if not (scaled and start + i < len(skipped) and skipped[start + i])
        ]
        if not bad:
            return None
        return f"the loss is {values[bad[0]].item()} at step {hist['step'][start + bad[0]]}"

    def _stop(self, trainer: TrainerLike, reason: str) -> None:
        self.reason = reason
        message = f"{COLLAPSE}: {reason}"
        if self.diagnose and getattr(trainer, "fsdp", False):
            # The diagnosis's forward passes are collectives under FSDP, and how many it runs depends on
            # each process's own data: processes could wait on each other. Said rather than risked.
            message += "; no diagnosis under --fsdp (its forward passes would have to run in every process alike)"
        elif self.diagnose:
            from mixft.amp.diagnose import diagnose

            try:
                self.diagnosis = diagnose(trainer, max_batches=self.diagnose_batches)
                message += f"; {self.diagnosis.summary()}"
            except Exception as e:  # a failed diagnosis must not hide the collapse itself
                logger.warning("diagnosis failed: %s: %s", type(e).__name__, e)
        raise StopTraining(message, kind="collapse")


def _agreed_reason(reason: str | None) -> str | None:
    """This process's reason to stop, or in a process group (DDP, FSDP) the first process's that has
    one: every process stops at the same step, with the same reason.

    A loss can be inf/NaN in one process only (its own batch), and a process that stops alone leaves
    the others waiting in the next collective (DDP's gradient all-reduce, FSDP's weight gathering).
    One all-reduce per step decides; a one-process run decides alone.
    """
    if not is_distributed():
        return reason
    (anywhere,) = any_process(reason is not None)
    if not anywhere:
        return None
    reasons = all_gather_objects(reason)  # only on a stop: every process reports the same reason
    rank, first = next((r, text) for r, text in enumerate(reasons) if text is not None)
    return first if len([t for t in reasons if t is not None]) == len(reasons) else f"{first} (in process {rank})"
