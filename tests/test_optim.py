"""Schedule planning and scheduler building, shared by the trainer and the benchmarks."""

from __future__ import annotations

import pytest
import torch

from mixft.optim import build_schedulers, planned_steps


@pytest.mark.parametrize("n_batches,grad_accum,epochs,max_steps,expected", [
    (10, 1, 1, None, 10),
    (10, 4, 2, None, 6),  # windows of 4, 4, 2 per epoch: the short last window is a step
    (10, 4, 2, 5, 5),  # max_steps caps the total
    (10, 4, 2, 50, 6),  # and never raises it
    (8, 4, 3, None, 6),
    (None, 2, 3, 7, 7),  # a loader without len(): only max_steps can say
    (None, 2, 3, None, None),
])
def test_planned_steps(n_batches, grad_accum, epochs, max_steps, expected):
    assert planned_steps(n_batches, grad_accum, epochs, max_steps) == expected


def test_the_benchmarks_use_the_same_planning():
    import benchmarks.bert
    import benchmarks.peers

    assert benchmarks.peers.planned_steps is planned_steps
    assert not hasattr(benchmarks.bert, "planned_steps")  # no second copy


def test_build_schedulers_from_nothing_one_a_list_or_a_factory():
    opts = [torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0) for _ in range(2)]
    assert build_schedulers(None, opts, 10) == []
    one = torch.optim.lr_scheduler.StepLR(opts[0], 1)
    assert build_schedulers(one, opts, 10) == [one]
    assert build_schedulers([one, one], opts, 10) == [one, one]
    seen = []
    built = build_schedulers(lambda opt, total: seen.append((opt, total)) or torch.optim.lr_scheduler.StepLR(opt, 1),
                             opts, 10)
    assert seen == [(opts[0], 10), (opts[1], 10)] and len(built) == 2
    with pytest.raises(ValueError, match="sized train_loader or max_steps"):
        build_schedulers(lambda opt, total: None, opts, None)
