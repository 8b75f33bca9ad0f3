"""mixft's AMP paths on a CUDA GPU: fp16 + GradScaler, bf16 autocast, TF32, fused AdamW, CUDA memory figures.

Marked ``gpu`` and skipped where no CUDA device is present (``pytest -m gpu``;
``scripts/gpu_check.sh`` runs them on a lent GPU). Each trains mixft's own Trainer a few steps
on a small model built here: nothing is downloaded.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from mixft.train.hooks import Callback
from mixft.train.optim import adamw_factory, fused_adamw_available
from mixft.train.trainer import Trainer

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

CUDA = "cuda"
_g = torch.Generator().manual_seed(0)
X = torch.randn(64, 16, generator=_g)
Y = (X[:, :1] > 0).float().squeeze(-1)  # learnable: the sign of the first feature


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = nn.Linear(16, 64)
        self.out = nn.Linear(64, 1)

    def forward(self, x):
        return self.out(torch.relu(self.hidden(x))).squeeze(-1)


def make_trainer(precision, optimizer=None, callbacks=(), steps=8, **kwargs) -> Trainer:
    torch.manual_seed(0)
    return Trainer(
        Net(),
        optimizer or (lambda p: torch.optim.SGD(p, lr=0.1)),
        nn.BCEWithLogitsLoss(),
        DataLoader(TensorDataset(X, Y), batch_size=8),
        precision=precision,
        device=CUDA,
        max_steps=steps,
        seed=0,
        callbacks=list(callbacks),
        lr_scheduler=lambda opt, n: torch.optim.lr_scheduler.LinearLR(opt, 1.0, 0.1, n),
        **kwargs,
    )


class InfAt(Callback):
    """An inf in one gradient element before optimizer step ``step`` (1-based); the weights around it kept."""

    def __init__(self, step: int):
        self.step = step
        self.before: list[torch.Tensor] = []
        self.after: list[torch.Tensor] = []

    def on_before_optimizer_step(self, trainer) -> None:
        if trainer.state.step + 1 == self.step:
            self.before = [p.detach().clone() for p in trainer.params]
            trainer.params[0].grad.view(-1)[0] = float("inf")

    def on_step_end(self, trainer, info) -> None:
        if info.step == self.step:
            self.after = [p.detach().clone() for p in trainer.params]


@pytest.mark.parametrize("fused", [False, True], ids=["sgd", "fused-adamw"])
def test_fp16_scaler_skips_an_injected_inf_step_and_recovers(fused):
    """Step 3 gets an inf: skipped (weights unchanged), scale halved, schedule held; steps 4-8 train."""
    inject = InfAt(3)
    optimizer = adamw_factory(1e-2, torch.device(CUDA)) if fused else None
    # A scale that never overflows this model by itself, and no growth within the run.
    trainer = make_trainer(
        "fp16", optimizer, [inject], scaler_kwargs={"init_scale": 2.0**10, "growth_interval": 10_000}
    )
    if fused:
        assert trainer.optimizer.defaults["fused"] is True
    result = trainer.fit()
    assert trainer.scaler.is_enabled() and trainer.params[0].is_cuda
    assert result.history["skipped"] == [False, False, True, False, False, False, False, False]
    assert result.history["loss_scale"] == [1024.0, 1024.0, 512.0, 512.0, 512.0, 512.0, 512.0, 512.0]
    assert result.skipped_steps == 1 and result.final_loss_scale == 512.0
    assert all(torch.equal(a, b) for a, b in zip(inject.before, inject.after))  # the skipped step moved nothing
    assert trainer.lr_schedulers[0].last_epoch == 7  # 8 steps, one skipped: the schedule stepped 7 times
    lrs = result.history["lr"]
    assert lrs[3] == lrs[2]  # the step after the skipped one uses its learning rate
    assert not all(torch.equal(a, p.detach()) for a, p in zip(inject.after, trainer.params))  # it recovered
    assert all(math.isfinite(loss) for loss in result.history["loss"])
    assert all(torch.isfinite(p).all() for p in trainer.params)


def test_bf16_autocast_on_cuda_runs_matmuls_in_bf16_keeps_fp32_weights_and_loss():
    seen: dict[str, torch.dtype] = {}

    class Dtypes(Callback):
        def on_train_begin(self, trainer) -> None:
            def linear_dtype(module, args, out) -> None:  # a hook that returns something replaces the output
                seen.setdefault("linear", out.dtype)

            trainer.module.hidden.register_forward_hook(linear_dtype)

        def on_step_end(self, trainer, info) -> None:
            seen.setdefault("loss", info.loss.dtype)
            seen.setdefault("grad", trainer.params[0].grad.dtype if trainer.params[0].grad is not None else None)

    bf16 = make_trainer("bf16", callbacks=[Dtypes()])
    result = bf16.fit()
    fp32 = make_trainer("fp32").fit()
    assert seen["linear"] == torch.bfloat16  # autocast's matmul dtype on the GPU
    assert seen["loss"] == torch.float32  # BCE-with-logits is on autocast's fp32 list
    assert all(p.dtype == torch.float32 and p.is_cuda for p in bf16.params)  # fp32 master weights
    assert not bf16.scaler.is_enabled() and result.final_loss_scale is None and result.skipped_steps == 0
    # bf16 keeps 8 bits of mantissa: every step's loss follows fp32's to within a few percent.
    assert result.history["loss"] == pytest.approx(fp32.history["loss"], rel=5e-2)


def _matmul_error() -> float:
    """Relative error of a 1024^2 fp32 matmul on the GPU against float64: ~1e-6 in IEEE fp32, ~1e-3 in TF32."""
    g = torch.Generator(device=CUDA).manual_seed(0)
    a = torch.randn(1024, 1024, device=CUDA, generator=g)
    b = torch.randn(1024, 1024, device=CUDA, generator=g)
    exact = a.double() @ b.double()
    return float(((a @ b).double() - exact).abs().max() / exact.abs().max())


class MatmulSettings(Callback):
    """The TF32 switches and what a matmul measures, read inside the run."""

    def on_step_end(self, trainer, info) -> None:
        self.inside = (torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.allow_tf32, _matmul_error())


@pytest.fixture
def matmul_state():
    """The process's TF32 settings, put back after the test."""
    saved = (torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.allow_tf32)
    yield
    torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.allow_tf32 = saved


