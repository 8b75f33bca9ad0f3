"""bf16-pure's weight decay goes through the Kahan compensation and follows fp32's (issue 40, class W).

optimi's AdamW(kahan_sum=True) multiplies the bf16 weight by ``1 - lr * wd`` outside the
compensation; below half a bf16 spacing (2**-9 of a weight at best) that rounds back to the
same weight, so decay never happened. The reference here is ``torch.optim.AdamW`` in fp32 on
the same bf16-representable start; "to bf16 rounding" is measured in bf16 spacings of the
fp32 weight (``ulp``). Each check runs optimi's foreach and per-tensor paths.
"""

from __future__ import annotations

import warnings

import optimi
import pytest
import torch
from torch import nn

from mixft.train import kahan_adamw
from mixft.train.kahan_adamw import KahanAdamW

BETAS, EPS = (0.9, 0.999), 1e-8  # torch's, as compensated_adamw passes them
PATHS = pytest.mark.parametrize("foreach", [True, False], ids=["foreach", "per-tensor"])


def ulp(x: torch.Tensor) -> torch.Tensor:
    """The bf16 spacing in the binade of each element of ``x`` (8 significant bits)."""
    return torch.exp2(torch.floor(torch.log2(x.abs())) - 7)


def optimi_adamw(cls, params, lr, wd, foreach, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # optimi deprecates foreach=True
        return cls(params, lr=lr, betas=BETAS, eps=EPS, weight_decay=wd, foreach=foreach, triton=False, **kwargs)


def train(kind: str, start: torch.Tensor, grads, lr: float, wd: float, foreach: bool = True):
    """(final weights as fp32, optimizer) after one step per gradient: "fp32" torch, "kahan" mixft's, "optimi" as is."""
    if kind == "fp32":
        weight = nn.Parameter(start.clone())
        opt = torch.optim.AdamW([weight], lr=lr, betas=BETAS, eps=EPS, weight_decay=wd)
    else:
        weight = nn.Parameter(start.to(torch.bfloat16))
        cls = KahanAdamW if kind == "kahan" else optimi.AdamW
        opt = optimi_adamw(cls, [weight], lr, wd, foreach, kahan_sum=True)
    for grad in grads:
        weight.grad = grad.to(weight.dtype, copy=True)  # optimi's foreach path writes into the gradient
        opt.step()
    return weight.detach().float(), opt


def held(weight: torch.Tensor, opt) -> torch.Tensor:
    """Weight plus its compensation: the value the optimizer holds."""
    return weight + next(iter(opt.state.values()))["kahan_comp"].float()


def small_weights(n: int = 1000) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return (torch.randn(n, generator=g) * 0.05).bfloat16().float()  # BERT-like scale, exact in bf16


@PATHS
def test_pure_decay_of_200_steps_is_fp32s_in_the_compensated_weight(foreach):
    # The red team's check: zero gradients (Adam's step is 0), lr 5e-5, wd 0.1, 200 steps: fp32 shrinks by 1e-3.
    start, zeros = small_weights(), [torch.zeros(1000)] * 200
    fp32, _ = train("fp32", start, zeros, 5e-5, 0.1)
    fp32_shrink = (1 - fp32 / start).mean().item()
    assert abs(fp32_shrink - 1e-3) < 2e-5
    weight, opt = train("kahan", start, zeros, 5e-5, 0.1, foreach)
    # 1e-3 is below half a bf16 spacing of every weight (>= 2**-9 = 1.95e-3): the bf16 weight cannot
    # show it yet; weight + compensation holds it, and the weight is fp32's rounded to bf16.
    assert abs((1 - held(weight, opt) / start).mean().item() - fp32_shrink) < 0.01 * fp32_shrink
    assert torch.all((weight - fp32).abs() <= 0.5 * ulp(fp32))
    lost, opt = train("optimi", start, zeros, 5e-5, 0.1, foreach)
    assert torch.equal(held(lost, opt), start)  # optimi's own decay: nothing at all


@PATHS
def test_pure_decay_moves_the_bf16_weights_as_fp32s_over_2000_steps(foreach, monkeypatch):
    # 1e-2 in all: past half a spacing, so the bf16 weights themselves must shrink as fp32's, each
    # within about half a spacing. Added step by step (DECAY_CHUNK 0), the bf16 compensation
    # buffer rounds the 5e-6 per step away once it has grown and the decay stalls.
    start, zeros = small_weights(), [torch.zeros(1000)] * 2000
    fp32, _ = train("fp32", start, zeros, 5e-5, 0.1)
    fp32_shrink = (1 - fp32 / start).mean().item()
    weight, _ = train("kahan", start, zeros, 5e-5, 0.1, foreach)
    assert abs((1 - weight / start).mean().item() - fp32_shrink) < 0.05 * fp32_shrink
    assert torch.all((weight - fp32).abs() <= 0.6 * ulp(fp32))
    monkeypatch.setattr(kahan_adamw, "DECAY_CHUNK", 0.0)
    stalled, _ = train("kahan", start, zeros, 5e-5, 0.1, foreach)
    assert (1 - stalled / start).mean().item() < 0.5 * fp32_shrink


@PATHS
def test_a_trajectory_with_decay_stays_within_a_bf16_spacing_of_fp32(foreach):
    # Random gradients, lr 1e-3, wd 0.1, 300 steps: fp32's decay alone moves the weights by ~6
    # spacings; bf16-pure's weights stay within about one spacing of fp32's (bf16 moments round too).
    g = torch.Generator().manual_seed(1)
    n = 4096
    start = ((torch.rand(n, generator=g) * 0.5 + 0.5) * torch.randn(n, generator=g).sign()).bfloat16().float()
    grads = [torch.randn(n, generator=g) for _ in range(300)]
    fp32, _ = train("fp32", start, grads, 1e-3, 0.1)
    no_decay, _ = train("fp32", start, grads, 1e-3, 0.0)
    assert ((fp32 - no_decay).abs() / ulp(fp32)).mean() > 4  # the decay matters at this scale
    weight, _ = train("kahan", start, grads, 1e-3, 0.1, foreach)
    spacings = (weight - fp32).abs() / ulp(fp32)
    assert spacings.max() <= 1.5 and spacings.mean() <= 0.35
    lost, _ = train("optimi", start, grads, 1e-3, 0.1, foreach)  # the same without decay in the compensation
    assert ((lost - fp32).abs() / ulp(fp32)).mean() > 4


@PATHS
@pytest.mark.filterwarnings("ignore:You are using weight_decay:UserWarning")  # optimi on the deliberately high 0.3
def test_uncompensated_parameters_decay_exactly_as_optimi_decays_them(foreach):
    # An fp32 parameter beside a bf16 one in a group, and fully decoupled decay (lr / max_lr).
    g = torch.Generator().manual_seed(2)
    starts = [torch.randn(5, 3, generator=g), torch.randn(7, generator=g)]
    grads = [[torch.randn(5, 3, generator=g), torch.randn(7, generator=g)] for _ in range(5)]
    results = []
    for cls in (KahanAdamW, optimi.AdamW):
        params = [nn.Parameter(starts[0].clone()), nn.Parameter(starts[1].to(torch.bfloat16))]
        opt = optimi_adamw(cls, params, 1e-2, 0.3, foreach, kahan_sum=True, decouple_lr=True, max_lr=2e-2)
        for step_grads in grads:
            for p, grad in zip(params, step_grads):
                p.grad = grad.to(p.dtype, copy=True)
            opt.step()
        results.append(params[0].detach())
    assert torch.equal(*results) and not torch.equal(results[0], starts[0])


def test_the_users_weight_decay_stays_in_the_groups_also_when_the_step_fails(monkeypatch):
    weight = nn.Parameter(torch.ones(3, dtype=torch.bfloat16))
    opt = optimi_adamw(KahanAdamW, [{"params": [weight], "weight_decay": 0.25}], 1e-3, 0.0, True, kahan_sum=True)
    weight.grad = torch.ones_like(weight)
    opt.step()
    assert opt.param_groups[0]["weight_decay"] == 0.25 and opt.state_dict()["param_groups"][0]["weight_decay"] == 0.25

    def broken(self, closure=None, param=None):
        raise RuntimeError("boom")

    monkeypatch.setattr(optimi.AdamW, "step", broken)  # what super().step() finds
    with pytest.raises(RuntimeError, match="boom"):
        opt.step()
    assert opt.param_groups[0]["weight_decay"] == 0.25
