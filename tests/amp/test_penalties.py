"""Gradient penalty under fp16 + GradScaler equals the fp32 penalty computed by hand."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from mixft.amp.penalties import gradient_penalty
from mixft.train.trainer import Trainer


def _setup(seed=0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    g = torch.Generator().manual_seed(1)
    x = torch.randn(16, 8, generator=g)
    y = torch.randn(16, 1, generator=g)
    return model, x, y


def _reference(weight):
    model, x, y = _setup()
    params = list(model.parameters())
    loss = nn.MSELoss()(model(x), y)
    grads = torch.autograd.grad(loss, params, create_graph=True)
    total = loss + weight * torch.sqrt(sum(g.pow(2).sum() for g in grads))
    total.backward()
    torch.optim.SGD(params, lr=0.1).step()
    return torch.cat([p.detach().reshape(-1) for p in params])


def _trained(precision, hook):
    model, x, y = _setup()
    trainer = Trainer(
        model,
        lambda p: torch.optim.SGD(p, lr=0.1),
        nn.MSELoss(),
        DataLoader(TensorDataset(x, y), batch_size=16),
        precision=precision,
        device="cpu",
        max_grad_norm=None,
        loss_hook=hook,
        scaler_kwargs={"init_scale": 256.0} if precision == "fp16" else None,  # only fp16 has a GradScaler
    )
    result = trainer.fit()
    assert result.skipped_steps == 0
    return torch.cat([p.detach().reshape(-1) for p in trainer.model.parameters()])


def test_penalty_in_fp32_matches_hand_computed_reference():
    got = _trained("fp32", lambda t, loss, out, x: gradient_penalty(t, loss, weight=0.5))
    torch.testing.assert_close(got, _reference(0.5), rtol=1e-5, atol=1e-6)


def test_penalty_under_fp16_scaler_is_unscaled_before_use():
    got = _trained("fp16", lambda t, loss, out, x: gradient_penalty(t, loss, weight=0.5))
    torch.testing.assert_close(got, _reference(0.5), rtol=2e-2, atol=2e-3)


def test_forgetting_to_unscale_gives_a_different_answer():
    # The negative control: a penalty formed from scaled gradients is 256x too strong.
    def naive(t, loss, out, x):
        grads = torch.autograd.grad(t.scaler.scale(loss), t.params, create_graph=True)
        return loss + 0.5 * torch.sqrt(sum(g.float().pow(2).sum() for g in grads))

    got = _trained("fp16", naive)
    assert not torch.allclose(got, _reference(0.5), rtol=2e-2, atol=2e-3)
