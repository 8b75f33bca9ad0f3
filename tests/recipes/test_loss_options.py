"""--label-smoothing and --class-weights: the loss on a fixed tiny batch equals the hand-computed one.

Both heads: the softmax cross-entropy of text-classification/glue (mixft.models.classifiers.task_loss)
and bert-sst2's one-logit BCE (recipes.bert_sst2.make_loss_fn). The formulas are written
out here from the definitions, not by calling the functions under test with other names.
"""

from __future__ import annotations

import math

import pytest
import torch

from mixft.errors import UsageError
from mixft.models.classifiers import classification_loss, classification_loss_factory, regression_loss, task_loss
from mixft.train.schedules import class_weights_balanced
from recipes import bert_sst2

LOGITS = torch.tensor([[2.0, 0.5, -1.0], [0.1, 0.2, 0.3], [-0.5, 1.5, 0.0], [1.0, -1.0, 2.0]])
LABELS = torch.tensor([0, 2, 1, 0])


def log_softmax_rows() -> list[list[float]]:
    out = []
    for row in LOGITS.tolist():
        z = math.log(sum(math.exp(v) for v in row))
        out.append([v - z for v in row])
    return out


def test_no_option_is_todays_loss_itself():
    assert classification_loss_factory() is classification_loss
    assert task_loss(False) is classification_loss and task_loss(True) is regression_loss
    assert bert_sst2.make_loss_fn() is bert_sst2.loss_fn


def test_label_smoothing_by_hand():
    s, k = 0.2, 3
    logp = log_softmax_rows()
    # Target: (1 - s) on the label plus s / k on every class.
    by_hand = sum(-(1 - s) * row[y] - (s / k) * sum(row) for row, y in zip(logp, LABELS.tolist())) / len(logp)
    loss = task_loss(False, label_smoothing=s)(LOGITS, LABELS)
    assert loss.item() == pytest.approx(by_hand, rel=1e-6)
    assert loss.item() != pytest.approx(classification_loss(LOGITS, LABELS).item(), rel=1e-3)


def test_balanced_class_weights_by_hand():
    # Training labels 0,0,0,1,2,2: counts 3/1/2 of 6 -> w_c = 6 / (3 * n_c) = 2/3, 2, 1.
    weights = class_weights_balanced([0, 0, 0, 1, 2, 2], 3)
    w = [2 / 3, 2.0, 1.0]
    logp = log_softmax_rows()
    ys = LABELS.tolist()
    # Each example's loss weighted by its class, averaged over the examples (not over the weights, as
    # F.cross_entropy's mean is: that would not add up across accumulated micro-batches).
    by_hand = sum(-w[y] * row[y] for row, y in zip(logp, ys)) / len(ys)
    loss = task_loss(False, class_weights=weights)(LOGITS, LABELS)
    assert loss.item() == pytest.approx(by_hand, rel=1e-6)
    assert loss.item() != pytest.approx(classification_loss(LOGITS, LABELS).item(), rel=1e-3)


def test_both_options_at_once_by_hand():
    s, k, w = 0.1, 3, [2 / 3, 2.0, 1.0]
    logp = log_softmax_rows()
    ys = LABELS.tolist()
    # torch's weighted smoothing: each class term of the target carries its own class weight.
    terms = [-(1 - s) * w[y] * row[y] - (s / k) * sum(w[c] * row[c] for c in range(k)) for row, y in zip(logp, ys)]
    by_hand = sum(terms) / len(ys)
    loss = task_loss(False, 0.1, torch.tensor(w))(LOGITS, LABELS)
    assert loss.item() == pytest.approx(by_hand, rel=1e-6)


