"""Evaluation for every task kind (regression keeps float predictions, classification labels), and during training.

References are computed by hand from ``trainer.predict`` (the same model outputs).
"""

from __future__ import annotations

import io
import time

import pytest
import torch
from conftest import without_timings
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from mixft.train.hooks import Callback, StopTraining
from mixft.train.trainer import Trainer


def loader(x, y, batch_size=16):
    return DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=False)


class Seen:
    """A metric object that keeps what it was given and returns several values."""

    def __init__(self, compute):
        self.fn, self.calls = compute, []

    def compute(self, predictions, references):
        self.calls.append((predictions, references))
        return self.fn(predictions, references)


def regression_task(n=48):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 4, generator=g)
    return x, (x @ torch.tensor([1.5, -2.0, 0.5, 0.0])).unsqueeze(1) * 3.0  # targets well beyond [-1, 1]


def test_regression_keeps_float_predictions_and_references():
    x, y = regression_task()
    torch.manual_seed(0)
    metric = Seen(
        lambda p, r: {
            "mse": sum((a - b) ** 2 for a, b in zip(p, r)) / len(p),
            "pearson": float(torch.corrcoef(torch.tensor([p, r]))[0, 1]),
        }
    )
    trainer = Trainer(
        nn.Linear(4, 1),
        lambda p: torch.optim.SGD(p, lr=0.05),
        nn.MSELoss(),
        loader(x, y),
        eval_loader=loader(x, y),
        epochs=3,
        predict_fn=lambda out: out,
        metric=metric,
    )
    result = trainer.fit()
    preds, refs = metric.calls[-1]
    assert all(isinstance(v, float) for v in preds + refs)  # not truncated to integers
    assert refs == pytest.approx(y.reshape(-1).tolist())
    assert preds == pytest.approx(trainer.predict(loader(x, y)).reshape(-1).tolist(), rel=1e-6)
    expected_mse = float(((trainer.predict(loader(x, y)) - y) ** 2).mean())
    assert result.eval["mse"] == pytest.approx(expected_mse, rel=1e-5)
    assert result.eval["mse"] == pytest.approx(result.eval["loss"], rel=1e-5)  # MSELoss over the same data
    assert -1.0 <= result.eval["pearson"] <= 1.0
    assert "accuracy" not in result.eval  # no labels: accuracy would mean nothing


def test_regression_under_bf16_hands_the_metric_fp32_values():
    x, y = regression_task(16)
    metric = Seen(lambda p, r: {"n": len(p)})
    trainer = Trainer(
        nn.Linear(4, 1),
        lambda p: torch.optim.SGD(p, lr=0.05),
        nn.MSELoss(),
        [],
        eval_loader=loader(x, y),
        precision="bf16",
        device="cpu",
        predict_fn=lambda out: out,
        metric=metric,
    )
    metrics = trainer.evaluate()
    preds, _ = metric.calls[-1]
    assert metrics["n"] == 16
    assert preds == trainer.predict(loader(x, y)).reshape(-1).tolist()  # bf16 outputs, widened exactly


def three_class_task(n=60):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 6, generator=g)
    return x, (x[:, 0] > 0.5).long() + (x[:, 1] > 0).long()  # labels 0, 1, 2


def test_three_classes_with_cross_entropy_and_argmax_report_accuracy():
    x, y = three_class_task()
    assert set(y.tolist()) == {0, 1, 2}
    torch.manual_seed(0)
    trainer = Trainer(
        nn.Linear(6, 3),
        lambda p: torch.optim.SGD(p, lr=0.5),
        nn.CrossEntropyLoss(),
        loader(x, y),
        eval_loader=loader(x, y, 32),
        epochs=5,
        predict_fn=lambda logits: logits.argmax(-1),
    )
    result = trainer.fit()
    expected = float((trainer.predict(loader(x, y)).argmax(-1) == y).double().mean())
    assert result.eval["accuracy"] == pytest.approx(expected)
    assert result.eval["accuracy"] > 0.6  # it learned: chance is about a third


def test_every_value_of_a_combined_metric_reaches_the_eval_dict():
    x, y = three_class_task()

    def combined(p, r):
        per_class = {f"recall_{c}": sum(a == b == c for a, b in zip(p, r)) / max(r.count(c), 1) for c in (0, 1, 2)}
        return {"accuracy": sum(a == b for a, b in zip(p, r)) / len(r), **per_class}

    metric = Seen(combined)
    trainer = Trainer(
        nn.Linear(6, 3),
        lambda p: torch.optim.SGD(p, lr=0.5),
        nn.CrossEntropyLoss(),
        [],
        eval_loader=loader(x, y, 32),
        predict_fn=lambda logits: logits.argmax(-1),
        metric=metric,
    )
    metrics = trainer.evaluate()
    preds, refs = metric.calls[-1]
    assert all(isinstance(v, int) for v in preds + refs)  # labels stay integers
    assert refs == y.tolist()
    assert {"loss", "accuracy", "recall_0", "recall_1", "recall_2", "time_s", "samples_per_s"} <= set(metrics)
    assert metrics["accuracy"] == pytest.approx(combined(preds, refs)["accuracy"])


