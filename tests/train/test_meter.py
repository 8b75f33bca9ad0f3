"""TrainMeter: samples, tokens, training time (with its untimed stretches) and the RunResult it builds."""

from __future__ import annotations

import time

import torch
from torch import nn

from mixft.train.meter import TrainMeter
from mixft.train.state import TrainState
from mixft.train.trainer import Trainer


def test_counts_samples_and_attention_mask_tokens_into_the_state():
    state = TrainState(samples=5, tokens=7)  # a resumed run's counts carry on
    meter = TrainMeter(torch.device("cpu"))
    meter.start(state)
    with meter.clock:
        meter.count({"input_ids": torch.zeros(2, 3), "attention_mask": torch.tensor([[1, 1, 0], [1, 0, 0]])}, 2)
        meter.count(torch.zeros(4, 8), 4)  # a plain tensor batch: samples, no tokens
        assert meter.so_far()["tokens"] == 7 + 3
    assert state.samples == 5 + 6 and state.tokens == 7  # tokens stay on the device until gather()
    meter.stop()
    meter.gather()
    assert (state.samples, state.tokens) == (11, 10)


def test_untimed_stretches_are_left_out_and_so_far_includes_the_open_block():
    state = TrainState(train_time_s=100.0)
    meter = TrainMeter(torch.device("cpu"))
    meter.start(state)
    with meter.clock:
        time.sleep(0.05)
        assert meter.so_far()["train_time_s"] >= 100.05  # mid-block, as a mid-run checkpoint reads it
        with meter.untimed():
            time.sleep(0.4)
    meter.stop()
    meter.gather()
    assert 100.05 <= state.train_time_s < 100.3
    with meter.untimed():  # outside the clock: nothing to pause
        pass


def test_the_run_result_reports_the_meters_figures():
    x, y = torch.randn(12, 4), torch.randn(12, 1)
    trainer = Trainer(
        nn.Linear(4, 1),
        lambda p: torch.optim.SGD(p, lr=0.1),
        nn.MSELoss(),
        [(x[:6], y[:6]), (x[6:], y[6:])],
        eval_loader=[(x, y)],
        epochs=2,
        seed=4,
        run_info={"model": "linear", "dataset": "toy"},
    )
    result = trainer.fit()
    assert (result.steps, result.seed, result.model, result.dataset) == (4, 4, "linear", "toy")
    assert trainer.state.samples == 24
    assert result.train_samples_per_s == trainer.state.samples / result.train_time_s
    assert result.train_tokens_per_s is None  # no attention mask: no tokens counted
    assert result.eval == {k: v for k, v in result.eval_history[-1].items() if k not in ("epoch", "step")}
    assert all(isinstance(v, float) for v in result.history["loss"] + result.history["grad_norm"])
    assert result.peak_memory_kind == "cpu_rss" and result.peak_memory_bytes >= result.start_memory_bytes > 0