def test_class_weighted_micro_batches_add_up_to_one_batch_and_eval_ignores_the_batch_size():
    # Was: the weighted mean divided each micro-batch by its own labels' weights, so 2 x 4 accumulated
    # (loss 0.9113) was not one batch of 8 (0.8003), and the eval loss moved with the eval batch size.
    from torch import nn

    from mixft.train.trainer import Trainer

    def model():
        torch.manual_seed(0)
        return nn.Linear(4, 2)

    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(0))
    y = torch.tensor([1, 0, 0, 0, 0, 0, 0, 0])
    loss_fn = task_loss(False, class_weights=class_weights_balanced(y.tolist(), 2))

    def sgd(params):
        return torch.optim.SGD(params, lr=0.5)

    big = Trainer(model(), sgd, loss_fn, [(x, y)], device="cpu", max_grad_norm=None)
    halves = [(x[:4], y[:4]), (x[4:], y[4:])]
    accumulated = Trainer(model(), sgd, loss_fn, halves, device="cpu", grad_accum=2, max_grad_norm=None)
    big_loss, accumulated_loss = big.fit().history["loss"], accumulated.fit().history["loss"]
    assert accumulated_loss == pytest.approx(big_loss, rel=1e-6)
    for a, b in zip(big.model.parameters(), accumulated.model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    fresh = Trainer(model(), sgd, loss_fn, [], device="cpu")
    assert fresh.evaluate(halves)["loss"] == pytest.approx(fresh.evaluate([(x, y)])["loss"], rel=1e-6)


def test_the_loss_is_fp32_under_autocast():
    loss_fn = task_loss(False, 0.1, torch.tensor([1.0, 2.0, 3.0]))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = loss_fn(LOGITS.bfloat16(), LABELS)
    assert loss.dtype == torch.float32
    assert loss.item() == pytest.approx(loss_fn(LOGITS.bfloat16().float(), LABELS).item(), rel=1e-6)


@pytest.mark.parametrize("kwargs", [{"label_smoothing": 0.1}, {"class_weights": torch.ones(1)}])
def test_regression_refuses_both_in_one_line(kwargs):
    with pytest.raises(UsageError, match="for classification; this task is regression") as e:
        task_loss(True, **kwargs)
    assert "\n" not in str(e.value)


# ------------------------------------------------------------------- BCE head
BCE_LOGITS = torch.tensor([1.5, -0.5, 0.2, -2.0, 3.0])
BCE_LABELS = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0])


def bce_by_hand(targets: list[float], pos_weight: float = 1.0) -> float:
    def log_sigmoid(x: float) -> float:
        return -math.log1p(math.exp(-x))

    total = 0.0
    for x, t in zip(BCE_LOGITS.tolist(), targets):
        total += -(pos_weight * t * log_sigmoid(x) + (1 - t) * log_sigmoid(-x))
    return total / len(targets)


def test_bce_label_smoothing_smooths_the_targets_towards_one_half():
    s = 0.2
    targets = [y * (1 - s) + 0.5 * s for y in BCE_LABELS.tolist()]  # 1 -> 0.9, 0 -> 0.1
    loss = bert_sst2.make_loss_fn(label_smoothing=s)(BCE_LOGITS, BCE_LABELS)
    assert loss.item() == pytest.approx(bce_by_hand(targets), rel=1e-6)
    assert loss.item() != pytest.approx(bce_by_hand(BCE_LABELS.tolist()), rel=1e-3)


def test_bce_class_weights_are_pos_weight_n_negative_over_n_positive(tiny_bert_dir, tmp_path):
    from mixft.config.run_config import RunConfig
    from tests.conftest import write_tsv

    # 6 negatives, 2 positives in training: pos_weight = 6 / 2 = 3.
    data = tmp_path / "sst2"
    data.mkdir()
    write_tsv(data / "train.tsv", [(f"film {i}", int(i < 2)) for i in range(8)])
    write_tsv(data / "dev.tsv", [("a film", 1), ("a dull film", 0)])
    cfg = RunConfig(model=str(tiny_bert_dir), data_dir=str(data), class_weights="balanced")
    prepared = bert_sst2.prepare(cfg.with_defaults(bert_sst2.DEFAULTS).validate())
    assert prepared.pos_weight.tolist() == pytest.approx([3.0])
    loss = bert_sst2.make_loss_fn(pos_weight=prepared.pos_weight)(BCE_LOGITS, BCE_LABELS)
    assert loss.item() == pytest.approx(bce_by_hand(BCE_LABELS.tolist(), pos_weight=3.0), rel=1e-6)
    both = bert_sst2.make_loss_fn(0.2, prepared.pos_weight)(BCE_LOGITS, BCE_LABELS)
    smoothed = [y * 0.8 + 0.1 for y in BCE_LABELS.tolist()]
    assert both.item() == pytest.approx(bce_by_hand(smoothed, pos_weight=3.0), rel=1e-6)
