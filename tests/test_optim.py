"""mixft.optim: AdamW's groups (no decay on 1-d parameters) and frozen parameters left out."""

from __future__ import annotations

import torch
from torch import nn

from mixft.optim import adamw_factory


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
