"""The AMP audit's findings (issue 12, item 6), each against a reference computed by hand.

Every test here failed on the trainer before its fix (checked against the previous
mixft/train/trainer.py); the deliberate-bug tests fail when the bug is put back.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from mixft.train.hooks import Callback
from mixft.train.trainer import Trainer


def make_mlp(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))


def regression_data(n: int, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    return x, x[:, :1] * 2.0 - x[:, 1:2] + 0.1 * torch.randn(n, 1, generator=g)


def flat(module: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).float() for p in module.parameters()])


def sgd(lr=0.1):
    return lambda params: torch.optim.SGD(params, lr=lr)


def hand_steps(model: nn.Module, windows, lr=0.1, max_norm=None):
    """The textbook loop: one SGD step per window, on the window's samples as one batch."""
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for xb, yb in windows:
        opt.zero_grad()
        nn.MSELoss()(model(xb), yb).backward()
        if max_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        opt.step()
    return model


class Batches(IterableDataset):
    """Yields ready-made (x, y) batches and has no len(): a streaming loader."""

    def __init__(self, x, y, batch_size):
        self.x, self.y, self.bs = x, y, batch_size

    def __iter__(self):
        for i in range(0, len(self.x), self.bs):
            yield self.x[i : i + self.bs], self.y[i : i + self.bs]


# ---------------------------------------------------- (a) loaders without len()
def test_unsized_loader_steps_the_last_short_window_of_every_epoch():
    x, y = regression_data(24)
    loader = DataLoader(Batches(x, y, 4), batch_size=None)  # 6 micro-batches, no len()
    with pytest.raises(TypeError):
        len(loader)
    trainer = Trainer(make_mlp(), sgd(), nn.MSELoss(), loader, grad_accum=4, max_grad_norm=None, epochs=2)
    result = trainer.fit()
    # Per epoch: a window of 4 micro-batches (16 samples), then the short one of 2 (8).
    ref = hand_steps(make_mlp(), [(x[:16], y[:16]), (x[16:], y[16:])] * 2)
    assert result.steps == 4 and trainer.state.samples == 48
    torch.testing.assert_close(flat(trainer.model), flat(ref), rtol=1e-5, atol=1e-6)
    assert all(p.grad is None for p in trainer.model.parameters())  # nothing left to leak


# ------------------------------------------------ (e) windows weighted by samples
@pytest.mark.parametrize("sizes", [[4, 2], [1, 5, 3]])
def test_micro_batches_of_unequal_sizes_equal_one_batch_of_their_sum(sizes):
    total = sum(sizes)
    x, y = regression_data(total)
    bounds = torch.tensor([0, *sizes]).cumsum(0).tolist()
    micro = [(x[a:b], y[a:b]) for a, b in zip(bounds, bounds[1:])]
    acc = Trainer(make_mlp(), sgd(), nn.MSELoss(), micro, grad_accum=len(sizes), max_grad_norm=0.5)
    big = Trainer(make_mlp(), sgd(), nn.MSELoss(), [(x, y)], grad_accum=1, max_grad_norm=0.5)
    r_acc, r_big = acc.fit(), big.fit()
    assert r_acc.steps == r_big.steps == 1
    torch.testing.assert_close(flat(acc.model), flat(big.model), rtol=1e-6, atol=1e-7)
    assert r_acc.history["loss"] == pytest.approx(r_big.history["loss"], rel=1e-6)
    assert r_acc.history["grad_norm"] == pytest.approx(r_big.history["grad_norm"], rel=1e-6)


# --------------------------------------------- (f) several optimizers, one inf
class InfInto(Callback):
    """Puts an inf into the first gradient of ``module`` before optimizer step ``at`` (1-based)."""

    def __init__(self, module: nn.Module, at: int):
        self.module, self.at, self.infos = module, at, []

    def on_before_optimizer_step(self, trainer):
        if trainer.state.step + 1 == self.at:
            next(p for p in self.module.parameters() if p.grad is not None).grad.view(-1)[0] = float("inf")

    def on_step_end(self, trainer, info):
        self.infos.append(info)


