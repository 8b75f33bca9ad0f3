"""A custom autograd function under autocast: an fp32 island with custom_fwd/custom_bwd."""

import pytest
import torch

from mixft.amp.fp32 import stable_softplus


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_custom_function_runs_in_fp32_inside_autocast(dtype):
    x = torch.linspace(-30, 30, 61, requires_grad=True)
    with torch.autocast("cpu", dtype=dtype):
        h = torch.nn.Linear(61, 61)(x.unsqueeze(0)).squeeze(0)  # a low-precision activation
        assert h.dtype == dtype
        y = stable_softplus(h)
    assert y.dtype == torch.float32
    ref = torch.nn.functional.softplus(h.detach().double())
    torch.testing.assert_close(y.detach().double(), ref, rtol=1e-6, atol=1e-6)
    y.sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()


def test_gradient_matches_autograd_of_builtin_softplus():
    x = torch.randn(32, dtype=torch.float32, requires_grad=True)
    stable_softplus(x).sum().backward()
    x2 = x.detach().clone().requires_grad_(True)
    torch.nn.functional.softplus(x2).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_backward_runs_in_the_forwards_autocast_state_even_inside_autocast(monkeypatch, dtype):
    # custom_bwd: the backward runs as the forward did (autocast off, fp32), whatever
    # surrounds the backward call. Without it, a backward called under autocast (a
    # gradient penalty's autograd.grad, a user's loop) would run its ops under autocast.
    seen = []
    real_sigmoid = torch.sigmoid

    def spy(x):  # stable_softplus's backward calls torch.sigmoid
        seen.append((torch.is_autocast_enabled("cpu"), x.dtype))
        return real_sigmoid(x)

    x = torch.randn(16, dtype=torch.float32, requires_grad=True)
    with torch.autocast("cpu", dtype=dtype):
        y = stable_softplus(x.to(dtype))
        monkeypatch.setattr(torch, "sigmoid", spy)
        y.sum().backward()  # inside autocast on purpose
    monkeypatch.undo()
    assert seen == [(False, torch.float32)]
    # The fp32 gradient, rounded once where it flows back through the cast to ``dtype``.
    torch.testing.assert_close(x.grad, torch.sigmoid(x.detach().to(dtype).float()).to(dtype).float())
