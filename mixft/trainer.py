"""The training loop: autocast + GradScaler with unscale-then-clip, written out in one place.

Usage (any ``nn.Module``, loss and dataloaders; not only recipes)::

    trainer = Trainer(model, torch.optim.AdamW(model.parameters(), lr=2e-5),
                      nn.BCEWithLogitsLoss(), train_loader, eval_loader=eval_loader,
                      precision="bf16", epochs=2)
    result = trainer.fit()          # RunResult: accuracy, time, memory, skipped steps...

Batches are either a mapping with a ``labels`` key (the rest is passed to
``model(**inputs)``, as Hugging Face collators produce) or an ``(inputs, labels)`` pair
(passed as ``model(inputs)``).

One optimizer step (``Trainer._train_window``; one code path for fp32/tf32/fp16/bf16:
the switches are ``enabled=`` flags, and with ``enabled=False`` the scaler is a no-op)::

    for each micro-batch i of the window (n_i samples, n in all):
        with autocast(device_type, dtype, enabled):      # forward + loss only
            loss = loss_fn(model(**inputs), labels) * n_i / n
        scaler.scale(loss).backward()                      # outside autocast; DDP syncs at the last
    for opt in optimizers: scaler.unscale_(opt)            # real gradient values from here on
    stepped = [norm(opt's grads) is finite for each opt]   # per optimizer; one host sync
    clip_grads_with_norm_(params of stepped opts, max_norm, their joint norm)   # *unscaled*
    for opt in stepped optimizers: scaler.step(opt)
    scaler.update()
    for sched: if its optimizer stepped: sched.step()      # skipped steps hold the schedule
    for opt in optimizers: opt.zero_grad(set_to_none=True)

Windows hold ``grad_accum`` micro-batches; an epoch's last window may be shorter, and is
stepped like the others (loaders without ``len()`` included). fit, evaluate,
evaluate_only and predict run under the precision's TF32 setting and restore the
process's own afterwards.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from . import distributed
from .errors import UsageError
from .log import logger
from .measure import PeakMemory, Stopwatch, device_name
from .options import POSITIVE_INT
from .precision import Precision, configure_matmul, resolve_device, resolve_precision
from .results import RunResult
from .rng import capture_rng_state, restore_rng_state

if TYPE_CHECKING:  # annotations only: building a trainer needs neither module
    from .config import RunConfig
    from .recipe import TrainerParts

OptimizerLike = torch.optim.Optimizer | Callable[..., torch.optim.Optimizer]


#: How a run can end early: RunResult.stop_kind (None: it ran its budget).
STOP_KINDS = ("collapse", "interrupt", "callback")


class StopTraining(Exception):
    """Raised by a callback to end training early.

    The message becomes the RunResult's ``stopped_early``, ``kind`` its ``stop_kind``
    (one of ``STOP_KINDS``): code asks the kind, people read the message.

    Usage: ``raise StopTraining("the loss is nan at step 6", kind="collapse")``
    """

    def __init__(self, message: str = "", kind: str = "callback"):
        if kind not in STOP_KINDS:
            raise ValueError(f"StopTraining kind must be one of {', '.join(STOP_KINDS)}, got {kind!r}")
        super().__init__(message)
        self.kind = kind


def stop_kind_of(run: RunResult | Mapping[str, Any]) -> str | None:
    """The ``stop_kind`` of a RunResult or of a results.json run dict.

    Usage: ``stop_kind_of(json.load(f)["runs"][0]) == "interrupt"``
    """
    if isinstance(run, RunResult):
        return run.stop_kind
    if isinstance(run, Mapping):
        return run.get("stop_kind")
    raise TypeError(f"expected a RunResult or a results.json run dict, got {type(run).__name__}")


class Callback:
    """Hooks into the loop. Override what you need; every hook gets the trainer.

    Usage: ``class LogLoss(Callback): def on_step_end(self, trainer, info): ...``

    ``on_before_optimizer_step`` runs when a window's gradients are accumulated and still
    *scaled* (before ``unscale_``): the place to inspect or inject into raw gradients.
    ``on_step_end`` gets a ``StepInfo`` whose tensors are still on the device: reading
    them (``.item()``) is a host sync, so do it only every N steps.
    """

    def on_train_begin(self, trainer: "Trainer") -> None: ...
    def on_before_optimizer_step(self, trainer: "Trainer") -> None: ...
    def on_step_end(self, trainer: "Trainer", info: "StepInfo") -> None: ...
    def on_epoch_end(self, trainer: "Trainer", metrics: dict[str, float]) -> None: ...
    def on_train_end(self, trainer: "Trainer", result: RunResult) -> None: ...


@dataclass
class StepInfo:
    """What ``Callback.on_step_end`` learns about one optimizer step (tensors stay on the device)."""

    step: int  # 1-based optimizer step
    epoch: int  # 0-based epoch the step belongs to
    loss: torch.Tensor  # mean loss over the window, on the device
    grad_norm: torch.Tensor  # unscaled total gradient norm (inf/NaN when the step was skipped)
    lr: float  # learning rate the step used
    loss_scale: float | None  # GradScaler scale after update(); None without a scaler
    skipped: bool  # True when any optimizer skipped this step
    stepped: list[bool] = field(default_factory=list)  # per optimizer: took its step


@dataclass
class TrainState:
    """Everything about the loop's progress; a checkpoint saves this with the weights."""

    epoch: int = 0  # epochs completed
    batch_in_epoch: int = 0  # micro-batches consumed in the current epoch
    step: int = 0  # optimizer steps attempted
    skipped_steps: int = 0
    consecutive_skips: int = 0
    samples: int = 0
    tokens: int = 0
    train_time_s: float = 0.0
    history: dict[str, list] = field(
        default_factory=lambda: {"step": [], "loss": [], "lr": [], "grad_norm": [], "loss_scale": [], "skipped": []}
    )
    eval_history: list[dict[str, Any]] = field(default_factory=list)


