"""mixft.amp.memory: saved-for-backward bytes counted once per storage, the step's other figures,
and a measurement that leaves the caller's model and random state as they were."""

from __future__ import annotations

import contextlib
import random

import pytest
import torch
from torch import nn

from mixft.amp.memory import (
    MEMORY_KEYS,
    SavedTensorMeter,
    measure_step_memory,
    memory_record,
    optimizer_state_bytes,
)

CPU = torch.device("cpu")


def _tiny_bert():
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=64,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=48,
        max_position_embeddings=32,
        num_labels=2,
    )
    return BertForSequenceClassification(cfg)


def _batch():
    g = torch.Generator().manual_seed(1)
    inputs = {
        "input_ids": torch.randint(5, 64, (8, 16), generator=g),
        "attention_mask": torch.ones(8, 16, dtype=torch.long),
    }
    return inputs, torch.randint(0, 2, (8,), generator=g)


def _loss(outputs, labels):
    logits = outputs.logits if hasattr(outputs, "logits") else outputs
    return nn.functional.cross_entropy(logits.float(), labels)


def _measure(model, dtype):
    inputs, labels = _batch()
    factory = (lambda: torch.autocast("cpu", dtype=dtype)) if dtype else contextlib.nullcontext
    return measure_step_memory(model, _loss, inputs, labels, factory, CPU)


@pytest.fixture(scope="module")
def bert():
    return _tiny_bert()


def test_bf16_saves_fewer_bytes_than_fp32(bert):
    fp32 = _measure(bert, None)
    bf16 = _measure(bert, torch.bfloat16)
    assert 0 < bf16["saved_activations_peak"] < fp32["saved_activations_peak"]
    assert "bfloat16" not in fp32["saved_by_dtype"]
    assert bf16["saved_by_dtype"].get("bfloat16", 0) > 0
    # The dtype and op breakdowns split the same unique storages.
    assert sum(fp32["saved_by_dtype"].values()) == fp32["saved_activations_peak"]
    assert fp32["saved_by_op"][0][1] >= fp32["saved_by_op"][-1][1]
    assert "linear" in dict(fp32["saved_by_op"])


def test_parameters_and_gradients_bytes(bert):
    step = _measure(bert, None)
    expected = sum(p.numel() * p.element_size() for p in bert.parameters())
    assert step["parameters"] == expected
    # Every parameter of this model receives a gradient, fp32 like the parameter.
    assert step["gradients"] == expected


def test_grads_cleared_and_rng_unchanged(bert):
    torch.manual_seed(123)
    random.seed(7)
    before_torch, before_py = torch.get_rng_state(), random.getstate()
    bert.train()  # dropout on: the step draws random numbers
    _measure(bert, torch.bfloat16)
    assert torch.equal(torch.get_rng_state(), before_torch)
    assert random.getstate() == before_py
    assert all(p.grad is None for p in bert.parameters())


def test_a_storage_saved_twice_counts_once():
    x = torch.randn(100, requires_grad=True)
    meter = SavedTensorMeter()
    with meter:
        y = x.exp()  # saves its result y (400 bytes)
        z = (y * y).sum()  # saves y twice more: same storage
    assert meter.peak_bytes == 400
    assert meter.by_op == {"exp": 400}
    # A view of a saved tensor shares its storage: still counted once.
    meter2 = SavedTensorMeter()
    with meter2:
        w = x.exp()
        (w[:50] * w[50:]).sum()
    assert meter2.peak_bytes == 400
    z.backward()


def test_saved_bytes_released_after_backward():
    x = torch.randn(64, requires_grad=True)
    meter = SavedTensorMeter()
    with meter:
        loss = x.exp().sin().sum()
    assert meter.peak_bytes == meter.live_bytes > 0
    loss.backward()
    assert meter.live_bytes == 0
    assert meter.peak_bytes > 0


def test_parameter_storages_are_not_activations():
    lin = nn.Linear(16, 16, bias=False)
    x = torch.randn(4, 16, requires_grad=True)  # the matmul saves x (for the weight's grad) and the weight
    meter = SavedTensorMeter(exclude=lin.parameters())
    with meter:
        lin(x).sum()
    assert meter.excluded_bytes == 16 * 16 * 4
    assert meter.peak_bytes == 4 * 16 * 4  # the input only
    # Under autocast the bf16 cast of the weight is a new storage and counts.
    meter = SavedTensorMeter(exclude=lin.parameters())
    with meter, torch.autocast("cpu", dtype=torch.bfloat16):
        lin(x).float().sum()
    assert meter.by_dtype["bfloat16"] == 16 * 16 * 2 + 4 * 16 * 2


def test_optimizer_state_bytes():
    lin = nn.Linear(10, 10)
    opt = torch.optim.AdamW(lin.parameters())
    assert optimizer_state_bytes([opt]) == 0
    lin(torch.randn(2, 10)).sum().backward()
    opt.step()
    n = sum(p.numel() for p in lin.parameters())
    step_bytes = sum(s["step"].numel() * s["step"].element_size() for s in opt.state.values())
    assert optimizer_state_bytes([opt]) == 2 * n * 4 + step_bytes


def test_memory_record_schema():
    step = {
        "parameters": 10,
        "gradients": 10,
        "saved_activations_peak": 5,
        "saved_by_dtype": {"bfloat16": 3, "float32": 2},
        "saved_by_op": [("linear", 3)],
    }
    rec = memory_record(step, 20, None, "cpu_rss")
    assert tuple(rec) == MEMORY_KEYS
    assert rec["saved_by_op"] == [["linear", 3]] and rec["optimizer_state"] == 20