@pytest.mark.parametrize("users", [("ieee", False), ("tf32", True)], ids=["user-ieee", "user-tf32"])
@pytest.mark.parametrize("precision", ["fp32", "tf32"])
def test_tf32_is_on_only_inside_a_tf32_run_and_the_users_setting_comes_back(matmul_state, precision, users):
    if torch.cuda.get_device_capability()[0] < 8:
        pytest.skip("TF32 needs an Ampere or newer GPU")
    matmul, cudnn = users
    torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.allow_tf32 = matmul, cudnn  # PyTorch's own API
    user_error = _matmul_error()
    probe = MatmulSettings()
    make_trainer(precision, callbacks=[probe], steps=2).fit()
    inside_matmul, inside_cudnn, inside_error = probe.inside
    if precision == "tf32":
        assert inside_matmul == "tf32" and inside_cudnn is True and inside_error > 1e-4
    else:  # fp32 is the true baseline: IEEE fp32 matmuls whatever the user had
        assert inside_matmul == "ieee" and inside_cudnn is False and inside_error < 1e-5
    assert (torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.allow_tf32) == (matmul, cudnn)
    assert (_matmul_error() > 1e-4) == (user_error > 1e-4) == (matmul == "tf32")


def test_fused_adamw_on_cuda_steps_as_the_unfused_one():
    device = torch.device(CUDA)
    assert fused_adamw_available(device)
    fused = make_trainer("fp32", adamw_factory(1e-2, device), steps=5)
    assert all(group["fused"] for group in fused.optimizer.param_groups)
    fused.fit()

    def unfused(params):  # adamw_factory's groups and settings, torch's per-tensor loop
        params = [p for p in params if p.requires_grad]
        groups = [
            {"params": [p for p in params if p.ndim >= 2], "weight_decay": 0.01},
            {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
        ]
        return torch.optim.AdamW(groups, lr=1e-2, fused=False, foreach=False)

    plain = make_trainer("fp32", unfused, steps=5)
    assert not any(group["fused"] for group in plain.optimizer.param_groups)
    plain.fit()
    for a, b in zip(fused.params, plain.params):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert fused.state.step == plain.state.step == 5
    assert all(s["exp_avg"].is_cuda for s in fused.optimizer.state.values())


def _memory(tmp_path, order: list[str]) -> dict[str, object]:
    from mixft import RunConfig, run

    cfg = RunConfig(
        recipe="mlp-synthetic",
        device=CUDA,
        precisions=order,
        max_steps=3,
        extra={"width": 1024, "batches": 4},
        output_dir=str(tmp_path / "-".join(order)),
    )
    return {r.precision: r for r in run(cfg)}


def test_memory_breakdown_reads_cuda_max_allocated_whatever_the_order(tmp_path):
    """results.json's memory on CUDA: the run's max_memory_allocated, positive, not an RSS, and the same
    figure whichever precision ran first (no figure may depend on the order of the runs)."""
    first, second = _memory(tmp_path, ["fp32", "fp16"]), _memory(tmp_path, ["fp16", "fp32"])
    for name, r in first.items():
        memory = r.memory
        assert r.peak_memory_kind == "cuda_max_allocated" and r.peak_memory_bytes > 0
        assert memory["device_figure_kind"] == "cuda_max_allocated" and memory["device_figure"] > 0
        assert memory["parameters"] > 0 and memory["gradients"] > 0 and memory["saved_activations_peak"] > 0
        # The weights and their gradients are on the GPU during the step: the peak holds at least them.
        assert memory["device_figure"] >= memory["parameters"] + memory["gradients"], (name, memory)
        assert second[name].peak_memory_bytes == pytest.approx(r.peak_memory_bytes, rel=0.02), name
