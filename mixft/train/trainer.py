"""The training loop: autocast + GradScaler with unscale-then-clip, written out in one place.

Usage (any ``nn.Module``, loss and dataloaders; not only recipes)::

    trainer = Trainer(model, torch.optim.AdamW(model.parameters(), lr=2e-5),
                      nn.BCEWithLogitsLoss(), train_loader, eval_loader=eval_loader,
                      precision="bf16", epochs=2)
    result = trainer.fit()          # RunResult: accuracy, time, memory, skipped steps...

Batches are either a mapping with a ``labels`` key (the rest is passed to
``model(**inputs)``, as Hugging Face collators produce) or an ``(inputs, labels)`` pair
(passed as ``model(inputs)``); see ``mixft.batch``.

The run (``Trainer._fit``)::

    for each epoch:
        for each window of grad_accum micro-batches:
            one optimizer step (below)
            evaluate every eval_steps steps             # -> Callback.on_evaluate
            Callback.on_step_end                         # StopTraining ends the run
            stop when max_steps is reached
        evaluate (unless this step already was)          # -> on_evaluate, on_epoch_end

One optimizer step (``Trainer._train_window``; one code path for fp32/tf32/fp16/bf16:
the switches are ``enabled=`` flags, and with ``enabled=False`` the scaler is a no-op)::

    for each micro-batch i of the window (n_i samples, n in all):
        with autocast(device_type, dtype, enabled):      # forward + loss only
            loss = loss_fn(model(**inputs), labels) * n_i / n
        scaler.scale(loss).backward()                      # outside autocast; DDP syncs at the last
    for opt in optimizers: scaler.unscale_(opt)            # real gradient values from here on
    norms = [2-norm of opt's grads for each opt]           # one foreach call for every gradient
    stepped = [norm is finite for each opt]                # per optimizer; one host sync
    clip_grads_with_norm_(params of stepped opts, max_norm, their joint norm)   # *unscaled*
    for opt in stepped optimizers: scaler.step(opt)
    scaler.update()
    for sched: if its optimizer stepped: sched.step()      # skipped steps hold the schedule
    for opt in optimizers: opt.zero_grad(set_to_none=True)

Windows hold ``grad_accum`` micro-batches; an epoch's last window may be shorter, and is
stepped like the others (loaders without ``len()`` included). Evaluation is not training
time: it runs outside the training clock. fit, evaluate, evaluate_only and predict run
under the precision's TF32 setting and restore the process's own afterwards.

Around the loop, each in its own module: ``mixft.train.hooks`` (Callback, StepInfo,
StopTraining), ``mixft.train.evaluation`` (evaluate, predict, metrics), ``mixft.train.meter`` (time,
samples, tokens, memory, the RunResult), ``mixft.train.state`` (TrainState),
``mixft.rng.ResumeRng`` (RNG states across a resume), ``mixft.train.optim.planned_steps``.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from mixft import distributed
from mixft.amp.precision import Precision, configure_matmul, resolve_device, resolve_precision
from mixft.batch import batch_size, forward, split_batch
from mixft.errors import UsageError
from mixft.log import logger
from mixft.options import NON_NEGATIVE_INT, POSITIVE_INT
from mixft.results import RunResult
from mixft.rng import ResumeRng, seed_all
from mixft.train import evaluation
from mixft.train.hooks import Callback, StepInfo, StopTraining
from mixft.train.meter import TrainMeter
from mixft.train.optim import build_schedulers, planned_steps
from mixft.train.pure_bf16 import check_optimizers
from mixft.train.state import TrainState

OptimizerLike = torch.optim.Optimizer | Callable[..., torch.optim.Optimizer]


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
        precision: "fp32", "tf32", "fp16", "bf16", "bf16-pure", "bf16-true", "amp" (a notebook's name, resolved
            here for ``device`` by ``resolve_precision``) or a ``Precision`` already resolved for it, taken as it
            is (the run layer resolves each run's once, not twice). The pure ones cast the model to bf16 here and
            need a compensated optimizer: mixft.train.pure_bf16.
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
        eval_steps: also evaluate every this many optimizer steps (0: at epoch ends only);
            each evaluation goes to ``state.eval_history`` and ``Callback.on_evaluate``.
        predict_fn: ``outputs -> predictions`` for metrics at evaluation: integer labels
            (classification) or floats (regression), kept in their kind.
        metric: any object with ``compute(predictions=list, references=list) -> dict``
            (an ``evaluate`` metric or a combination); every value goes into the eval
            dict. Without one, classification reports ``accuracy``.
        seed: seeds torch, Python's ``random`` and numpy at the start of ``fit`` (``mixft.rng.seed_all``),
            so dropout draws match across precisions and a run's every draw repeats.
        skip_nonfinite_steps: without a GradScaler (fp32/bf16), skip an optimizer step
            whose gradient norm is inf/NaN instead of writing NaN into the weights. Costs
            one host sync per optimizer step (not per micro-step).
        scaler_kwargs: passed to ``torch.amp.GradScaler`` (e.g. ``init_scale``).
        callbacks: ``Callback`` instances.
        loss_hook: ``f(trainer, loss, outputs, inputs) -> loss`` called after the forward
            pass (outside autocast, before scaling): adds terms such as a gradient
            penalty (see ``mixft.amp.penalties.gradient_penalty``, which unscales by hand).
        run_info: extra fields for the RunResult (``model``, ``dataset``, ``labels``); the run's options
            (its ``config``) are the run layer's to record (``mixft.runs.identity.recorded_config``, made once in the plan).
        fsdp: shard the model over the process group with FSDP2 (``mixft.train.fsdp``) instead of
            wrapping it in DDP: needs a process group of 2 or more (torchrun) and a model
            with transformer blocks. The step below is unchanged: gradients are sharded
            DTensors and each optimizer's norm is made whole (the same on every process).
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
        eval_steps: int = 0,
        predict_fn: Callable[[Any], torch.Tensor] | None = None,
        metric=None,
        seed: int | None = None,
        skip_nonfinite_steps: bool = True,
        scaler_kwargs: dict[str, Any] | None = None,
        callbacks: Sequence[Callback] = (),
        loss_hook: Callable[[Trainer, torch.Tensor, Any, Any], torch.Tensor] | None = None,
        run_info: dict[str, Any] | None = None,
        fsdp: bool = False,
    ):
        _check_loop_options(grad_accum, epochs, eval_steps, max_steps, max_grad_norm)
        self.device = resolve_device(device)
        self.precision = precision if isinstance(precision, Precision) else resolve_precision(precision, self.device)
        # "amp" chooses its precision here, so a notebook's scale for the fp16 it may become is not refused.
        if scaler_kwargs and not self.precision.grad_scaler and not (isinstance(precision, str) and precision == "amp"):
            raise UsageError(
                f"precision {self.precision.name} has no GradScaler: scaler_kwargs {scaler_kwargs} "
                "would be ignored (loss scaling is fp16's)"
            )
        init_scale = (scaler_kwargs or {}).get("init_scale")
        if init_scale is not None and not (isinstance(init_scale, (int, float)) and 0 < init_scale < math.inf):
            # Was: 0 or a negative scale accepted, every step skipped (the scale never recovers), no word.
            raise UsageError(f"scaler_kwargs init_scale must be a positive finite number, got {init_scale!r}")
        self.fsdp = fsdp
        self.model = self._placed(model)
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
        self.eval_steps = eval_steps
        self.predict_fn = predict_fn
        self.metric = metric
        self.seed = seed
        self.skip_nonfinite_steps = skip_nonfinite_steps
        self.callbacks = list(callbacks)
        self.loss_hook = loss_hook
        self.run_info = dict(run_info or {})
        _check_master_weights(self.precision, self.params)
        check_optimizers(self.precision, self.optimizers)  # bf16-pure: a compensated optimizer, or UsageError

        # enabled=False makes the scaler a no-op: scale() returns the loss, step() just steps.
        self.scaler = torch.amp.GradScaler(
            self.device.type, enabled=self.precision.grad_scaler, **(scaler_kwargs or {})
        )
        self.total_steps = planned_steps(_len_or_none(train_loader), grad_accum, epochs, max_steps)
        self.lr_schedulers = build_schedulers(lr_scheduler, self.optimizers, self.total_steps)
        self.state = TrainState()
        self._rng = ResumeRng()  # RNG states a checkpoint saves and a resumed fit restores
        self._left_off: dict | None = None  # the RNG states where a later fit() of this trainer goes on
        self._meter: TrainMeter | None = None  # this fit's clock and counters (state_dict reads them mid-run)

    def _placed(self, model: nn.Module) -> nn.Module:
        """``model`` on this trainer's device in its precision: sharded (fsdp), DDP-wrapped under a launcher, or as is."""
        if self.fsdp:
            if self.precision.param_dtype is not None:
                raise UsageError(
                    f"precision {self.precision.name} with fsdp: FSDP2 keeps fp32 shards and gathers "
                    "them in bf16 (its mixed-precision policy); use bf16 or fp32 with --fsdp"
                )
            # Sharded on the CPU, before any move: fully_shard moves only this process's shards
            # to the device (a model larger than one GPU must never be moved whole).
            return _sharded(model, self.precision, self.device)
        # The model must be on its device (and, for bf16-pure, in bf16) before a factory builds
        # the optimizer, or the optimizer's state would be created for the wrong tensors.
        model = model.to(self.device, dtype=self.precision.param_dtype)
        # Under a launcher (torchrun / accelerate launch) this is a DDP wrapper; the bare
        # module stays reachable as ``self.module`` (saving, evaluation).
        return distributed.wrap_model(model, self.device)

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
        return self._meter.untimed() if self._meter is not None else contextlib.nullcontext()

    def autocast(self):
        """The autocast context for this run's precision (a no-op for fp32/tf32)."""
        dtype = self.precision.autocast_dtype or torch.float32
        return torch.autocast(self.device.type, dtype=dtype, enabled=self.precision.autocast_enabled)

    # ------------------------------------------------------------------ training
    def fit(self) -> RunResult:
        """Train for the budget, evaluating after every epoch (and every ``eval_steps``); returns the RunResult.

        Usage: ``result = trainer.fit(); result.eval["accuracy"]``
        """
        with configure_matmul(self.precision, self.device):  # this run's TF32 setting, restored after
            return self._fit()

    def _fit(self) -> RunResult:
        if self._left_off is not None and not self._rng.loaded:
            # A second fit() of this trainer (a larger max_steps, say) goes on as one unbroken fit would: the RNGs
            # as the first left them and its epoch's start replayed for the data order, as a checkpoint resumes;
            # reseeding would repeat the dropout draws, and a new shuffle would skip other batches than it trained.
            self._rng.load(self._left_off)
        elif self.seed is not None:
            seed_all(self.seed)
        self._tell("on_train_begin")
        state, meter = self.state, TrainMeter(self.device)
        stop: StopTraining | None = None
        meter.start(state)
        self._meter = meter
        try:
            while state.epoch < self.epochs and not self._budget_spent():
                self.model.train()
                self._rng.start_epoch(mid_epoch=state.batch_in_epoch > 0)
                with meter.clock:
                    for window in self._windows(state.epoch):
                        self._rng.catch_up()
                        info = self._train_window(window)
                        if self.eval_steps and state.step % self.eval_steps == 0:
                            self._evaluate_during_fit(epoch=state.epoch + 1)  # the epoch under way
                        self._tell("on_step_end", info)
                        if self._budget_spent():
                            break
                self._rng.catch_up()  # resumed at the end of an epoch: no batch left to train
                self._left_off = self._rng.state()  # stopped part-way: go on from before this evaluation
                self._tell("on_epoch_end", self._end_epoch())
                if state.batch_in_epoch == 0:  # the epoch ended: the next one starts after its evaluation
                    self._left_off = self._rng.state()
        except StopTraining as e:
            self._left_off = self._rng.state()
            stop = e
            logger.warning("training stopped early: %s", str(e) or "stopped by a callback")
        finally:
            meter.stop()
            self._meter = None
        meter.gather()  # under data parallelism: every rank's samples and tokens
        result = meter.result(self, stop)
        self._tell("on_train_end", result)
        return result

    def _train_window(self, window: list) -> StepInfo:
        """One accumulation window, one optimizer step: the AMP step of the module docstring."""
        batches = [split_batch(batch, self.device) for batch in window]  # (inputs, labels) on the device
        sizes = [batch_size(labels) for _, labels in batches]
        window_loss = torch.zeros((), device=self.device)
        for i, ((inputs, labels), n) in enumerate(zip(batches, sizes)):
            # Under DDP, all-reduce the gradients once per window (at its last backward).
            with self._no_sync(i < len(batches) - 1):
                with self.autocast():  # forward + loss only
                    outputs = forward(self.model, inputs)
                    # Weighted by samples, not by count: a window of sizes [4, 2] is one batch of 6.
                    loss = self.loss_fn(outputs, labels) * (n / sum(sizes))
                if self.loss_hook is not None:
                    loss = self.loss_hook(self, loss, outputs, inputs)
                # Outside autocast: backward ops run in the dtypes their forward ops chose.
                self.scaler.scale(loss).backward()
            window_loss += loss.detach()
            self._meter.count(inputs, n)
        self.state.batch_in_epoch += len(window)
        for cb in self.callbacks:
            cb.on_before_optimizer_step(self)  # gradients still scaled here
        lr = self.optimizer.param_groups[0]["lr"]

        for opt in self.optimizers:  # every one: from here on .grad holds real values
            self.scaler.unscale_(opt)
        norms = grad_norms(self.optimizers, self.device)  # unscaled, per optimizer
        stepped = self._may_step(norms)  # per optimizer: an inf in one does not hold back another
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
        # Samplers with set_epoch (distributed, length-grouped) reshuffle per epoch from
        # (seed, epoch): the order is reproducible, which resuming relies on.
        for obj in (getattr(self.train_loader, "sampler", None), getattr(self.train_loader, "batch_sampler", None)):
            if hasattr(obj, "set_epoch"):
                obj.set_epoch(epoch)
        trained = self.state.batch_in_epoch
        window: list = []
        for index, batch in enumerate(self.train_loader):
            if index < trained:
                continue
            window.append(batch)
            if len(window) == self.grad_accum:
                yield window
                window = []
        if window:
            yield window

    def _may_step(self, norms: list[torch.Tensor]) -> list[bool]:
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
        total = torch.linalg.vector_norm(torch.stack(live))
        params = [p for opt, ok in zip(self.optimizers, stepped) if ok for g in opt.param_groups for p in g["params"]]
        torch.nn.utils.clip_grads_with_norm_(params, self.max_grad_norm, total)

    def _scheduler_may_step(self, sched, stepped: list[bool]) -> bool:
        # Each scheduler follows its own optimizer; one that names none waits for all of them.
        by_optimizer = {id(opt): ok for opt, ok in zip(self.optimizers, stepped)}
        return by_optimizer.get(id(getattr(sched, "optimizer", None)), all(stepped))

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

    def _end_epoch(self) -> dict[str, float]:
        """Close the epoch when all its micro-batches are trained (``max_steps`` may end it part-way), then evaluate."""
        state = self.state
        n_batches = _len_or_none(self.train_loader)
        if not self._budget_spent() or (n_batches is not None and state.batch_in_epoch >= n_batches):
            state.epoch += 1
            state.batch_in_epoch = 0
            return self._evaluate_during_fit(epoch=state.epoch)
        return self._evaluate_during_fit(epoch=state.epoch + 1)

    # ---------------------------------------------------------------- evaluation
    def evaluate(self, loader=None) -> dict[str, float]:
        """Mean loss (and the metrics, with ``predict_fn``) over ``loader`` (default: ``eval_loader``), under autocast.

        ``time_s`` and ``samples_per_s`` are the inference speed at this precision (see
        ``mixft.train.evaluation.evaluate``).

        Usage: ``trainer.evaluate()["accuracy"]``
        """
        return evaluation.evaluate(self, loader)

    def evaluate_only(self) -> RunResult:
        """Evaluate without training: a RunResult with ``steps == 0`` (e.g. a saved model at this precision).

        Usage: ``Trainer(model, opt, loss_fn, [], eval_loader=test, precision="bf16").evaluate_only()``
        """
        return evaluation.evaluate_only(self)

    def predict(self, loader) -> torch.Tensor:
        """Model outputs for every example of ``loader``, computed under autocast, returned fp32 on CPU, in the
        dataset's order (an evaluation loader's longest-first batches are put back).

        Usage: ``logits = trainer.predict(test_loader)``
        """
        return evaluation.predict(self, loader)

    def _evaluate_during_fit(self, epoch: int) -> dict[str, float]:
        """Evaluate once at this step (outside the training clock), record it, tell ``on_evaluate``.

        ``epoch`` is 1-based: the epoch just finished or under way. The end of an epoch whose
        last step was just evaluated (``eval_steps``) reuses that evaluation.
        """
        state = self.state
        if self.eval_loader is None:
            return {}
        last = state.eval_history[-1] if state.eval_history else None
        if last is not None and (last.get("epoch"), last.get("step")) == (epoch, state.step):
            return {k: v for k, v in last.items() if k not in ("epoch", "step")}
        with self.untimed():
            metrics = self.evaluate()
            state.eval_history.append({"epoch": epoch, "step": state.step, **metrics})
            self._tell("on_evaluate", metrics)
        return metrics

    # --------------------------------------------------------------- checkpoints
    def state_dict(self) -> dict[str, Any]:
        """Everything the rest of the run depends on (what ``mixft.train.checkpoint`` saves).

        Model, optimizers, LR schedulers, GradScaler, the ``TrainState`` as plain Python
        (history tensors read back as floats: a host sync) and the RNG states, now and at
        the start of the current epoch. Take it between optimizer steps (``on_step_end``,
        ``on_epoch_end``); the tensors are the live ones, so save them at once.

        Usage: ``torch.save(trainer.state_dict(), "ckpt.pt")``
        """
        return {
            "model": self.module.state_dict(),  # without a DDP wrapper's "module." prefix
            "optimizers": [opt.state_dict() for opt in self.optimizers],
            **self.loop_state_dict(),
        }

    def loop_state_dict(self) -> dict[str, Any]:
        """``state_dict()`` without the model and optimizers: schedulers, GradScaler, loop, RNGs (plain
        objects; a sharded run's checkpoint, ``mixft.train.sharded_checkpoint``, saves the model apart)."""
        loop = self.state.to_plain()
        if self._meter is not None:  # mid-fit: this fit's time and tokens are not in state yet
            loop.update(self._meter.so_far())
        return {
            "lr_schedulers": [sched.state_dict() for sched in self.lr_schedulers],
            "scaler": self.scaler.state_dict(),  # {} without a scaler
            "loop": loop,
            "rng": self._rng.state(),
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
        if bool(sd["scaler"]) != self.scaler.is_enabled():  # refused before anything is loaded
            raise ValueError("the state's GradScaler does not match this trainer's precision")
        self.module.load_state_dict(sd["model"])
        for opt, opt_state in zip(self.optimizers, sd["optimizers"]):
            opt.load_state_dict(opt_state)
        self.load_loop_state_dict(sd)

    def load_loop_state_dict(self, sd: Mapping[str, Any]) -> None:
        """Put back what ``loop_state_dict()`` holds (after the model and optimizers)."""
        if len(sd["lr_schedulers"]) != len(self.lr_schedulers):
            raise ValueError(
                f"the state has {len(sd['lr_schedulers'])} scheduler(s), this trainer {len(self.lr_schedulers)}"
            )
        if bool(sd["scaler"]) != self.scaler.is_enabled():
            raise ValueError("the state's GradScaler does not match this trainer's precision")
        for sched, sched_state in zip(self.lr_schedulers, sd["lr_schedulers"]):
            sched.load_state_dict(sched_state)
        if sd["scaler"]:
            self.scaler.load_state_dict(sd["scaler"])
        self.state = TrainState(**sd["loop"])
        self._rng.load(sd.get("rng"))  # fit() puts the RNGs back at the right moments

    # ------------------------------------------------------------------- helpers
    def _tell(self, hook: str, *args) -> None:
        for cb in self.callbacks:
            getattr(cb, hook)(self, *args)

    def _no_sync(self, skip_sync: bool):
        if skip_sync and hasattr(self.model, "no_sync"):
            return self.model.no_sync()
        return contextlib.nullcontext()

    def _budget_spent(self) -> bool:
        return self.max_steps is not None and self.state.step >= self.max_steps


def grad_norms(optimizers: Sequence[torch.optim.Optimizer], device: torch.device) -> list[torch.Tensor]:
    """Each optimizer's gradient 2-norm (0 when it has none yet), on the device, in fp32.

    Every parameter's norm comes from one ``torch._foreach_norm`` call over all the
    optimizers' gradients (fp32 accumulation, whatever the gradients' dtype); an
    optimizer's norm is the 2-norm of its parameters' norms, as ``get_total_norm``'s.

    Usage: ``grad_norms(trainer.optimizers, trainer.device)`` after ``scaler.unscale_``
    """
    grads = [
        [p.grad for group in opt.param_groups for p in group["params"] if p.grad is not None] for opt in optimizers
    ]
    every = [g for opt_grads in grads for g in opt_grads]
    per_param = torch._foreach_norm(every, 2.0, dtype=torch.float32) if every else []
    norms, start = [], 0
    for opt_grads in grads:
        own = per_param[start : start + len(opt_grads)]
        start += len(opt_grads)
        norm = torch.linalg.vector_norm(torch.stack(own)) if own else torch.zeros((), device=device)
        # FSDP's sharded gradients: stacking their partial norms all-reduces once (a replicated
        # DTensor); its local value is the whole norm, the same on every process.
        norms.append(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
    return norms


def _sharded(model: nn.Module, precision: Precision, device: torch.device) -> nn.Module:
    """``model`` sharded by FSDP2 over a process group of 2 or more, or UsageError (one line)."""
    from . import fsdp

    if not distributed.is_distributed():
        raise UsageError(fsdp.NO_LAUNCHER)
    return fsdp.shard_model(model, precision, device)


def _check_master_weights(precision: Precision, params: list[nn.Parameter]) -> None:
    # GradScaler refuses to unscale fp16 gradients ("Attempting to unscale FP16
    # gradients") — but only at the first step. Say so now, with the fix.
    if not precision.grad_scaler:
        return
    half = sorted({str(p.dtype).removeprefix("torch.") for p in params if p.dtype in (torch.float16, torch.bfloat16)})
    if half:
        raise UsageError(
            f"precision {precision.name} with a GradScaler needs fp32 master weights, but the model has "
            f"{'/'.join(half)} parameters; load it in float32 (e.g. model.float() or torch_dtype=torch.float32) "
            "and let autocast run the half-precision math"
        )


def _len_or_none(loader) -> int | None:
    try:
        return len(loader)
    except TypeError:
        return None


def _check_loop_options(grad_accum, epochs, eval_steps, max_steps, max_grad_norm) -> None:
    """The loop's own numbers, before anything is moved or built (a ValueError names the bad one)."""
    POSITIVE_INT.validate("grad_accum", grad_accum)
    POSITIVE_INT.validate("epochs", epochs)
    NON_NEGATIVE_INT.validate("eval_steps", eval_steps)
    if max_steps is not None:
        POSITIVE_INT.validate("max_steps", max_steps)
    if max_grad_norm is not None and not (max_grad_norm > 0 and math.isfinite(max_grad_norm)):
        raise ValueError(f"max_grad_norm must be a positive finite number or None, got {max_grad_norm}")
