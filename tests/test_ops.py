"""A custom autograd function under autocast: an fp32 island with custom_fwd/custom_bwd."""

import pytest
import torch

from mixft.ops import stable_softplus


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
