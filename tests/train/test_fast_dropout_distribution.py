"""Fast dropout vs torch's own dropout: equal in distribution, by tests whose power is stated.

The claim: mixft's masks (``mixft.train.fast_dropout.keep_mask``) and torch's (``nn.functional.dropout``
on the CPU: ``bernoulli_``) are both i.i.d. Bernoulli(1 - p) over elements and over calls, and the
kept values are the same numbers. Each sample below is N = 2**23 elements at p = 0.1 (BERT's
dropout), seeded, so every run draws the same masks (the test is deterministic and takes about a
second). Every check is a two-sided test at alpha = 1e-4 (so a correct generator fails one of the
~20 checks for about 1 seed in 500), and each has the power stated against a stated deviation
(normal / non-central chi-square, computed with scipy.stats for this file):

* keep rate vs 1 - p: |delta| >= 7e-4 is detected with power 0.998 (the 1/256-quantised threshold
  an earlier draft had, off by 1.6e-3, is far beyond it);
* keep rate fast vs torch (two-sample): |delta| >= 1e-3 with power 0.998;
* per position: 64 classes (element index mod 64: the 8 byte lanes of a draw, and draws within a
  cache line), chi-square with 64 degrees of freedom against 1 - p: one class off by 0.01 is
  detected with power > 0.999 (0.008: 0.98);
* pairwise independence: the correlation of elements at lags 1, 7, 8, 9, 63, 64, 65 and 4096
  (inside a byte draw, across draws, same lane of the next draw, the next row of a 64-wide or
  4096-wide tensor), and of two consecutive calls' masks (one step's and the next's): each z =
  r * sqrt(n) at alpha = 1e-4 / 8 per lag; |rho| >= 0.0025 is detected with power 0.998.

The same checks run on torch's masks (they pass: the thresholds are calibrated, not fitted to
mixft), and on three deliberately flawed generators, which must fail: the test's power is shown,
not only computed.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import pytest
import torch

from mixft.train.fast_dropout import fast_dropout, keep_mask

P = 0.1
N = 2**23
ALPHA = 1e-4
LAGS = (1, 7, 8, 9, 63, 64, 65, 4096)
POSITIONS = 64
Z = NormalDist().inv_cdf(1 - ALPHA / 2)  # 3.89
Z_LAG = NormalDist().inv_cdf(1 - ALPHA / 2 / len(LAGS))  # 4.37, Bonferroni over the lags


def chi2_critical(dof: int, alpha: float) -> float:
    """Upper alpha point of chi-square(dof), Wilson-Hilferty (within 0.2 % of the exact 114.83 for 64, 1e-4)."""
    z = NormalDist().inv_cdf(1 - alpha)
    return dof * (1 - 2 / (9 * dof) + z * math.sqrt(2 / (9 * dof))) ** 3


def fast_masks(seed: int, n: int = N) -> torch.Tensor:
    torch.manual_seed(seed)
    return keep_mask(n, P).bool()


def torch_masks(seed: int, n: int = N) -> torch.Tensor:
    torch.manual_seed(seed)
    return torch.nn.functional.dropout(torch.ones(n), P, True) != 0


def failures(mask: torch.Tensor, next_mask: torch.Tensor) -> list[str]:
    """The checks of the module docstring that ``mask`` (and the call after it, ``next_mask``) fail."""
    bad = []
    q = 1 - P
    m = mask.double()
    z = (m.mean().item() - q) / math.sqrt(P * q / m.numel())
    if abs(z) > Z:
        bad.append(f"keep rate z={z:.1f}")
    per_position = m.view(-1, POSITIONS)
    counts, n_each = per_position.sum(0), per_position.shape[0]
    chi2 = ((counts - n_each * q) ** 2 / (n_each * P * q)).sum().item()
    if chi2 > chi2_critical(POSITIONS, ALPHA):
        bad.append(f"per-position chi2={chi2:.0f}")
    centred = (m - m.mean()) / m.std()
    for lag in LAGS:
        r = (centred[:-lag] * centred[lag:]).mean().item()
        if abs(r) * math.sqrt(m.numel() - lag) > Z_LAG:
            bad.append(f"lag {lag} r={r:.4f}")
    following = next_mask.double()
    r = torch.corrcoef(torch.stack([m, following]))[0, 1].item()
    if abs(r) * math.sqrt(m.numel()) > Z:
        bad.append(f"consecutive calls r={r:.4f}")
    return bad


def test_torch_masks_pass_the_checks():  # calibration: torch's own dropout is the reference
    assert failures(torch_masks(0), torch_masks(1)) == []


def test_fast_masks_pass_the_same_checks():
    torch.manual_seed(0)
    first, second = keep_mask(N, P).bool(), keep_mask(N, P).bool()  # two consecutive calls
    assert failures(first, second) == []


def test_fast_and_torch_keep_rates_are_equal_two_sample():
    fast, ref = fast_masks(2).double().mean().item(), torch_masks(2).double().mean().item()
    z = (fast - ref) / math.sqrt(2 * P * (1 - P) / N)
    assert abs(z) < Z


@pytest.mark.parametrize("flaw", ["keep rate +0.001", "position 3 off by 0.01", "neighbours correlated 0.005"])
def test_the_checks_catch_a_flawed_generator(flaw):
    gen = torch.Generator().manual_seed(3)
    if flaw == "keep rate +0.001":
        torch.manual_seed(3)
        mask = keep_mask(N, P - 0.001).bool()
    elif flaw == "position 3 off by 0.01":
        mask = fast_masks(3).view(-1, POSITIONS).clone()
        # drop 1/90 of position 3's kept elements more: its keep rate falls from 0.9 to 0.89
        extra = torch.rand(mask.shape[0], generator=gen) < 0.01 / 0.9
        mask[:, 3] &= ~extra
        mask = mask.view(-1)
    else:
        mask = fast_masks(3).clone()
        copy = torch.rand(N - 1, generator=gen) < 0.005
        mask[1:][copy] = mask[:-1][copy]  # each element copies its left neighbour with probability 0.005
    assert failures(mask, fast_masks(4)) != []


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_kept_values_and_their_gradients_are_torch_dropouts_bits(dtype):
    # Where both keep an element, the same number: torch's scale (1 / (1 - p) in the tensor's
    # dtype) times the input, rounded once; the backward reuses it.
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(200_000, generator=gen).to(dtype).requires_grad_()
    upstream = torch.randn(200_000, generator=gen).to(dtype)
    torch.manual_seed(6)
    ref = torch.nn.functional.dropout(x, P, True)
    ours = fast_dropout(x, P)
    (ref_grad,) = torch.autograd.grad(ref, x, upstream)
    (our_grad,) = torch.autograd.grad(ours, x, upstream)
    both = (ref != 0) & (ours != 0)
    assert both.sum() > 150_000
    assert torch.equal(ours[both], ref[both]) and torch.equal(our_grad[both], ref_grad[both])