class Trainer:
    """Fine-tune ``model`` under a precision policy and measure what it cost.

    Usage: ``result = Trainer(model, opt, nn.BCEWithLogitsLoss(), loader, precision="amp").fit()``

    Args:
        model: any ``nn.Module``; moved to ``device`` here.
        optimizer: an optimizer, a list of optimizers (one GradScaler serves all), or a
            factory ``f(params) -> optimizer`` called after the model is on the device.
        loss_fn: ``loss_fn(outputs, labels) -> scalar``; runs inside autocast, so it must
            be autocast-safe (e.g. ``BCEWithLogitsLoss``, not sigmoid + ``BCELoss``).
        train_loader / eval_loader: iterables of batches (see module docstring).
        precision: "fp32", "tf32", "fp16", "bf16", "amp" or a ``Precision``.
        device: "auto", "cpu", "cuda" or a ``torch.device``.
        lr_scheduler: a scheduler (or list matching the optimizers), or a factory
            ``f(optimizer, total_steps) -> scheduler``. Each is stepped only after its own
            optimizer's real steps.
        grad_accum: micro-batches per optimizer step; each micro-batch's loss (a mean over
            its samples) is weighted by its share of the window's samples.
        max_grad_norm: clip the unscaled total gradient norm to this; None: no clipping.
            An optimizer whose gradients hold inf/NaN skips its step and is left out of
            the norm, so the others are clipped by their own finite joint norm.
        epochs / max_steps: the budget; ``max_steps`` (optimizer steps) wins when reached.
        predict_fn: ``outputs -> predictions`` for metrics at evaluation: integer labels
            (classification) or floats (regression), kept in their kind.
        metric: any object with ``compute(predictions=list, references=list) -> dict``
            (an ``evaluate`` metric or a combination); every value goes into the eval
            dict. Without one, classification reports ``accuracy``.
        seed: seeds torch at the start of ``fit`` so dropout draws match across precisions.
        skip_nonfinite_steps: without a GradScaler (fp32/bf16), skip an optimizer step
            whose gradient norm is inf/NaN instead of writing NaN into the weights. Costs
            one host sync per optimizer step (not per micro-step).
        scaler_kwargs: passed to ``torch.amp.GradScaler`` (e.g. ``init_scale``).
        callbacks: ``Callback`` instances.
        loss_hook: ``f(trainer, loss, outputs, inputs) -> loss`` called after the forward
            pass (outside autocast, before scaling): adds terms such as a gradient
            penalty (see ``mixft.penalties.gradient_penalty``, which unscales by hand).
        run_info: extra fields for the RunResult (``model``, ``dataset``, ``config``).
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: OptimizerLike | Sequence[torch.optim.Optimizer],
        loss_fn: Callable[[Any, torch.Tensor], torch.Tensor],
        train_loader,
        *,
        eval_loader=None,
        precision: str | Precision = "fp32",
        device: str | torch.device = "auto",
        lr_scheduler=None,
        grad_accum: int = 1,
        max_grad_norm: float | None = 1.0,
        epochs: int = 1,
        max_steps: int | None = None,
        predict_fn: Callable[[Any], torch.Tensor] | None = None,
        metric=None,
        seed: int | None = None,
        skip_nonfinite_steps: bool = True,
        scaler_kwargs: dict[str, Any] | None = None,
        callbacks: Sequence[Callback] = (),
        loss_hook: Callable[["Trainer", torch.Tensor, Any, Any], torch.Tensor] | None = None,
        run_info: dict[str, Any] | None = None,
    ):
        POSITIVE_INT.validate("grad_accum", grad_accum)
        POSITIVE_INT.validate("epochs", epochs)
        if max_steps is not None:
            POSITIVE_INT.validate("max_steps", max_steps)
        if max_grad_norm is not None and not (max_grad_norm > 0 and math.isfinite(max_grad_norm)):
            raise ValueError(f"max_grad_norm must be a positive finite number or None, got {max_grad_norm}")

        self.device = resolve_device(device)
        self.precision = resolve_precision(precision, self.device)
        # The model must be on its device before a factory builds the optimizer, or the
        # optimizer's state would be created for the wrong tensors.
        self.model = model.to(self.device)
        # Under a launcher (torchrun / accelerate launch) this is a DDP wrapper; the bare
        # module stays reachable as ``self.module`` (saving, evaluation).
        self.model = distributed.wrap_model(self.model, self.device)
        if callable(optimizer) and not isinstance(optimizer, torch.optim.Optimizer):
            optimizer = optimizer(self.model.parameters())
        self.optimizers: list[torch.optim.Optimizer] = (
            list(optimizer) if isinstance(optimizer, (list, tuple)) else [optimizer]
        )
        self.loss_fn = loss_fn
        self.train_loader = train_loader
        self.eval_loader = eval_loader
        self.grad_accum = grad_accum
        self.max_grad_norm = max_grad_norm
        self.epochs = epochs
        self.max_steps = max_steps
        self.predict_fn = predict_fn
        self.metric = metric
        self.seed = seed
        self.skip_nonfinite_steps = skip_nonfinite_steps
        self.callbacks = list(callbacks)
        self.loss_hook = loss_hook
        self.run_info = dict(run_info or {})
        self._check_parameter_dtypes()

        # enabled=False makes the scaler a no-op: scale() returns the loss, step() just steps.
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.precision.grad_scaler, **(scaler_kwargs or {}))
        self.total_steps = self._planned_steps()
        self.lr_schedulers = self._build_schedulers(lr_scheduler)
        self.state = TrainState()
        # Checkpoints (mixft.checkpoint): RNG states to resume from, the RNG at the start of
        # the current epoch, and this fit's clock and token counter, read mid-run.
        self._resume_rng: dict[str, Any] | None = None
        self._epoch_rng: dict[str, Any] | None = None
        self._clock: Stopwatch | None = None
        self._tokens_seen: torch.Tensor | None = None

    @classmethod
    def from_parts(
        cls,
        parts: TrainerParts,
        cfg: RunConfig,
        *,
        precision: str | Precision,
        device: str | torch.device,
        seed: int,
        callbacks: Sequence[Callback] = (),
    ) -> "Trainer":
        """The trainer for a recipe's parts under a run's options (``cfg`` with the recipe defaults applied).

        The one way the runner, the benchmarks and the examples build a trainer: the
        model, optimizer, loss, loaders, scheduler, predict_fn and metric come from
        ``parts``; accumulation, clipping and the budget from ``cfg``; ``cfg`` itself is
        recorded in the RunResult's ``config``.

        Usage: ``Trainer.from_parts(recipe.build(cfg, prepared, precision, device, seed), cfg,
        precision=precision, device=device, seed=seed).fit()``
        """
        return cls(
            parts.model, parts.optimizer, parts.loss_fn, parts.train_loader,
            eval_loader=parts.eval_loader, precision=precision, device=device,
            lr_scheduler=parts.lr_scheduler, grad_accum=cfg.grad_accum, max_grad_norm=cfg.clip_norm,
            epochs=cfg.epochs, max_steps=cfg.max_steps, predict_fn=parts.predict_fn, metric=parts.metric,
            seed=seed, callbacks=callbacks,
            run_info={**parts.run_info, "config": {**cfg.to_dict(), "precisions": None, "seeds": None}},
        )

    @property
    def module(self) -> nn.Module:
        """The model without its DistributedDataParallel wrapper (what to save or export)."""
        return getattr(self.model, "module", self.model)

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        """The (first) optimizer."""
        return self.optimizers[0]

    @property
    def params(self) -> list[nn.Parameter]:
        """Every parameter the optimizers update (what clipping and the norm see)."""
        return [p for opt in self.optimizers for group in opt.param_groups for p in group["params"]]

    def untimed(self):
        """Context that leaves its body out of ``train_time_s`` (checkpoint writes, diagnostics)."""
        return self._clock.paused() if self._clock is not None else contextlib.nullcontext()

    def autocast(self):
        """The autocast context for this run's precision (a no-op for fp32/tf32)."""
        dtype = self.precision.autocast_dtype or torch.float32
        return torch.autocast(self.device.type, dtype=dtype, enabled=self.precision.autocast_enabled)

    # ------------------------------------------------------------------ training
    def fit(self) -> RunResult:
        """Train for the budget, evaluating after every epoch; returns the run's RunResult.

        Usage: ``result = trainer.fit(); result.eval["accuracy"]``
        """
        with configure_matmul(self.precision, self.device):  # this run's TF32 setting, restored after
            return self._fit()

    def _fit(self) -> RunResult:
        if self.seed is not None:
            torch.manual_seed(self.seed)
        for cb in self.callbacks:
            cb.on_train_begin(self)

        state = self.state
        stop: StopTraining | None = None
        clock = Stopwatch(self.device)
        memory = PeakMemory(self.device)
        # Running sums stay on the device: reading them every micro-step would stall
        # the GPU queue (a host sync). They are read once, at the end.
        self._tokens_seen = torch.zeros((), dtype=torch.int64, device=self.device)
        samples_before = state.samples
        memory.start()
        self._clock = clock  # state_dict() reads it mid-run
        try:
            while state.epoch < self.epochs and not self._budget_spent():
                self.model.train()
                self._start_epoch_rng()
                exhausted = True
                with clock:
                    for window in self._windows(state.epoch):
                        self._finish_resume_rng()
                        info = self._train_window(window)
                        for cb in self.callbacks:
                            cb.on_step_end(self, info)
                        if self._budget_spent():
                            exhausted = False
                            break
                self._finish_resume_rng()  # resumed at the end of an epoch: no batch left to train
                n_batches = _len_or_none(self.train_loader)
                if exhausted or (n_batches is not None and state.batch_in_epoch >= n_batches):
                    state.epoch += 1
                    state.batch_in_epoch = 0
                    metrics = self._evaluate_epoch(state.epoch)
                else:
                    metrics = self._evaluate_epoch(state.epoch + 1)
                for cb in self.callbacks:
                    cb.on_epoch_end(self, metrics)
        except StopTraining as e:
            stop = e
            logger.warning("training stopped early: %s", str(e) or "stopped by a callback")
        finally:
            memory.stop()
            state.train_time_s += clock.elapsed_s
            self._clock = None
        # Under data parallelism each rank counted its own shard; report the global rate.
        state.tokens += int(distributed.all_reduce_sum(self._tokens_seen).item())
        local_samples = torch.tensor(state.samples - samples_before, device=self.device)
        state.samples = samples_before + int(distributed.all_reduce_sum(local_samples).item())
        self._tokens_seen = None

        result = self._result(memory, stop)
        for cb in self.callbacks:
            cb.on_train_end(self, result)
        return result

    def _train_window(self, window: list) -> StepInfo:
        """One accumulation window, one optimizer step: the AMP step of the module docstring."""
        batches = [self._split(batch) for batch in window]  # (inputs, labels) on the device
        sizes = [_batch_size(labels) for _, labels in batches]
        window_loss = torch.zeros((), device=self.device)
        for i, ((inputs, labels), n) in enumerate(zip(batches, sizes)):
            # Under DDP, all-reduce the gradients once per window (at its last backward).
            with self._no_sync(i < len(batches) - 1):
                with self.autocast():  # forward + loss only
                    outputs = self._forward(inputs)
                    # Weighted by samples, not by count: a window of sizes [4, 2] is one batch of 6.
                    loss = self.loss_fn(outputs, labels) * (n / sum(sizes))
                if self.loss_hook is not None:
                    loss = self.loss_hook(self, loss, outputs, inputs)
                # Outside autocast: backward ops run in the dtypes their forward ops chose.
                self.scaler.scale(loss).backward()
            window_loss += loss.detach()
            self._count(inputs, n)
        self.state.batch_in_epoch += len(window)
        for cb in self.callbacks:
            cb.on_before_optimizer_step(self)  # gradients still scaled here
        lr = self.optimizer.param_groups[0]["lr"]

        for opt in self.optimizers:  # every one: from here on .grad holds real values
            self.scaler.unscale_(opt)
        norms = [_grad_norm(opt, self.device) for opt in self.optimizers]
        stepped = self._finite(norms)  # per optimizer: an inf in one does not hold back another
        self._clip(norms, stepped)  # the *unscaled* gradients
        for opt, ok in zip(self.optimizers, stepped):
            if ok:
                self.scaler.step(opt)  # the scaler re-checks its own inf record; a no-op wrapper without one
        self.scaler.update()  # once per window, however many optimizers; lowers the scale after an inf
        # A skipped step must not advance its schedule, or the LR runs ahead of the weights
        # (torch warns about this; Accelerate gets it wrong for fused optimizers).
        for sched in self.lr_schedulers:
            if self._scheduler_may_step(sched, stepped):
                sched.step()
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=True)
        return self._record(window_loss, torch.linalg.vector_norm(torch.stack(norms)), lr, stepped)

    def _windows(self, epoch: int):
        """The epoch's micro-batches in windows of ``grad_accum``; the last may be shorter.

        Gathered before the step so each micro-batch's weight in the window is known, with
        or without ``len(loader)``. A resumed epoch skips the micro-batches trained before
        its stop (a checkpoint is taken at a window boundary).
        """
        trained = self.state.batch_in_epoch
        window: list = []
        for index, batch in enumerate(self._epoch_batches(epoch)):
            if index < trained:
                continue
            window.append(batch)
            if len(window) == self.grad_accum:
                yield window
                window = []
        if window:
            yield window

    def _finite(self, norms: list[torch.Tensor]) -> list[bool]:
        """Which optimizers step: those whose unscaled gradients are all finite.

        What GradScaler checks in ``unscale_``; without a scaler it is ``skip_nonfinite_steps``.
        One host sync per optimizer step (not per micro-step): a single NaN written into the
        weights would end the run.
        """
        if not (self.scaler.is_enabled() or self.skip_nonfinite_steps):
            return [True] * len(norms)
        return torch.isfinite(torch.stack(norms)).tolist()

    def _clip(self, norms: list[torch.Tensor], stepped: list[bool]) -> None:
        """Clip the gradients of the optimizers that step to ``max_grad_norm``, by their joint norm.

        An optimizer with inf/NaN gradients is skipped this step, and its norm is left out:
        counted in, max_norm / inf would zero every other optimizer's update.
        """
        live = [norm for norm, ok in zip(norms, stepped) if ok]
        if self.max_grad_norm is None or not live:
            return
        params = [p for opt, ok in zip(self.optimizers, stepped) if ok for g in opt.param_groups for p in g["params"]]
        torch.nn.utils.clip_grads_with_norm_(params, self.max_grad_norm, torch.linalg.vector_norm(torch.stack(live)))

    def _scheduler_may_step(self, sched, stepped: list[bool]) -> bool:
        # Each scheduler follows its own optimizer; one that names none waits for all of them.
        by_optimizer = {id(opt): ok for opt, ok in zip(self.optimizers, stepped)}
        return by_optimizer.get(id(getattr(sched, "optimizer", None)), all(stepped))

    def _count(self, inputs, n: int) -> None:
        self.state.samples += n
        if isinstance(inputs, Mapping) and "attention_mask" in inputs:
            self._tokens_seen += inputs["attention_mask"].sum()  # stays on the device

    def _record(self, window_loss: torch.Tensor, grad_norm: torch.Tensor, lr: float, stepped: list[bool]) -> StepInfo:
        state = self.state
        # A step counts as skipped when any optimizer skipped it (the scaler backs off then too).
        skipped = not all(stepped)
        scale = self.scaler.get_scale() if self.scaler.is_enabled() else None
        state.step += 1
        state.skipped_steps += int(skipped)
        state.consecutive_skips = state.consecutive_skips + 1 if skipped else 0
        hist = state.history
        hist["step"].append(state.step)
        hist["loss"].append(window_loss)  # tensors until the end of fit: no sync here
        hist["lr"].append(lr)
        hist["grad_norm"].append(grad_norm.detach())
        hist["loss_scale"].append(scale)
        hist["skipped"].append(skipped)
        return StepInfo(state.step, state.epoch, window_loss, grad_norm, lr, scale, skipped, list(stepped))

    # ---------------------------------------------------------------- evaluation
    def evaluate(self, loader=None) -> dict[str, float]:
        """Mean loss (and the metrics, with ``predict_fn``) over ``loader``, under autocast.

        Also times itself (device-synchronised): ``time_s`` and ``samples_per_s`` are the
        inference speed at this precision, so runs at two precisions give its speedup.

        Usage: ``trainer.evaluate()["accuracy"]``
        """
        loader = self.eval_loader if loader is None else loader
        if loader is None:
            return {}
        with configure_matmul(self.precision, self.device), torch.inference_mode():
            return self._evaluate(loader)

    def _evaluate(self, loader) -> dict[str, float]:
        was_training = self.model.training
        self.model.eval()
        # The bare module: DDP's forward may broadcast buffers, a collective that would
        # hang when ranks hold different numbers of evaluation batches.
        module = self.module
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        count = 0
        predictions, references = [], []
        clock = Stopwatch(self.device)
        try:
            with clock:
                for batch in loader:
                    inputs, labels = self._split(batch)
                    with self.autocast():
                        outputs = self._forward(inputs, module)
                        loss = self.loss_fn(outputs, labels)
                    n = _batch_size(labels)
                    loss_sum += loss.double() * n
                    count += n
                    if self.predict_fn is not None:
                        predictions.append(self.predict_fn(outputs).detach())
                        references.append(labels.detach())
        finally:
            self.model.train(was_training)
        # Every rank evaluated its shard: sum the losses, gather the predictions.
        loss_sum = distributed.all_reduce_sum(loss_sum)
        count = int(distributed.all_reduce_sum(torch.tensor(count, device=self.device)).item())
        metrics = {"loss": float(loss_sum.item() / max(count, 1))}
        elapsed = max(float(distributed.all_reduce_sum(torch.tensor(clock.elapsed_s, device=self.device)).item()) / distributed.world_size(), 1e-9)
        metrics["time_s"] = elapsed
        metrics["samples_per_s"] = count / elapsed
        if self.predict_fn is not None:
            metrics.update(self._metrics(predictions, references))
        return metrics

    def _metrics(self, predictions: list[torch.Tensor], references: list[torch.Tensor]) -> dict[str, Any]:
        # Integer predictions are labels (classification): references become labels too
        # (BCE targets arrive as 0./1. floats). Float predictions are values (regression):
        # both stay floats (fp32: bf16 outputs would round the metric's inputs).
        local_preds = torch.cat(predictions).reshape(-1).cpu() if predictions else torch.empty(0, dtype=torch.long)
        local_refs = torch.cat(references).reshape(-1).cpu() if references else torch.empty(0, dtype=torch.long)
        classification = not local_preds.is_floating_point()
        kind = torch.long if classification else torch.float32
        preds = torch.cat(distributed.all_gather_objects(local_preds.to(kind)))
        refs = torch.cat(distributed.all_gather_objects(local_refs.to(kind)))
        if self.metric is not None:
            computed = self.metric.compute(predictions=preds.tolist(), references=refs.tolist())
            return {k: _plain(v) for k, v in computed.items()}
        if classification:
            return {"accuracy": float((preds == refs).double().mean())}
        return {}

    def evaluate_only(self) -> RunResult:
        """Evaluate without training (e.g. a saved model at this precision).

        Returns a RunResult with ``steps == 0``; its ``eval`` holds the metrics and the
        inference speed, its peak memory is that of inference alone.

        Usage: ``Trainer(model, opt, loss_fn, [], eval_loader=test, precision="bf16").evaluate_only()``
        """
        memory = PeakMemory(self.device)
        with configure_matmul(self.precision, self.device), memory:
            metrics = self.evaluate()
        self.state.eval_history.append({"epoch": 0, "step": 0, **metrics})
        return self._result(memory, None)

    def predict(self, loader) -> torch.Tensor:
        """Model outputs for every batch of ``loader``, computed under autocast, returned fp32 on CPU.

        Usage: ``logits = trainer.predict(test_loader)``
        """
        was_training = self.model.training
        self.model.eval()
        outs = []
        try:
            with configure_matmul(self.precision, self.device), torch.inference_mode():
                for batch in loader:
                    inputs, _ = self._split(batch)
                    with self.autocast():
                        outputs = self._forward(inputs, self.module)
                    outs.append(outputs.float().cpu())
        finally:
            self.model.train(was_training)
        return torch.cat(outs) if outs else torch.empty(0)

    def _evaluate_epoch(self, epoch: int) -> dict[str, float]:
        if self.eval_loader is None:
            return {}
        metrics = self.evaluate()
        self.state.eval_history.append({"epoch": epoch, "step": self.state.step, **metrics})
        return metrics

    # --------------------------------------------------------------- checkpoints
    def state_dict(self) -> dict[str, Any]:
        """Everything the rest of the run depends on (what ``mixft.checkpoint`` saves).

        Model, optimizers, LR schedulers, GradScaler, the ``TrainState`` as plain Python
        (history tensors read back as floats: a host sync) and the RNG states, now and at
        the start of the current epoch. Take it between optimizer steps (``on_step_end``,
        ``on_epoch_end``); the tensors are the live ones, so save them at once.

        Usage: ``torch.save(trainer.state_dict(), "ckpt.pt")``
        """
        state = self.state
        loop = {f.name: getattr(state, f.name) for f in fields(TrainState)}
        loop["history"] = {k: _floats(v) if k in ("loss", "grad_norm") else list(v) for k, v in state.history.items()}
        loop["eval_history"] = [{k: _plain(v) for k, v in e.items()} for e in state.eval_history]
        if self._clock is not None:  # mid-fit: this fit's time and tokens are not in state yet
            clock = self._clock
            # The Stopwatch adds an open `with` block only when it closes.
            running = time.perf_counter() - clock._t0 if clock._t0 is not None else 0.0
            loop["train_time_s"] = state.train_time_s + clock.elapsed_s + running
            loop["tokens"] = state.tokens + int(self._tokens_seen.item())
        return {
            "model": self.module.state_dict(),  # without a DDP wrapper's "module." prefix
            "optimizers": [opt.state_dict() for opt in self.optimizers],
            "lr_schedulers": [sched.state_dict() for sched in self.lr_schedulers],
            "scaler": self.scaler.state_dict(),  # {} without a scaler
            "loop": loop,
            "rng": {"now": capture_rng_state(), "epoch_start": self._epoch_rng},
        }

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Continue from ``state_dict()``: the next ``fit()`` picks up where it was taken.

        Build the trainer exactly as before (same model, optimizer, scheduler, loader,
        precision); ``fit`` then skips the micro-batches already trained and restores the
        RNGs, so the run ends with the weights it would have had without the stop.

        Usage: ``trainer.load_state_dict(torch.load("ckpt.pt")); trainer.fit()``
        """
        sd = state_dict
        if len(sd["optimizers"]) != len(self.optimizers) or len(sd["lr_schedulers"]) != len(self.lr_schedulers):
            raise ValueError(
                f"the state has {len(sd['optimizers'])} optimizer(s) and {len(sd['lr_schedulers'])} scheduler(s), "
                f"this trainer {len(self.optimizers)} and {len(self.lr_schedulers)}"
            )
        if bool(sd["scaler"]) != self.scaler.is_enabled():
            raise ValueError("the state's GradScaler does not match this trainer's precision")
        self.module.load_state_dict(sd["model"])
        for opt, opt_state in zip(self.optimizers, sd["optimizers"]):
            opt.load_state_dict(opt_state)
        for sched, sched_state in zip(self.lr_schedulers, sd["lr_schedulers"]):
            sched.load_state_dict(sched_state)
        if sd["scaler"]:
            self.scaler.load_state_dict(sd["scaler"])
        self.state = TrainState(**sd["loop"])
        self._resume_rng = sd.get("rng")  # fit() puts the RNGs back at the right moments

    def _start_epoch_rng(self) -> None:
        # The epoch's loader draws from the global RNG as it starts (sampler and worker
        # seeds). Resuming mid-epoch replays that from the epoch's start state; the state
        # of the checkpoint takes over once the trained micro-batches are skipped.
        pending = self._resume_rng
        if pending is not None:
            if self.state.batch_in_epoch and pending.get("epoch_start") is not None:
                restore_rng_state(pending["epoch_start"])
            else:
                self._finish_resume_rng()
        self._epoch_rng = capture_rng_state()

    def _finish_resume_rng(self) -> None:
        if self._resume_rng is not None:
            restore_rng_state(self._resume_rng["now"])
            self._resume_rng = None

    # ------------------------------------------------------------------- helpers
    def _epoch_batches(self, epoch: int):
        # Samplers with set_epoch (distributed, length-grouped) reshuffle per epoch from
        # (seed, epoch): the order is reproducible, which resuming relies on.
        for obj in (getattr(self.train_loader, "sampler", None), getattr(self.train_loader, "batch_sampler", None)):
            if hasattr(obj, "set_epoch"):
                obj.set_epoch(epoch)
        return iter(self.train_loader)

    def _split(self, batch):
        """(inputs, labels) on the device. Copies are non-blocking: pinned memory overlaps them."""
        if isinstance(batch, Mapping):
            batch = {k: _to(v, self.device) for k, v in batch.items()}
            labels = batch.pop("labels")
            return batch, labels
        if isinstance(batch, (list, tuple)) and len(batch) == 2:
            return _to(batch[0], self.device), _to(batch[1], self.device)
        raise TypeError(
            "a batch must be a mapping with a 'labels' key or an (inputs, labels) pair, "
            f"got {type(batch).__name__}"
        )

    def _forward(self, inputs, model: nn.Module | None = None):
        model = self.model if model is None else model
        return model(**inputs) if isinstance(inputs, Mapping) else model(inputs)

    def _no_sync(self, skip_sync: bool):
        if skip_sync and hasattr(self.model, "no_sync"):
            return self.model.no_sync()
        return contextlib.nullcontext()

    def _budget_spent(self) -> bool:
        return self.max_steps is not None and self.state.step >= self.max_steps

    def _planned_steps(self) -> int | None:
        n_batches = _len_or_none(self.train_loader)
        if n_batches is None:
            return self.max_steps
        per_epoch = math.ceil(n_batches / self.grad_accum)
        total = per_epoch * self.epochs
        return min(total, self.max_steps) if self.max_steps is not None else total

    def _build_schedulers(self, lr_scheduler) -> list:
        if lr_scheduler is None:
            return []
        if isinstance(lr_scheduler, (list, tuple)):
            return list(lr_scheduler)
        if callable(lr_scheduler) and not hasattr(lr_scheduler, "step"):
            if self.total_steps is None:
                raise ValueError("a scheduler factory needs a sized train_loader or max_steps")
            return [lr_scheduler(opt, self.total_steps) for opt in self.optimizers]
        return [lr_scheduler]

    def _check_parameter_dtypes(self) -> None:
        # GradScaler refuses to unscale fp16 gradients ("Attempting to unscale FP16
        # gradients") — but only at the first step. Say so now, with the fix.
        if not self.precision.grad_scaler:
            return
        half = sorted({str(p.dtype).removeprefix("torch.") for p in self.params if p.dtype in (torch.float16, torch.bfloat16)})
        if half:
            raise UsageError(
                f"precision {self.precision.name} with a GradScaler needs fp32 master weights, but the model has "
                f"{'/'.join(half)} parameters; load it in float32 (e.g. model.float() or torch_dtype=torch.float32) "
                "and let autocast run the half-precision math"
            )

    def _result(self, memory: PeakMemory, stop: StopTraining | None) -> RunResult:
        state = self.state
        hist = state.history
        # One transfer for the whole history instead of one sync per step (a resumed run's
        # history starts with the floats its checkpoint held).
        hist["loss"], hist["grad_norm"] = _floats(hist["loss"]), _floats(hist["grad_norm"])
        final_eval = dict(state.eval_history[-1]) if state.eval_history else {}
        for key in ("epoch", "step"):
            final_eval.pop(key, None)
        time_s = state.train_time_s
        return RunResult(
            precision=self.precision.name,
            autocast_dtype=self.precision.autocast_dtype_name,
            grad_scaler=self.precision.grad_scaler,
            device=self.device.type,
            device_name=device_name(self.device),
            steps=state.step,
            skipped_steps=state.skipped_steps,
            final_loss_scale=self.scaler.get_scale() if self.scaler.is_enabled() else None,
            train_time_s=time_s,
            train_samples_per_s=state.samples / time_s if time_s > 0 else 0.0,
            train_tokens_per_s=(state.tokens / time_s if time_s > 0 and state.tokens else None),
            peak_memory_bytes=memory.peak_bytes,
            peak_memory_kind=memory.kind,
            start_memory_bytes=memory.start_bytes,
            eval=final_eval,
            eval_history=list(state.eval_history),
            history=hist,
            seed=self.seed,
            model=self.run_info.get("model"),
            dataset=self.run_info.get("dataset"),
            config=dict(self.run_info.get("config", {})),
            task=self.run_info.get("labels"),
            stopped_early=None if stop is None else (str(stop) or "stopped by a callback"),
            stop_kind=None if stop is None else stop.kind,
        )


def _floats(values: list) -> list:
    """Device scalars -> Python floats in one transfer; floats pass through."""
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    if not tensors:
        return list(values)
    read = iter(torch.stack([t.float() for t in tensors]).tolist())
    return [next(read) if isinstance(v, torch.Tensor) else v for v in values]


def _plain(value):
    # Metrics may hand back numpy or torch scalars; checkpoints hold plain Python.
    return value.item() if hasattr(value, "item") and not isinstance(value, (list, dict)) else value


def _to(value, device: torch.device):
    if isinstance(value, torch.Tensor):
        return value.to(device, non_blocking=True)
    return value


def _grad_norm(opt: torch.optim.Optimizer, device: torch.device) -> torch.Tensor:
    """The 2-norm of ``opt``'s gradients (0 when it has none yet), on the device."""
    grads = [p.grad for group in opt.param_groups for p in group["params"] if p.grad is not None]
    return torch.nn.utils.get_total_norm(grads, norm_type=2.0) if grads else torch.zeros((), device=device)


def _batch_size(labels) -> int:
    return int(labels.shape[0]) if isinstance(labels, torch.Tensor) and labels.dim() > 0 else 1


def _len_or_none(loader) -> int | None:
    try:
        return len(loader)
    except TypeError:
        return None
