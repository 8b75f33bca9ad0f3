"""mixft.train.floor: the floor arithmetic against a hand computation, the bytes per parameter, the step's FLOPs, the Linear shapes and their matmul rate."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from mixft.train.floor import (
    ADAMW_PASSES,
    CLIP_PASSES,
    StepFloor,
    StepFlops,
    measure_bandwidth,
    optimizer_clip_bytes,
)
from mixft.train.trainer import Trainer


def fit_one_epoch(model: nn.Module, x: torch.Tensor, y: torch.Tensor, callback) -> None:
    """One epoch of plain SGD on (x, y) in batches of 4, with ``callback`` watching."""
    loader = DataLoader(TensorDataset(x, y), batch_size=4)
    Trainer(model, lambda p: torch.optim.SGD(p, lr=0.1), nn.MSELoss(), loader, epochs=1, callbacks=[callback]).fit()


def test_the_floor_is_the_matmuls_at_their_rate_plus_the_parameter_passes_at_the_bandwidth():
    # By hand: 27.5 GFLOP at 320 GFLOP/s = 85.9375 ms; 22.7 M fp32 parameters x (7 + 3) passes
    # x 4 bytes = 908 MB at 35 GB/s = 25.942857 ms; floor 111.880357 ms; a 210.5 ms step is 1.8815x it.
    floor = StepFloor(matmul_flops=27.5e9, matmul_flops_per_s=320e9, parameter_bytes=908e6, bytes_per_s=35e9)
    assert floor.matmul_s == pytest.approx(0.0859375)
    assert floor.memory_s == pytest.approx(0.025942857, rel=1e-6)
    assert floor.floor_s == pytest.approx(0.111880357, rel=1e-6)
    assert floor.above(0.2105) == pytest.approx(1.881474, rel=1e-5)
    assert floor.line(0.2105) == (
        "step 210.5 ms, floor 111.9 ms (matmuls 85.9 ms at 320 GFLOP/s + optimizer/clip 25.9 ms at "
        "35.0 GB/s): 1.88x its floor"
    )
    assert floor.to_dict(0.2105)["above_floor"] == pytest.approx(1.881474, rel=1e-5)


def test_bytes_per_parameter_count_adamw_and_the_clip_once_per_trained_tensor():
    shared = nn.Linear(3, 2)  # 8 fp32 parameters
    frozen = nn.Linear(5, 5).requires_grad_(False)
    half = nn.Linear(2, 2).to(torch.bfloat16)  # 6 bf16 parameters
    params = [*shared.parameters(), *shared.parameters(), *frozen.parameters(), *half.parameters()]
    assert (ADAMW_PASSES, CLIP_PASSES) == (7, 3)  # AdamW: read p, g, m, v, write p, m, v; clip: norm + multiply
    assert optimizer_clip_bytes(params) == 8 * 4 * 10 + 6 * 2 * 10
    assert optimizer_clip_bytes(params, clip=False) == 8 * 4 * 7 + 6 * 2 * 7


def test_bandwidth_is_a_rate_in_bytes_per_second():
    rate = measure_bandwidth("cpu", elements=1 << 16, repeats=3)
    assert 1e6 < rate < 1e13


def test_step_flops_counts_the_first_training_step_forward_and_backward():
    # One step of Linear(8 -> 16) -> ReLU -> Linear(16 -> 1) on a batch of 4: forward 2 x 4 x (8 x 16 + 16 x 1)
    # multiply-adds' FLOPs; backward twice that (input and weight gradients) except the first layer's
    # input gradient, which nothing needs (its input does not require grad).
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    x, y = torch.randn(8, 8), torch.randn(8, 1)
    counter = StepFlops()
    fit_one_epoch(model, x, y, counter)
    forward = 2 * 4 * (8 * 16 + 16 * 1)
    assert counter.flops == forward + 2 * forward - 2 * 4 * 8 * 16  # the second step is not counted
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    assert _get_current_dispatch_mode() is None  # the counter is gone after its step


def test_step_flops_close_ends_the_count_after_a_step_that_raised():
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    def broken_loss(output, target):
        raise RuntimeError("boom")

    counter = StepFlops()
    x, y = torch.randn(4, 8), torch.randn(4, 1)
    trainer = Trainer(
        nn.Linear(8, 1),
        lambda p: torch.optim.SGD(p, lr=0.1),
        broken_loss,
        DataLoader(TensorDataset(x, y)),
        epochs=1,
        callbacks=[counter],
    )
    with pytest.raises(RuntimeError, match="boom"):
        try:
            trainer.fit()
        finally:
            assert _get_current_dispatch_mode() is not None  # the step raised inside the count
            counter.close()
    assert _get_current_dispatch_mode() is None and counter.flops == 2 * 1 * 8 * 1  # the forward it ran


def test_linear_shapes_records_the_first_steps_linear_inputs_then_lets_go():
    from mixft.amp.precision import resolve_precision
    from mixft.train.floor import LinearShapes, matmul_rate

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1, bias=False))
    x, y = torch.randn(12, 8), torch.randn(12, 1)
    shapes = LinearShapes()
    fit_one_epoch(model, x, y, shapes)  # three steps; only the first one's forward is recorded
    assert shapes.table() == [  # most FLOPs first
        {"rows": 4, "in": 8, "out": 16, "bias": True, "calls": 1},
        {"rows": 4, "in": 16, "out": 1, "bias": False, "calls": 1},
    ]
    assert all(not layer._forward_pre_hooks for layer in model)  # the hooks are gone after that step
    cpu = torch.device("cpu")
    assert matmul_rate([], resolve_precision("fp32", cpu), cpu) is None
    assert 1e6 < matmul_rate(shapes.table(), resolve_precision("fp32", cpu), cpu) < 1e14  # FLOP/s
