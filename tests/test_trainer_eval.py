"""Evaluation for every task kind: regression keeps float predictions, classification labels.

References are computed by hand from ``trainer.predict`` (the same model outputs).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from mixft.trainer import Trainer


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
    metric = Seen(lambda p, r: {
        "mse": sum((a - b) ** 2 for a, b in zip(p, r)) / len(p),
        "pearson": float(torch.corrcoef(torch.tensor([p, r]))[0, 1]),
    })
    trainer = Trainer(nn.Linear(4, 1), lambda p: torch.optim.SGD(p, lr=0.05), nn.MSELoss(), loader(x, y),
                      eval_loader=loader(x, y), epochs=3, predict_fn=lambda out: out, metric=metric)
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
    trainer = Trainer(nn.Linear(4, 1), lambda p: torch.optim.SGD(p, lr=0.05), nn.MSELoss(), [],
                      eval_loader=loader(x, y), precision="bf16", device="cpu", predict_fn=lambda out: out, metric=metric)
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
    trainer = Trainer(nn.Linear(6, 3), lambda p: torch.optim.SGD(p, lr=0.5), nn.CrossEntropyLoss(), loader(x, y),
                      eval_loader=loader(x, y, 32), epochs=5, predict_fn=lambda logits: logits.argmax(-1))
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
    trainer = Trainer(nn.Linear(6, 3), lambda p: torch.optim.SGD(p, lr=0.5), nn.CrossEntropyLoss(), [],
                      eval_loader=loader(x, y, 32), predict_fn=lambda logits: logits.argmax(-1), metric=metric)
    metrics = trainer.evaluate()
    preds, refs = metric.calls[-1]
    assert all(isinstance(v, int) for v in preds + refs)  # labels stay integers
    assert refs == y.tolist()
    assert {"loss", "accuracy", "recall_0", "recall_1", "recall_2", "time_s", "samples_per_s"} <= set(metrics)
    assert metrics["accuracy"] == pytest.approx(combined(preds, refs)["accuracy"])
