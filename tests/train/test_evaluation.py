"""mixft.train.evaluation on its own: the metrics from predictions, and the model's mode around evaluation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from mixft.train import evaluation
from mixft.train.trainer import Trainer


def test_classification_references_become_labels_and_accuracy_is_the_default():
    preds = [torch.tensor([1, 0, 1]), torch.tensor([1])]
    refs = [torch.tensor([1.0, 1.0, 1.0]), torch.tensor([0.0])]  # BCE targets arrive as floats
    assert evaluation.compute_metrics(preds, refs) == {"accuracy": 0.5}


def test_regression_without_a_metric_reports_nothing_and_metric_values_become_plain_numbers():
    assert evaluation.compute_metrics([torch.tensor([0.5, 1.5])], [torch.tensor([1.0, 1.0])]) == {}

    class NumpyMetric:
        def compute(self, predictions, references):
            self.seen = (predictions, references)
            return {"mae": np.float64(sum(abs(p - r) for p, r in zip(predictions, references)) / len(predictions))}

    metric = NumpyMetric()
    out = evaluation.compute_metrics(
        [torch.tensor([0.5, 1.5], dtype=torch.bfloat16)], [torch.tensor([1.0, 1.0])], metric
    )
    assert out == {"mae": 0.5} and type(out["mae"]) is float
    assert metric.seen == ([0.5, 1.5], [1.0, 1.0])  # fp32 Python floats, not truncated


def test_evaluate_and_predict_leave_the_model_in_the_mode_they_found_it():
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    data = DataLoader(TensorDataset(x, y), batch_size=4)
    model = nn.Sequential(nn.Linear(4, 1), nn.Dropout(0.5))
    trainer = Trainer(model, lambda p: torch.optim.SGD(p, lr=0.1), nn.MSELoss(), data, eval_loader=data)
    for training in (True, False):
        model.train(training)
        metrics = evaluation.evaluate(trainer)
        assert model.training is training
        out = evaluation.predict(trainer, data)
        assert model.training is training
    # Dropout off while evaluating: the loss is that of the plain linear layer.
    assert metrics["loss"] == pytest.approx(nn.MSELoss()(model[0](x), y).item(), rel=1e-5)
    torch.testing.assert_close(out, model[0](x).detach())
    trainer.eval_loader = None
    assert evaluation.evaluate(trainer) == {}  # nothing to evaluate on


def test_predict_and_the_kept_eval_predictions_are_in_the_datasets_order():
    """Was: Trainer.predict returned a length-sorted evaluation loader's outputs in its longest-first batch order,
    so a notebook's ``trainer.predict(test)`` lined up with the test rows scored 0.67 where evaluate() said 1.0."""
    from mixft.data.batching import LengthGroupedBatchSampler

    x = torch.randn(7, 4)
    lengths = [3, 9, 1, 7, 5, 9, 2]  # the order the sampler serves differs from the rows'
    sampler = LengthGroupedBatchSampler(lengths, 2, shuffle=False)
    assert [i for batch in sampler for i in batch] != list(range(7))
    y = (x[:, 0] > 0).long()
    loader = DataLoader(TensorDataset(x, y), batch_sampler=sampler)
    model = nn.Linear(4, 2)
    trainer = Trainer(
        model,
        lambda p: torch.optim.SGD(p, lr=0.1),
        nn.CrossEntropyLoss(),
        loader,
        eval_loader=loader,
        predict_fn=lambda out: out.argmax(-1),
    )
    torch.testing.assert_close(trainer.predict(loader), model(x).detach())  # row i is example i's
    evaluation.evaluate(trainer)
    preds, refs = trainer.last_eval_predictions
    assert refs == y.tolist() and preds == model(x).argmax(-1).tolist()