def two_optimizer_trainer(precision, callbacks=(), max_grad_norm=None, n=32, bs=8):
    x, y = regression_data(n)
    model = make_mlp()
    opts = [torch.optim.SGD(model[0].parameters(), lr=0.1), torch.optim.SGD(model[2].parameters(), lr=0.05)]
    trainer = Trainer(
        model,
        opts,
        nn.MSELoss(),
        DataLoader(TensorDataset(x, y), batch_size=bs),
        precision=precision,
        device="cpu",
        max_grad_norm=max_grad_norm,
        lr_scheduler=lambda opt, total: torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s)),
        scaler_kwargs={"init_scale": 1024.0} if precision == "fp16" else None,  # only fp16 has a GradScaler
        callbacks=list(callbacks),
    )
    return trainer, (x, y)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_an_inf_in_one_optimizer_holds_back_only_its_own_step_and_schedule(precision):
    trainer, _ = two_optimizer_trainer(precision)
    inject = InfInto(trainer.model[2], at=2)
    trainer.callbacks.append(inject)
    before = {}

    class Snapshot(Callback):
        def on_before_optimizer_step(self, trainer):
            before[trainer.state.step + 1] = (flat(trainer.model[0]).clone(), flat(trainer.model[2]).clone())

    trainer.callbacks.insert(0, Snapshot())
    after = {}
    trainer.callbacks.append(
        type(
            "After",
            (Callback,),
            {"on_step_end": lambda self, t, info: after.__setitem__(info.step, (flat(t.model[0]), flat(t.model[2])))},
        )()
    )
    result = trainer.fit()

    assert result.steps == 4 and result.history["skipped"] == [False, True, False, False]
    # Step 2: the first optimizer moved its layer, the second held its own.
    assert not torch.equal(after[2][0], before[2][0])
    assert torch.equal(after[2][1], before[2][1])
    # Each schedule follows its own optimizer: 4 real steps for the first, 3 for the second.
    sched_a, sched_b = trainer.lr_schedulers
    assert (sched_a.last_epoch, sched_b.last_epoch) == (4, 3)
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.1 / 5)
    assert trainer.optimizers[1].param_groups[0]["lr"] == pytest.approx(0.05 / 4)
    assert torch.isfinite(flat(trainer.model)).all()
    assert [info.stepped for info in inject.infos] == [[True, True], [True, False], [True, True], [True, True]]


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_the_optimizer_that_steps_is_clipped_by_its_own_finite_norm(precision):
    # One step; the second optimizer's gradients hold an inf. The first must take the
    # clipped step the textbook loop takes on its layer alone - not a zero step
    # (max_norm / inf) and not an unclipped one.
    max_norm = 0.05
    trainer, (x, y) = two_optimizer_trainer(precision, max_grad_norm=max_norm, n=16, bs=16)
    trainer.callbacks.append(InfInto(trainer.model[2], at=1))
    start = copy.deepcopy(trainer.model)
    result = trainer.fit()

    ref = copy.deepcopy(start)
    nn.MSELoss()(ref(x), y).backward()
    ref_norm = float(torch.nn.utils.clip_grad_norm_(ref[0].parameters(), max_norm))
    assert ref_norm > 10 * max_norm  # the clip is active
    torch.optim.SGD(ref[0].parameters(), lr=0.1).step()

    # Compare the updates, not the weights: the update is small beside the weights.
    moved, ref_moved = flat(trainer.model[0]) - flat(start[0]), flat(ref[0]) - flat(start[0])
    tol = dict(rtol=1e-5, atol=1e-8) if precision == "fp32" else dict(rtol=2e-2, atol=2e-5)
    torch.testing.assert_close(moved, ref_moved, **tol)
    # Clipped to max_norm exactly: SGD moved the layer by lr * max_norm.
    assert float(moved.norm()) == pytest.approx(0.1 * max_norm, rel=1e-3)
    assert torch.equal(flat(trainer.model[2]), flat(start[2]))  # skipped: untouched
    assert result.history["skipped"] == [True]
    assert result.history["grad_norm"][0] == float("inf")  # the total norm still tells the truth


# ------------------------------------------------------ (g) deliberate bugs
def test_every_optimizer_is_unscaled_before_the_clip():
    # Two optimizers, fp16, clipping active: the norm and the update are those of the
    # unscaled gradients of both (a loop that unscales only the first sees the second's
    # gradients 1024 times too large).
    max_norm = 0.05
    x, y = regression_data(16)
    model = make_mlp()
    ref = copy.deepcopy(model)
    opts = [torch.optim.SGD(model[0].parameters(), lr=0.1), torch.optim.SGD(model[2].parameters(), lr=0.05)]
    result = Trainer(
        model,
        opts,
        nn.MSELoss(),
        [(x, y)],
        precision="fp16",
        device="cpu",
        max_grad_norm=max_norm,
        scaler_kwargs={"init_scale": 1024.0},
    ).fit()

    nn.MSELoss()(ref(x), y).backward()
    ref_norm = float(torch.nn.utils.clip_grad_norm_(ref.parameters(), max_norm))
    torch.optim.SGD(ref[0].parameters(), lr=0.1).step()
    torch.optim.SGD(ref[2].parameters(), lr=0.05).step()
    assert result.skipped_steps == 0 and ref_norm > 10 * max_norm
    assert result.history["grad_norm"][0] == pytest.approx(ref_norm, rel=2e-2)
    torch.testing.assert_close(flat(model), flat(ref), rtol=1e-2, atol=1e-3)


class AutocastSpy(torch.autograd.Function):
    """Identity whose forward and backward record whether autocast is on."""

    seen: dict[str, list[bool]] = {"forward": [], "backward": []}

    @staticmethod
    def forward(ctx, x):
        AutocastSpy.seen["forward"].append(torch.is_autocast_enabled("cpu"))
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        AutocastSpy.seen["backward"].append(torch.is_autocast_enabled("cpu"))
        return grad


class SpyNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 1)
        self.seen: list[tuple[bool, torch.dtype, str]] = []  # (autocast on, output dtype, matmul precision)

    def forward(self, x):
        out = AutocastSpy.apply(self.lin(x))  # after a parameter: its backward runs
        self.seen.append((torch.is_autocast_enabled("cpu"), out.dtype, torch.get_float32_matmul_precision()))
        return out


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_backward_runs_outside_autocast(precision):
    AutocastSpy.seen = {"forward": [], "backward": []}
    x, y = regression_data(16)
    Trainer(
        SpyNet(),
        sgd(),
        nn.MSELoss(),
        DataLoader(TensorDataset(x, y), batch_size=4),
        precision=precision,
        device="cpu",
        grad_accum=2,
        scaler_kwargs={"init_scale": 1024.0} if precision == "fp16" else None,  # only fp16 has a GradScaler
    ).fit()
    assert AutocastSpy.seen["forward"] == [True] * 4  # the spy is live: forwards ran under autocast
    assert AutocastSpy.seen["backward"] == [False] * 4


@pytest.mark.parametrize("precision,dtype", [("bf16", torch.bfloat16), ("fp16", torch.float16)])
def test_evaluation_and_prediction_run_under_autocast(precision, dtype):
    x, y = regression_data(16)
    model = SpyNet()
    trainer = Trainer(
        model,
        sgd(),
        nn.MSELoss(),
        [],
        eval_loader=DataLoader(TensorDataset(x, y), batch_size=8),
        precision=precision,
        device="cpu",
    )
    trainer.evaluate()
    trainer.evaluate_only()
    out = trainer.predict(DataLoader(TensorDataset(x, y), batch_size=8))
    assert [s[:2] for s in model.seen] == [(True, dtype)] * 6
    assert out.dtype == torch.float32 and out.shape == (16, 1)  # handed back in fp32


# ------------------------------------------------- (b) matmul precision, restored
@pytest.fixture
def notebook_matmul_setting():
    """A process whose own choice is "medium" (what a notebook might set), put back afterwards."""
    saved = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("medium")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(saved)


def global_matmul_state():
    return torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32


def test_fit_evaluate_and_predict_apply_the_precision_and_restore_the_process_setting(notebook_matmul_setting):
    x, y = regression_data(16)
    before = global_matmul_state()
    assert before[0] == "medium"
    model = SpyNet()
    seen_by_callback = []

    class Watch(Callback):
        def on_step_end(self, trainer, info):
            seen_by_callback.append(torch.get_float32_matmul_precision())

    loader = DataLoader(TensorDataset(x, y), batch_size=8)
    trainer = Trainer(model, sgd(), nn.MSELoss(), loader, eval_loader=loader, callbacks=[Watch()])
    calls = {
        "fit": trainer.fit,
        "evaluate": trainer.evaluate,
        "evaluate_only": trainer.evaluate_only,
        "predict": lambda: trainer.predict(loader),
    }
    for name, call in calls.items():
        model.seen.clear()
        call()
        # fp32: TF32 off, the true baseline, whatever the notebook chose.
        assert {s[2] for s in model.seen} == {"highest"}, name
        assert global_matmul_state() == before, name
    assert seen_by_callback == ["highest", "highest"]


def test_the_setting_is_restored_when_training_fails(notebook_matmul_setting):
    def boom(outputs, labels):
        raise RuntimeError("boom")

    x, y = regression_data(8)
    with pytest.raises(RuntimeError, match="boom"):
        Trainer(make_mlp(), sgd(), boom, [(x, y)]).fit()
    assert torch.get_float32_matmul_precision() == "medium"


@pytest.mark.parametrize("seed", [None, 0])
@pytest.mark.parametrize("first", [3, 4, 6], ids=["mid-epoch", "epoch-end", "second-epoch"])
def test_a_second_fit_goes_on_as_one_unbroken_fit(seed, first):
    """Was: a second fit() (after max_steps stopped one) reseeded (the dropout draws started over: other weights)
    or, without a seed, drew a new shuffle and skipped as many of its batches as the first fit trained (one
    example trained twice, another never)."""
    x, y = regression_data(16)

    def trainer(max_steps):
        torch.manual_seed(5)  # the shuffle's draws without a Trainer seed
        model = nn.Sequential(nn.Linear(8, 16), nn.Dropout(0.5), nn.Linear(16, 1))
        loader = DataLoader(TensorDataset(x, y), batch_size=4, shuffle=True)  # 4 steps per epoch
        sgd = lambda p: torch.optim.SGD(p, lr=0.05)  # noqa: E731
        return model, Trainer(model, sgd, nn.MSELoss(), loader, epochs=2, max_steps=max_steps, seed=seed)

    whole, unbroken = trainer(None)
    unbroken.fit()
    model, twice = trainer(first)
    assert twice.fit().steps == first
    twice.max_steps = None
    result = twice.fit()
    assert twice.state.step == 8 and result.history["loss"] == unbroken.state.history["loss"]
    for a, b in zip(whole.parameters(), model.parameters()):
        assert torch.equal(a, b)
