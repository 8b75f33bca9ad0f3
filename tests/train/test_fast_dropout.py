"""Fast CPU dropout: the masks are Bernoulli(1 - p) to 2**-40, the op is dropout, the swap undoes itself.

(Equality in distribution with torch's own dropout, and torch's bits for kept values, with the
tests' power stated: tests/test_dropout_distribution.py.)

The keep-rate tests draw millions of elements at fixed seeds and allow 5 binomial standard
deviations: tight enough that a threshold quantised to 1/256 (which misses 0.1 and 0.9 by
1/640 and the tie-resolved p = 25.5/256 by 1/512) fails by 10 or more.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from mixft.errors import UsageError
from mixft.rng import capture_rng_state, restore_rng_state
from mixft.train.fast_dropout import (
    FAST_SDPA,
    FastDropout,
    FastDropoutHandle,
    attention_math,
    drop_probability,
    fast_dropout,
    keep_mask,
    use_fast_dropout,
)

N = 4_000_000  # elements per keep-rate check: binomial sd <= 2.5e-4


def dropped_fraction(mask: torch.Tensor) -> float:
    return 1.0 - mask.double().mean().item()


def binomial_sd(p: float, n: int) -> float:
    return math.sqrt(p * (1 - p) / n)


# ------------------------------------------------------------------ the masks
@pytest.mark.parametrize("p", [0.1, 0.5, 0.9, 25.5 / 256])  # 25.5/256: half the ties keep, half drop
def test_keep_rate_is_p_to_five_binomial_sd(p):
    torch.manual_seed(0)
    dropped = dropped_fraction(keep_mask(N, p))
    sd = binomial_sd(p, N)
    assert abs(dropped - p) < 5 * sd
    # The check has the power the docstring claims: a 1/256 threshold would be caught.
    assert abs(round(p * 256) / 256 - p) > 5 * sd or p == 0.5


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_blocks_of_the_mask_are_binomial_chi_square(p):
    # 400 blocks of 10,000: sum((dropped - n p)^2 / (n p (1 - p))) is chi-square with 400 dof
    # (mean 400, sd ~28): too uniform or too clumpy blocks both fail.
    torch.manual_seed(1)
    blocks, size = 400, 10_000
    counts = size - keep_mask(blocks * size, p).view(blocks, size).double().sum(1)
    chi2 = ((counts - size * p) ** 2 / (size * p * (1 - p))).sum().item()
    assert abs(chi2 - blocks) < 5 * math.sqrt(2 * blocks)


def test_every_byte_lane_keeps_at_the_rate_and_neighbours_are_uncorrelated():
    # Eight elements share one 64-bit draw: each lane must be uniform and independent.
    torch.manual_seed(2)
    m = keep_mask(N, 0.5).double()
    lanes = m.view(-1, 8)
    sd = binomial_sd(0.5, lanes.shape[0])
    assert (lanes.mean(0) - 0.5).abs().max().item() < 5 * sd
    for shift in (1, 7, 8, 9):  # inside a draw, across draws, same lane of the next draw
        a, b = m[:-shift] - 0.5, m[shift:] - 0.5
        corr = (a * b).mean().item() / 0.25
        assert abs(corr) < 5 / math.sqrt(a.numel())


def test_consecutive_masks_are_uncorrelated():
    torch.manual_seed(3)
    a, b = (keep_mask(1_000_000, 0.3).double() for _ in range(2))
    corr = torch.corrcoef(torch.stack([a, b]))[0, 1].item()
    assert abs(corr) < 5 / math.sqrt(a.numel())
    assert not torch.equal(a, b)


def test_drop_probability_is_quantised_to_2_pow_minus_40():
    assert drop_probability(0.1) == round(0.1 * 2**40) / 2**40
    assert abs(drop_probability(0.1) - 0.1) <= 2**-41
    assert drop_probability(0.0) == 0.0 and drop_probability(1.0) == 1.0


@pytest.mark.parametrize("numel", [0, 1, 7, 9, 1001])
def test_mask_sizes_that_are_not_a_multiple_of_eight(numel):
    mask = keep_mask(numel, 0.5)
    assert mask.shape == (numel,) and mask.dtype == torch.uint8
    assert set(mask.tolist()) <= {0, 1}


def test_same_seed_same_mask_and_rng_state_restore_replays_it():
    x = torch.ones(10_000)
    torch.manual_seed(5)
    first = fast_dropout(x, 0.5)
    torch.manual_seed(5)
    assert torch.equal(fast_dropout(x, 0.5), first)
    torch.manual_seed(6)
    assert not torch.equal(fast_dropout(x, 0.5), first)
    # What a checkpoint saves and --resume restores (mixft.rng) decides the next mask.
    state = capture_rng_state()
    after = fast_dropout(x, 0.5)
    restore_rng_state(state)
    assert torch.equal(fast_dropout(x, 0.5), after)


# ------------------------------------------------------------------ the op
def test_kept_values_are_scaled_and_backward_uses_the_forward_mask():
    torch.manual_seed(0)
    x = (torch.rand(64, 33) + 0.5).requires_grad_()  # no zeros: out == 0 means dropped
    out = fast_dropout(x, 0.25)
    kept = out != 0
    torch.testing.assert_close(out[kept], x.detach()[kept] / 0.75)
    grad = torch.randn_like(out)
    out.backward(grad)
    torch.testing.assert_close(x.grad, grad * kept / 0.75)


def test_mean_is_unbiased_like_torch_dropout():
    torch.manual_seed(0)
    x = torch.full((N,), 2.0)
    out = fast_dropout(x, 0.1)
    assert out.mean().item() == pytest.approx(2.0, abs=5 * 2.0 * math.sqrt(0.1 / 0.9 / N))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_dtype_and_shape_are_kept(dtype):
    x = torch.randn(3, 5, 7).to(dtype).requires_grad_()
    out = FastDropout(0.3)(x)
    assert out.dtype == dtype and out.shape == x.shape
    out.sum().backward()
    assert x.grad.dtype == dtype
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert FastDropout(0.3)(x.detach().bfloat16()).dtype == torch.bfloat16


def test_eval_mode_and_p_zero_are_the_identity_and_p_one_drops_everything():
    x = torch.randn(16, 8, requires_grad=True)
    layer = FastDropout(0.3).eval()
    assert layer(x) is x
    assert fast_dropout(x, 0.0, training=True) is x
    zero = fast_dropout(x, 1.0)
    assert torch.equal(zero, torch.zeros_like(x))
    zero.sum().backward()
    assert torch.equal(x.grad, torch.zeros_like(x))


@pytest.mark.parametrize("p", [-0.1, 1.5, float("nan"), "0.1", True])
def test_bad_probability_is_refused_in_one_line(p):
    with pytest.raises(UsageError, match="dropout probability must be a number in \\[0, 1\\]"):
        FastDropout(p)
    with pytest.raises(UsageError):
        fast_dropout(torch.ones(2), p)


def test_inplace_dropout_keeps_torch_kernel_semantics():
    x = torch.ones(1000)
    torch.manual_seed(0)
    out = FastDropout(0.5, inplace=True)(x)
    assert out is x and set(x.unique().tolist()) <= {0.0, 2.0}


# ------------------------------------------------------------------ the swap
def tiny_bert(seed: int = 0, **overrides):
    from transformers import BertConfig, BertModel

    config = BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=37,
        max_position_embeddings=64,
        **overrides,
    )
    torch.manual_seed(seed)
    return BertModel(config)


def tiny_batch():
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 100, (4, 12), generator=gen)
    mask = torch.ones_like(ids)
    mask[0, 7:] = 0  # one padded row: the sdpa mask is materialised
    return ids, mask


def ops_run(fn) -> set[str]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return {event.key for event in prof.key_averages()}


def test_swap_restores_the_exact_module_objects_and_leaves_subclasses_alone():
    class MyDropout(nn.Dropout):
        pass

    model = nn.Sequential(nn.Dropout(0.1), MyDropout(0.1), nn.Sequential(nn.Dropout(0.2)), nn.Linear(2, 2))
    before = list(model.modules())
    with use_fast_dropout(model) as handle:
        assert [type(m) for m in model.modules()] == [
            nn.Sequential,
            FastDropout,
            MyDropout,
            nn.Sequential,
            FastDropout,
            nn.Linear,
        ]
        assert handle.modules == [before[1], before[4]] and handle.active
    assert list(model.modules()) == before
    assert [type(m) for m in model.modules()] == [
        nn.Sequential,
        nn.Dropout,
        MyDropout,
        nn.Sequential,
        nn.Dropout,
        nn.Linear,
    ]
    handle.remove()  # idempotent
    assert not handle.active


def test_swap_is_undone_when_the_block_raises():
    model = tiny_bert()
    with pytest.raises(RuntimeError, match="boom"):
        with use_fast_dropout(model):
            assert model.config._attn_implementation == FAST_SDPA
            raise RuntimeError("boom")
    assert model.config._attn_implementation == "sdpa"
    assert all(type(m) is nn.Dropout for m in model.modules() if isinstance(m, nn.Dropout))


def test_a_model_off_the_cpu_is_left_untouched():
    model = nn.Sequential(nn.Linear(2, 2, device="meta"), nn.Dropout(0.1))
    handle = use_fast_dropout(model)
    assert isinstance(handle, FastDropoutHandle) and not handle.active
    assert type(model[1]) is nn.Dropout


def test_use_fast_dropout_refuses_a_non_module():
    with pytest.raises(UsageError, match="torch.nn.Module"):
        use_fast_dropout(object())


def test_bert_training_draws_no_bernoulli_with_the_swap_and_does_without_it():
    # Every dropout of a transformers-5 BERT (hidden states and sdpa attention probabilities).
    model = tiny_bert().train()
    ids, mask = tiny_batch()

    def step():
        model(input_ids=ids, attention_mask=mask).last_hidden_state.sum().backward()

    assert "aten::bernoulli_" in ops_run(step)
    with use_fast_dropout(model) as handle:
        assert len(handle.modules) == 7 and len(handle.attention_configs) == 1
        ops = ops_run(step)
    assert "aten::bernoulli_" not in ops and "_FastDropoutFunction" in ops


def test_attention_false_keeps_torch_attention_dropout():
    model = tiny_bert().train()
    ids, mask = tiny_batch()
    with use_fast_dropout(model, attention=False):
        assert model.config._attn_implementation == "sdpa"
        assert "aten::bernoulli_" in ops_run(lambda: model(input_ids=ids, attention_mask=mask))


def test_eval_outputs_are_bit_identical_with_the_swap():
    model = tiny_bert().eval()
    ids, mask = tiny_batch()
    with torch.no_grad():
        reference = model(input_ids=ids, attention_mask=mask).last_hidden_state
        with use_fast_dropout(model):
            assert torch.equal(model(input_ids=ids, attention_mask=mask).last_hidden_state, reference)


def test_eager_attention_is_left_to_torch():
    model = tiny_bert(attn_implementation="eager")
    with use_fast_dropout(model) as handle:
        assert handle.attention_configs == [] and model.config._attn_implementation == "eager"


def test_attention_math_matches_sdpa_without_dropout():
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 4, generator=gen) for _ in range(3))
    bool_mask = torch.ones(2, 1, 5, 5, dtype=torch.bool)
    bool_mask[0, ..., 3:] = False
    float_mask = torch.zeros(2, 1, 5, 5).masked_fill(~bool_mask, -1e9)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    for mask, causal in ((None, False), (bool_mask, False), (float_mask, False), (None, True)):
        expected = sdpa(q, k, v, attn_mask=mask, is_causal=causal)
        torch.testing.assert_close(attention_math(q, k, v, mask, 0.0, None, causal), expected)


def test_attention_math_drops_probabilities_with_the_fast_mask():
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 4, generator=gen) for _ in range(3))
    torch.manual_seed(7)
    out = attention_math(q, k, v, None, 0.3, 0.5, is_causal=False)
    torch.manual_seed(7)
    keep = keep_mask(2 * 3 * 5 * 5, 0.3).view(2, 3, 5, 5)
    probs = torch.softmax(q @ k.transpose(-2, -1) * 0.5, -1) * keep / 0.7
    torch.testing.assert_close(out, probs @ v)


def torch_dropout(x, p, training=True):
    return nn.functional.dropout(x, p, training)


@pytest.mark.parametrize(
    "autocast", [None, torch.bfloat16, torch.float16], ids=["fp32", "bf16-autocast", "fp16-autocast"]
)
@pytest.mark.parametrize("masking", ["bool", "float", "causal"])
def test_attention_with_torch_masks_is_bitwise_torch_sdpa_forward_and_backward(monkeypatch, autocast, masking):
    # The same computation as torch's CPU math kernel, op for op: with torch's own dropout
    # drawn from the same seed in place of the fast mask, every bit of the output and of the
    # three input gradients is torch's. Under bf16 autocast torch computes in fp32; an
    # attention run in bf16 differs here (and has several times torch's error vs float64).
    monkeypatch.setattr("mixft.train.fast_dropout.fast_dropout", torch_dropout)
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 9, 8, generator=gen) for _ in range(3))
    attend = torch.ones(2, 1, 9, 9, dtype=torch.bool)
    attend[0, ..., 6:] = False  # a padded sequence
    mask = {"bool": attend, "float": torch.zeros(2, 1, 9, 9).masked_fill(~attend, -1e4), "causal": None}[masking]

    def run(fn):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        torch.manual_seed(11)
        with torch.autocast("cpu", dtype=autocast or torch.float32, enabled=autocast is not None):
            out = fn(*leaves)
        out.float().mul(torch.linspace(-1, 1, out.numel()).view(out.shape)).sum().backward()
        return [out, *(t.grad for t in leaves)]

    causal = masking == "causal"
    ours = run(lambda a, b, c: attention_math(a, b, c, mask, 0.2, None, causal))
    theirs = run(
        lambda a, b, c: nn.functional.scaled_dot_product_attention(
            a, b, c, attn_mask=mask, dropout_p=0.2, is_causal=causal
        )
    )
    assert ours[0].dtype == theirs[0].dtype == (autocast or torch.float32)
    for mine, torchs in zip(ours, theirs):
        assert torch.equal(mine, torchs)


def test_a_bert_with_the_fast_attention_and_torch_masks_trains_bitwise_as_with_sdpa(monkeypatch):
    # The whole model under bf16 autocast: the attention function mixft registers (its
    # transposes, mask and scale from the model) gives torch's sdpa bits, given torch's masks.
    from mixft.train.fast_dropout import register_fast_sdpa

    monkeypatch.setattr("mixft.train.fast_dropout.fast_dropout", torch_dropout)
    ids, mask = tiny_batch()
    grads = []
    for fast in (False, True):
        model = tiny_bert(attention_probs_dropout_prob=0.3).train()
        if fast:
            model.config._attn_implementation_internal = register_fast_sdpa()
        torch.manual_seed(5)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(input_ids=ids, attention_mask=mask).last_hidden_state
        out.float().pow(2).sum().backward()
        grads.append([out.detach(), *(p.grad for p in model.parameters() if p.grad is not None)])
    assert len(grads[0]) == len(grads[1]) > 20 and all(torch.equal(a, b) for a, b in zip(*grads))


def test_bf16_attention_probabilities_are_computed_and_dropped_in_fp32(monkeypatch):
    seen = []

    def spy(x, p, training=True):
        seen.append(x.dtype)
        return fast_dropout(x, p, training)

    monkeypatch.setattr("mixft.train.fast_dropout.fast_dropout", spy)
    q = torch.randn(1, 2, 4, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = attention_math(q, q, q, None, 0.1, None, False)
    assert seen == [torch.float32] and out.dtype == torch.bfloat16


@pytest.mark.parametrize("dtype", [None, torch.bfloat16])
def test_tiny_bert_training_steps_run_finite_and_reproducibly(dtype):
    ids, mask = tiny_batch()
    labels = torch.tensor([0.0, 1.0, 1.0, 0.0])

    def train(seed: int) -> list[float]:
        model = tiny_bert(seed).train()
        head = nn.Sequential(nn.Dropout(0.1), nn.Linear(32, 1))
        opt = torch.optim.AdamW([*model.parameters(), *head.parameters()], lr=1e-3)
        losses = []
        with use_fast_dropout(nn.ModuleList([model, head])):
            for _ in range(3):
                with torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
                    pooled = model(input_ids=ids, attention_mask=mask).pooler_output
                    loss = nn.functional.binary_cross_entropy_with_logits(head(pooled).squeeze(-1).float(), labels)
                loss.backward()
                assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
                opt.step()
                opt.zero_grad(set_to_none=True)
                losses.append(loss.item())
        return losses

    first = train(0)
    assert all(math.isfinite(x) for x in first)
    assert train(0) == first  # same seed, same masks, same losses