# ------------------------------------------------------- evaluation during training
class Evaluations(Callback):
    """Records every hook call in order: what on_evaluate saw, and when."""

    def __init__(self):
        self.events: list[tuple] = []
        self.metrics: list[dict] = []

    def on_evaluate(self, trainer, metrics):
        self.events.append(("evaluate", trainer.state.step))
        self.metrics.append(dict(metrics))

    def on_step_end(self, trainer, info):
        self.events.append(("step", info.step))

    def on_epoch_end(self, trainer, metrics):
        self.events.append(("epoch_end", trainer.state.step))


def eval_steps_trainer(eval_steps, n=40, bs=4, **kwargs):
    """n / bs windows per epoch (grad_accum 1): 10 optimizer steps per epoch by default."""
    x, y = regression_task(n)
    torch.manual_seed(0)
    return Trainer(
        nn.Linear(4, 1),
        lambda p: torch.optim.SGD(p, lr=0.01),
        nn.MSELoss(),
        loader(x, y, bs),
        eval_loader=loader(x, y),
        eval_steps=eval_steps,
        **kwargs,
    )


def test_eval_steps_evaluates_every_n_steps_and_at_epoch_ends_never_twice_at_one_step():
    seen = Evaluations()
    trainer = eval_steps_trainer(3, epochs=2, callbacks=[seen])  # 10 steps per epoch
    result = trainer.fit()
    steps = [3, 6, 9, 10, 12, 15, 18, 20]  # every 3rd step, plus each epoch's end (10, 20)
    assert [(e["epoch"], e["step"]) for e in result.eval_history] == [(1, s) for s in steps[:4]] + [
        (2, s) for s in steps[4:]
    ]
    assert [s for kind, s in seen.events if kind == "evaluate"] == steps
    # on_evaluate gets exactly what the history keeps, and the last evaluation is the result's eval.
    assert seen.metrics == [{k: v for k, v in e.items() if k not in ("epoch", "step")} for e in result.eval_history]
    assert result.eval == seen.metrics[-1]
    # A step's evaluation comes before its on_step_end; an epoch's before on_epoch_end.
    assert seen.events[seen.events.index(("evaluate", 3)) + 1] == ("step", 3)
    assert seen.events[seen.events.index(("evaluate", 10)) + 1] == ("epoch_end", 10)


def test_an_epoch_end_on_an_evaluated_step_reuses_that_evaluation():
    seen = Evaluations()
    result = eval_steps_trainer(5, epochs=2, callbacks=[seen]).fit()  # steps 5, 10 (epoch end), 15, 20
    assert [(e["epoch"], e["step"]) for e in result.eval_history] == [(1, 5), (1, 10), (2, 15), (2, 20)]
    assert seen.events.count(("evaluate", 10)) == 1
    assert seen.events[seen.events.index(("evaluate", 10)) :][:3] == [("evaluate", 10), ("step", 10), ("epoch_end", 10)]


def test_max_steps_on_an_evaluated_step_evaluates_once():
    result = eval_steps_trainer(4, epochs=2, max_steps=8).fit()
    assert [(e["epoch"], e["step"]) for e in result.eval_history] == [(1, 4), (1, 8)]


def test_eval_steps_zero_means_epoch_ends_only_and_bad_values_are_refused():
    seen = Evaluations()
    result = eval_steps_trainer(0, epochs=2, callbacks=[seen]).fit()
    assert [(e["epoch"], e["step"]) for e in result.eval_history] == [(1, 10), (2, 20)]
    assert [s for kind, s in seen.events if kind == "evaluate"] == [10, 20]
    for bad in (-1, 1.5):
        with pytest.raises(ValueError, match="eval_steps"):
            eval_steps_trainer(bad)


def test_evaluation_during_training_is_not_training_time():
    class SlowEval:
        """An evaluation loader that takes 0.3 s per pass."""

        def __init__(self, batches):
            self.batches = batches

        def __iter__(self):
            time.sleep(0.3)
            return iter(self.batches)

    x, y = regression_task(16)
    trainer = Trainer(
        nn.Linear(4, 1),
        lambda p: torch.optim.SGD(p, lr=0.01),
        nn.MSELoss(),
        loader(x, y, 4),
        eval_loader=SlowEval(list(loader(x, y))),
        eval_steps=1,
    )
    result = trainer.fit()
    assert len(result.eval_history) == 4 and all(e["time_s"] >= 0.3 for e in result.eval_history)
    assert result.train_time_s < 0.6  # 4 tiny steps; the 1.2 s of evaluation is not in it


def test_a_resumed_run_keeps_its_step_evaluations():
    class StopAfter(Callback):
        def __init__(self, step):
            self.step, self.saved = step, None

        def on_step_end(self, trainer, info):
            if info.step == self.step:
                buffer = io.BytesIO()
                torch.save(trainer.state_dict(), buffer)
                self.saved = buffer.getvalue()
                raise StopTraining("test stop")

    reference = eval_steps_trainer(4, epochs=2).fit()
    stopper = StopAfter(8)  # an evaluated step: its evaluation is in the saved state
    eval_steps_trainer(4, epochs=2, callbacks=[stopper]).fit()
    resumed = eval_steps_trainer(4, epochs=2)
    resumed.load_state_dict(torch.load(io.BytesIO(stopper.saved), weights_only=True))
    result = resumed.fit()
    assert [(e["epoch"], e["step"]) for e in result.eval_history] == [
        (1, 4),
        (1, 8),
        (1, 10),
        (2, 12),
        (2, 16),
        (2, 20),
    ]
    assert without_timings(result.eval_history) == without_timings(reference.eval_history)
