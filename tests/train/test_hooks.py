"""The callback types: stop kinds, stop_kind_of, on_evaluate, and where the public API finds them."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import mixft
from mixft.results import RunResult
from mixft.train import hooks as callbacks
from mixft.train import trainer
from mixft.train.hooks import STOP_KINDS, Callback, StopTraining, stop_kind_of
from mixft.train.trainer import Trainer


def tiny_run(callbacks_, epochs=3, eval_steps=0):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(32, 4, generator=g)
    y = x.sum(1, keepdim=True)
    data = DataLoader(TensorDataset(x, y), batch_size=8)
    torch.manual_seed(0)
    return Trainer(
        nn.Linear(4, 1),
        lambda p: torch.optim.SGD(p, lr=0.01),
        nn.MSELoss(),
        data,
        eval_loader=data,
        epochs=epochs,
        eval_steps=eval_steps,
        callbacks=callbacks_,
    ).fit()


def test_every_stop_kind_is_accepted_and_early_stopping_is_one():
    assert STOP_KINDS == ("collapse", "interrupt", "callback", "early_stopping")
    for kind in STOP_KINDS:
        assert StopTraining("why", kind=kind).kind == kind
    assert StopTraining().kind == "callback"
    with pytest.raises(ValueError, match="early_stopping, got 'patience'"):
        StopTraining("no", kind="patience")


def test_on_evaluate_can_stop_a_run_as_early_stopping():
    class Patience(Callback):
        """Stops once the evaluation loss has not improved for ``patience`` evaluations (here: never improves enough)."""

        def __init__(self):
            self.losses = []

        def on_evaluate(self, trainer, metrics):
            self.losses.append(metrics["loss"])
            if len(self.losses) == 2:
                raise StopTraining("2 evaluations", kind="early_stopping")

    stopper = Patience()
    result = tiny_run([stopper], epochs=5, eval_steps=2)  # 4 steps per epoch: evaluations at steps 2, 4, ...
    assert result.stop_kind == "early_stopping" and result.stopped_early == "2 evaluations"
    assert result.steps == 4 and len(result.eval_history) == 2
    assert stopper.losses == [e["loss"] for e in result.eval_history]
    assert stop_kind_of(result.to_dict()) == "early_stopping"


def test_stop_kind_of_reads_results_and_run_dicts_only():
    result = tiny_run([], epochs=1)
    assert stop_kind_of(result) is None
    assert stop_kind_of({"stop_kind": "interrupt"}) == "interrupt"
    assert stop_kind_of({}) is None
    with pytest.raises(TypeError, match="RunResult"):
        stop_kind_of(["interrupt"])
    assert isinstance(result, RunResult)


def test_a_callback_that_overrides_nothing_changes_nothing():
    plain, hooked = tiny_run([], epochs=2), tiny_run([Callback()], epochs=2)
    assert plain.history == hooked.history
    assert [e["loss"] for e in plain.eval_history] == [e["loss"] for e in hooked.eval_history]


def test_the_public_names_are_the_callbacks_modules():
    for name in ("Callback", "StepInfo", "StopTraining"):
        assert getattr(mixft, name) is getattr(callbacks, name)
    assert trainer.Callback is callbacks.Callback  # the loop uses the same types
