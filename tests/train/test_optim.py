"""mixft.train.optim: AdamW's groups (no decay on 1-d parameters, frozen parameters left out), schedule planning
and scheduler building, shared by the trainer and the benchmarks."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from mixft.train.optim import adamw_factory, build_schedulers, planned_steps


def test_frozen_parameters_get_no_optimizer_state_and_never_change():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4), nn.Linear(4, 2))
    for p in model[0].parameters():  # frozen, as a LoRA model's base weights are
        p.requires_grad_(False)
    frozen_before = model[0].weight.clone()
    opt = adamw_factory(1e-2, torch.device("cpu"))(model.parameters())

    in_groups = [p for group in opt.param_groups for p in group["params"]]
    assert len(in_groups) == 4 and all(p.requires_grad for p in in_groups)  # LayerNorm w, b + Linear w, b
    assert not any(p is model[0].weight or p is model[0].bias for p in in_groups)
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    assert torch.equal(model[0].weight, frozen_before)
    assert len(opt.state) == 4  # moment buffers for the trained parameters only


def test_weight_decay_skips_biases_and_norm_weights():
    model = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4))
    opt = adamw_factory(1e-3, torch.device("cpu"), weight_decay=0.1)(model.parameters())
    decayed, plain = opt.param_groups
    assert decayed["weight_decay"] == 0.1 and [p.shape for p in decayed["params"]] == [torch.Size([4, 4])]
    assert plain["weight_decay"] == 0.0 and len(plain["params"]) == 3


@pytest.mark.parametrize(
    "n_batches,grad_accum,epochs,max_steps,expected",
    [
        (10, 1, 1, None, 10),
        (10, 4, 2, None, 6),  # windows of 4, 4, 2 per epoch: the short last window is a step
        (10, 4, 2, 5, 5),  # max_steps caps the total
        (10, 4, 2, 50, 6),  # and never raises it
        (8, 4, 3, None, 6),
        (None, 2, 3, 7, 7),  # a loader without len(): only max_steps can say
        (None, 2, 3, None, None),
    ],
)
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
    built = build_schedulers(
        lambda opt, total: seen.append((opt, total)) or torch.optim.lr_scheduler.StepLR(opt, 1), opts, 10
    )
    assert seen == [(opts[0], 10), (opts[1], 10)] and len(built) == 2
    with pytest.raises(ValueError, match="sized train_loader or max_steps"):
        build_schedulers(lambda opt, total: None, opts, None)
