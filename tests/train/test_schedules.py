"""Named LR schedules (transformers' get_scheduler) and balanced class weights."""

from __future__ import annotations

import math

import pytest
import torch

from mixft.errors import UsageError
from mixft.train.optim import linear_warmup_factory
from mixft.train.schedules import SCHEDULERS, build_scheduler_factory, class_weights_balanced


def lrs(factory, total_steps: int = 30, lr: float = 1e-3) -> list[float]:
    """The LR of each of ``total_steps`` optimizer steps under ``factory``'s schedule."""
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=lr)
    sched = factory(opt, total_steps)
    seen = []
    for _ in range(total_steps):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return seen


@pytest.mark.parametrize("total", [7, 30, 101])
def test_default_linear_is_todays_schedule_exactly(total):
    today = lrs(linear_warmup_factory(0.1), total)
    assert lrs(build_scheduler_factory("linear", warmup_ratio=0.1), total) == today
    assert lrs(build_scheduler_factory(), total) == today  # the default stays as it was


def test_warmup_steps_and_schedule_shapes():
    linear = lrs(build_scheduler_factory("linear", warmup_steps=5), 20)
    assert linear[0] == 0.0 and linear[5] == pytest.approx(1e-3) and linear[4] == pytest.approx(0.8e-3)
    constant = lrs(build_scheduler_factory("constant"), 20)
    assert constant == [1e-3] * 20
    warm_constant = lrs(build_scheduler_factory("constant_with_warmup", warmup_steps=4), 20)
    assert warm_constant[2] == pytest.approx(0.5e-3) and warm_constant[4:] == [1e-3] * 16
    cosine = lrs(build_scheduler_factory("cosine", warmup_ratio=0.0), 20)
    # Half a cosine from the peak: at step t, 0.5 * (1 + cos(pi * t / 20)).
    assert cosine[10] == pytest.approx(1e-3 * 0.5 * (1 + math.cos(math.pi * 0.5)))


@pytest.mark.parametrize("name", SCHEDULERS)
def test_every_name_builds(name):
    cycles = 2 if name == "cosine_with_restarts" else None
    assert len(lrs(build_scheduler_factory(name, cycles=cycles), 10)) == 10


def test_cosine_with_restarts_restarts_as_many_times_as_asked():
    # Was: --lr-scheduler cosine_with_restarts ran transformers' default of one cycle, the cosine schedule
    # step for step (the same weights, bit for bit): no restart ever.
    restarts = lrs(build_scheduler_factory("cosine_with_restarts", warmup_ratio=0.0, cycles=3), 30)
    peaks = [t for t in range(1, 30) if restarts[t] > restarts[t - 1]]
    assert peaks == [10, 20] and restarts[10] == restarts[20] == restarts[0] == pytest.approx(1e-3)
    assert restarts != lrs(build_scheduler_factory("cosine", warmup_ratio=0.0), 30)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"name": "exponential"}, "--lr-scheduler must be one of: linear, cosine"),
        ({"warmup_ratio": 0.1, "warmup_steps": 3}, "not both"),
        ({"warmup_ratio": 1.5}, "--warmup-ratio must be a probability between 0 and 1, got 1.5"),
        ({"warmup_steps": -1}, "--warmup-steps must be an integer >= 0, got -1"),
        ({"name": "constant", "warmup_steps": 3}, "use constant_with_warmup"),
        ({"name": "cosine_with_restarts"}, "restarts only with --lr-cycles N, N >= 2 .without it: one cycle is"),
        ({"name": "cosine_with_restarts", "cycles": 1}, "N >= 2 .one cycle is the cosine schedule, step for step"),
        ({"name": "cosine", "cycles": 3}, "--lr-cycles counts the restarts of --lr-scheduler cosine_with_restarts"),
    ],
)
def test_bad_options_are_refused_before_training(kwargs, message):
    with pytest.raises(UsageError, match=message):
        build_scheduler_factory(**kwargs)


def test_balanced_weights_by_hand():
    # 6 labels, 3 classes, counts 3/2/1: n / (k * count) = 6/9, 6/6, 6/3.
    weights = class_weights_balanced([0, 0, 1, 2, 0, 1], 3)
    assert weights.dtype == torch.float32
    assert weights.tolist() == pytest.approx([2 / 3, 1.0, 2.0])
    # Weighted, each class contributes the same total: count * weight = n / k.
    assert (torch.tensor([3, 2, 1]) * weights).tolist() == pytest.approx([2.0, 2.0, 2.0])
    assert class_weights_balanced(torch.tensor([1.0, 0.0, 1.0, 1.0]), 2).tolist() == pytest.approx([2.0, 2 / 3])


@pytest.mark.parametrize(
    "labels, message",
    [
        ([0, 0, 2], r"class\(es\) 1 have no training example"),
        ([0, 3], r"labels must be 0..2, got 0..3"),
        ([0.5, 1.0], "non-integer"),
        ([], "no labels"),
    ],
)
def test_balanced_weights_refuse_unusable_labels(labels, message):
    with pytest.raises(UsageError, match=message):
        class_weights_balanced(labels, 3)
