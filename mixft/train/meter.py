"""What a fit costs: training time, samples, tokens and peak memory, and the RunResult that reports them.

The loop talks to a ``TrainMeter`` in a few calls::

    meter = TrainMeter(device)
    meter.start(state)                   # memory gauge on, counters at zero
    with meter.clock:                    # training time (evaluation stays outside)
        ... meter.count(inputs, n) ...   # per micro-batch; tokens stay on the device
    meter.stop()                         # memory gauge off, time into state (also on errors)
    meter.gather()                       # samples and tokens summed over DDP ranks
    result = meter.result(trainer, stop)

Running sums stay on the device: reading them every micro-step would stall the GPU queue
(a host sync). They are read once, at the end.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import torch

from mixft import distributed
from mixft.results import RunResult
from mixft.train.measure import PeakMemory, Stopwatch, device_name
from mixft.train.pure_bf16 import optimizer_name
from mixft.train.state import TrainState, floats


class TrainMeter:
    """Clocks, counters and the memory gauge of one ``fit`` (or one ``evaluate_only``)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.clock = Stopwatch(device)
        self.memory = PeakMemory(device)
        self.state: TrainState | None = None  # the state being counted into, between start and stop
        self._tokens: torch.Tensor | None = None
        self._samples_before = 0

    def start(self, state: TrainState) -> None:
        """Start counting into ``state`` (its samples, tokens and training time)."""
        self.state = state
        self._samples_before = state.samples
        self._tokens = torch.zeros((), dtype=torch.int64, device=self.device)
        self.memory.start()

    def untimed(self):
        """Context that leaves its body out of the training time (a no-op while the clock is not running)."""
        return self.clock.paused()

    def count(self, inputs, n: int) -> None:
        """One micro-batch of ``n`` samples; tokens are its attention mask's ones."""
        self.state.samples += n
        if isinstance(inputs, Mapping) and "attention_mask" in inputs:
            self._tokens += inputs["attention_mask"].sum()  # stays on the device

    def so_far(self) -> dict[str, Any]:
        """``train_time_s`` and ``tokens`` including this fit's so far (for a mid-run checkpoint)."""
        clock = self.clock
        # The Stopwatch adds an open `with` block only when it closes.
        running = time.perf_counter() - clock._t0 if clock._t0 is not None else 0.0
        return {
            "train_time_s": self.state.train_time_s + clock.elapsed_s + running,
            "tokens": self.state.tokens + int(self._tokens.item()),
        }

    def stop(self) -> None:
        """Memory gauge off and this fit's time into the state; safe in a ``finally``."""
        self.memory.stop()
        self.state.train_time_s += self.clock.elapsed_s

    def gather(self) -> None:
        """This fit's samples and tokens into the state, summed over ranks: the global rate.

        A collective under data parallelism: call it on every rank, after a fit that ended
        normally (or by ``StopTraining``), never after an error.
        """
        state = self.state
        state.tokens += int(distributed.all_reduce_sum(self._tokens).item())
        local_samples = torch.tensor(state.samples - self._samples_before, device=self.device)
        state.samples = self._samples_before + int(distributed.all_reduce_sum(local_samples).item())
        self._tokens = None
        self.state = None

    def result(self, trainer, stop: Exception | None) -> RunResult:
        """The run's RunResult from ``trainer``'s state and this meter's memory figures.

        ``stop`` is the ``StopTraining`` that ended the run early, or None.
        """
        state = trainer.state
        hist = state.history
        # One transfer for the whole history instead of one sync per step (a resumed run's
        # history starts with the floats its checkpoint held).
        hist["loss"], hist["grad_norm"] = floats(hist["loss"]), floats(hist["grad_norm"])
        final_eval = dict(state.eval_history[-1]) if state.eval_history else {}
        for key in ("epoch", "step"):
            final_eval.pop(key, None)
        time_s = state.train_time_s
        precision, memory, info = trainer.precision, self.memory, trainer.run_info
        return RunResult(
            precision=precision.name,
            autocast_dtype=precision.autocast_dtype_name,
            grad_scaler=precision.grad_scaler,
            device=self.device.type,
            device_name=device_name(self.device),
            steps=state.step,
            skipped_steps=state.skipped_steps,
            final_loss_scale=trainer.scaler.get_scale() if trainer.scaler.is_enabled() else None,
            train_time_s=time_s,
            train_samples_per_s=state.samples / time_s if time_s > 0 else 0.0,
            train_tokens_per_s=(state.tokens / time_s if time_s > 0 and state.tokens else None),
            peak_memory_bytes=memory.peak_bytes,
            peak_memory_kind=memory.kind,
            start_memory_bytes=memory.start_bytes,
            eval=final_eval,
            eval_history=list(state.eval_history),
            history={key: list(values) for key, values in hist.items()},  # a copy: a later fit() appends to hist
            seed=trainer.seed,
            model=info.get("model"),
            dataset=info.get("dataset"),
            batch_shapes=info.get("batch_shapes"),
            task=info.get("labels"),
            stopped_early=None if stop is None else (str(stop) or "stopped by a callback"),
            stop_kind=None if stop is None else stop.kind,
            param_dtype=(None if precision.param_dtype is None else str(precision.param_dtype).removeprefix("torch.")),
            optimizer=optimizer_name(trainer.optimizers[0]) if trainer.optimizers else None,
        )
