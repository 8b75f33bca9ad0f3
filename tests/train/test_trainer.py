"""The AMP loop against references computed by hand, without AMP or without the feature."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from mixft.train.hooks import Callback, StopTraining
from mixft.train.trainer import Trainer


def make_mlp(seed: int = 0, width: int = 16) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, width), nn.ReLU(), nn.Linear(width, 1))


def regression_data(n: int = 32, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    y = x[:, :1] * 2.0 - x[:, 1:2] + 0.1 * torch.randn(n, 1, generator=g)
    return x, y


def loader(x, y, batch_size):
    return DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=False)


def sgd(lr=0.1):
    return lambda params: torch.optim.SGD(params, lr=lr)


def flat(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).float() for p in model.parameters()])


class InjectAt(Callback):
    """Sets one gradient element to ``value`` before the optimizer step number ``at`` (1-based)."""

    def __init__(self, at: set[int], value=float("inf")):
        self.at, self.value, self.calls = at, value, 0
        self.weights_before: dict[int, torch.Tensor] = {}
        self.weights_after: dict[int, torch.Tensor] = {}

    def on_before_optimizer_step(self, trainer):
        self.calls += 1
        self.weights_before[self.calls] = flat(trainer.model).clone()
        if self.calls in self.at:
            next(p for p in trainer.model.parameters() if p.grad is not None).grad.view(-1)[0] = self.value

    def on_step_end(self, trainer, info):
        self.weights_after[info.step] = flat(trainer.model).clone()


# --------------------------------------------------------------------- accumulation
def test_a_resolved_precision_is_taken_as_it_is_and_a_name_is_resolved(monkeypatch):
    import mixft.train.trainer as trainer_module
    from mixft.amp.precision import PRECISIONS

    asked = []
    monkeypatch.setattr(
        trainer_module, "resolve_precision", lambda name, device: asked.append(name) or PRECISIONS[name]
    )
    x, y = regression_data(8)
    bf16 = PRECISIONS["bf16"]
    assert Trainer(make_mlp(), sgd(), nn.MSELoss(), loader(x, y, 4), precision=bf16).precision is bf16
    assert asked == []  # the run layer resolved it once: not again here
    assert Trainer(make_mlp(), sgd(), nn.MSELoss(), loader(x, y, 4), precision="bf16").precision is bf16
    assert asked == ["bf16"]  # the notebook's name


def test_accumulating_k_micro_batches_equals_one_big_batch_fp32():
    x, y = regression_data(32)
    small = Trainer(make_mlp(), sgd(), nn.MSELoss(), loader(x, y, 4), grad_accum=4, max_grad_norm=None)
    big = Trainer(make_mlp(), sgd(), nn.MSELoss(), loader(x, y, 16), grad_accum=1, max_grad_norm=None)
    r_small, r_big = small.fit(), big.fit()
    assert r_small.steps == r_big.steps == 2
    torch.testing.assert_close(flat(small.model), flat(big.model), rtol=1e-5, atol=1e-6)
    # The logged window loss is the big batch's mean loss, not k times it.
    assert r_small.history["loss"] == pytest.approx(r_big.history["loss"], rel=1e-5)


def test_short_last_window_is_averaged_over_its_own_size():
    # 6 batches with accum 4: windows of 4 and 2. The second must equal one batch of 2*bs.
    x, y = regression_data(24)
    acc = Trainer(make_mlp(), sgd(), nn.MSELoss(), loader(x, y, 4), grad_accum=4, max_grad_norm=None)
    acc.fit()
    ref = make_mlp()
    opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for xb, yb in ((x[:16], y[:16]), (x[16:], y[16:])):
        opt.zero_grad()
        nn.MSELoss()(ref(xb), yb).backward()
        opt.step()
    torch.testing.assert_close(flat(acc.model), flat(ref), rtol=1e-5, atol=1e-6)


def test_fp16_accumulation_unscales_clips_and_updates_once_per_window():
    x, y = regression_data(32)
    unscale_calls = []
    # init_scale 1024: the default 65536 overflows fp16 on this toy data and skips step 1.
    trainer = Trainer(
        make_mlp(),
        sgd(),
        nn.MSELoss(),
        loader(x, y, 4),
        precision="fp16",
        device="cpu",
        grad_accum=4,
        max_grad_norm=1.0,
        scaler_kwargs={"init_scale": 1024.0},
    )
    original = trainer.scaler.unscale_
    trainer.scaler.unscale_ = lambda opt: (unscale_calls.append(1), original(opt))[1]
    result = trainer.fit()
    assert result.steps == 2 and len(unscale_calls) == 2  # once per window, not per micro-batch
    assert result.skipped_steps == 0
    assert len(result.history["loss_scale"]) == 2
    ref = Trainer(make_mlp(), sgd(), nn.MSELoss(), loader(x, y, 16), grad_accum=1, max_grad_norm=1.0)
    ref.fit()
    # fp16 matmuls: agree with the fp32 big batch to fp16 precision.
    torch.testing.assert_close(flat(trainer.model), flat(ref.model), rtol=2e-2, atol=2e-3)


# ------------------------------------------------------------------------- clipping
def test_clipping_sees_unscaled_gradients():
    x, y = regression_data(16)
    max_norm = 0.05  # far below the real norm, so clipping is active
    trainer = Trainer(
        make_mlp(),
        sgd(),
        nn.MSELoss(),
        loader(x, y, 16),
        precision="fp16",
        device="cpu",
        max_grad_norm=max_norm,
        scaler_kwargs={"init_scale": 1024.0},
    )
    result = trainer.fit()

    ref = make_mlp()
    nn.MSELoss()(ref(x), y).backward()
    ref_norm = float(torch.nn.utils.clip_grad_norm_(ref.parameters(), max_norm))
    torch.optim.SGD(ref.parameters(), lr=0.1).step()

    assert result.skipped_steps == 0
    # The norm the trainer saw is the real one, not 1024 times it.
    assert result.history["grad_norm"][0] == pytest.approx(ref_norm, rel=2e-2)
    assert ref_norm > 10 * max_norm
    torch.testing.assert_close(flat(trainer.model), flat(ref), rtol=1e-2, atol=1e-3)


def test_clipping_disabled_with_none():
    x, y = regression_data(16)
    trainer = Trainer(make_mlp(), sgd(), nn.MSELoss(), loader(x, y, 16), max_grad_norm=None)
    trainer.fit()
    ref = make_mlp()
    nn.MSELoss()(ref(x), y).backward()
    torch.optim.SGD(ref.parameters(), lr=0.1).step()
    torch.testing.assert_close(flat(trainer.model), flat(ref))


@pytest.mark.parametrize("max_norm", [1e6, 0.05])  # never clips / clips every step
def test_clip_matches_torch_bitwise(max_norm):
    # The weights must be the same bits as torch's clip-every-step loop, under the limit and over it.
    x, y = regression_data(32)
    ref = make_mlp()
    opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    for xb, yb in loader(x, y, 8):
        opt.zero_grad()
        nn.MSELoss()(ref(xb), yb).backward()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), max_norm)
        opt.step()

    trainer = Trainer(
        make_mlp(),
        lambda p: torch.optim.AdamW(p, lr=1e-2),
        nn.MSELoss(),
        loader(x, y, 8),
        max_grad_norm=max_norm,
        device="cpu",
    )
    trainer.fit()
    assert torch.equal(flat(trainer.model), flat(ref))


# ---------------------------------------------------------------- skipped steps (inf)
@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("value", [float("inf"), float("nan")])
def test_injected_nonfinite_gradient_skips_exactly_that_step(fused, value):
    x, y = regression_data(32)
    inject = InjectAt({2}, value)

    def adamw(params):
        return torch.optim.AdamW(params, lr=1e-2, fused=fused)

    def schedule(opt, total):
        return torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))

    trainer = Trainer(
        make_mlp(),
        adamw,
        nn.MSELoss(),
        loader(x, y, 8),
        precision="fp16",
        device="cpu",
        lr_scheduler=schedule,
        scaler_kwargs={"init_scale": 1024.0},
        callbacks=[inject],
    )
    result = trainer.fit()

    assert result.steps == 4
    assert result.history["skipped"] == [False, True, False, False]
    assert result.skipped_steps == 1
    # The scale halves at the skipped step (growth needs 2000 clean steps, so no growth here).
    assert result.history["loss_scale"] == [1024.0, 512.0, 512.0, 512.0]
    assert result.final_loss_scale == 512.0
    # The weights did not move on the skipped step, and did on the others.
    assert torch.equal(inject.weights_after[2], inject.weights_before[2])
    assert not torch.equal(inject.weights_after[3], inject.weights_before[3])
    # The scheduler stepped 3 times, not 4: the LR schedule did not run ahead.
    assert trainer.lr_schedulers[0].last_epoch == 3
    assert result.history["lr"] == pytest.approx([1e-2, 1e-2 / 2, 1e-2 / 2, 1e-2 / 3])
    assert torch.isfinite(flat(trainer.model)).all()


def test_nonfinite_gradient_without_scaler_is_skipped_in_bf16():
    x, y = regression_data(32)
    inject = InjectAt({1}, float("nan"))
    trainer = Trainer(
        make_mlp(), sgd(), nn.MSELoss(), loader(x, y, 8), precision="bf16", device="cpu", callbacks=[inject]
    )
    result = trainer.fit()
    assert result.history["skipped"] == [True, False, False, False]
    assert result.final_loss_scale is None
    assert torch.isfinite(flat(trainer.model)).all()


# ----------------------------------------------------------------------- precisions
def test_fp16_with_cpu_grad_scaler_trains():
    x, y = regression_data(64)
    trainer = Trainer(
        make_mlp(),
        sgd(0.05),
        nn.MSELoss(),
        loader(x, y, 16),
        precision="fp16",
        device="cpu",
        epochs=8,
        eval_loader=loader(x, y, 64),
    )
    before = trainer.evaluate()["loss"]
    result = trainer.fit()
    assert result.grad_scaler and result.final_loss_scale is not None
    assert result.eval["loss"] < 0.5 * before
    assert next(trainer.model.parameters()).dtype == torch.float32  # fp32 master weights


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_one_code_path_for_every_precision(precision):
    x, y = regression_data(32)
    result = Trainer(make_mlp(), sgd(), nn.MSELoss(), loader(x, y, 8), precision=precision, device="cpu").fit()
    assert result.precision == precision
    assert result.steps == 4 and len(result.history["loss"]) == 4
    assert all(isinstance(v, float) for v in result.history["loss"])
    assert result.train_samples_per_s > 0 and result.train_time_s > 0
    assert result.peak_memory_kind == "cpu_rss" and result.peak_memory_bytes > 0


def test_autocast_covers_forward_and_loss_only():
    seen = {}

    class Probe(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 1)

        def forward(self, x):
            out = self.lin(x)
            seen["forward_dtype"] = out.dtype
            seen["autocast_in_forward"] = torch.is_autocast_enabled("cpu")
            return out

    x, y = regression_data(8)
    Trainer(Probe(), sgd(), nn.MSELoss(), loader(x, y, 8), precision="bf16", device="cpu").fit()
    assert seen == {"forward_dtype": torch.bfloat16, "autocast_in_forward": True}
    assert not torch.is_autocast_enabled("cpu")


# ------------------------------------------------------------------ budget, results
def test_max_steps_ends_the_run_mid_epoch():
    x, y = regression_data(64)
    result = Trainer(make_mlp(), sgd(), nn.MSELoss(), loader(x, y, 4), epochs=3, max_steps=5).fit()
    assert result.steps == 5


def test_eval_history_per_epoch_and_accuracy_with_predict_fn():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 8, generator=g)
    y = (x[:, 0] > 0).float()
    model = nn.Sequential(nn.Linear(8, 1), nn.Flatten(0))
    trainer = Trainer(
        model,
        sgd(0.5),
        nn.BCEWithLogitsLoss(),
        loader(x, y, 16),
        eval_loader=loader(x, y, 32),
        epochs=3,
        predict_fn=lambda logits: (logits > 0).long(),
    )
    result = trainer.fit()
    assert [e["epoch"] for e in result.eval_history] == [1, 2, 3]
    assert result.eval["accuracy"] == result.eval_history[-1]["accuracy"] > 0.8
    manual = ((trainer.predict(loader(x, y, 32)) > 0).float() == y).float().mean().item()
    assert result.eval["accuracy"] == pytest.approx(manual)


def test_callback_can_stop_training_with_a_reason():
    class StopAt2(Callback):
        def on_step_end(self, trainer, info):
            if info.step == 2:
                raise StopTraining("enough")

    x, y = regression_data(64)
    result = Trainer(make_mlp(), sgd(), nn.MSELoss(), loader(x, y, 4), callbacks=[StopAt2()]).fit()
    assert result.steps == 2 and result.stopped_early == "enough"
    assert result.stop_kind == "callback"  # what code reads; the message is for people
    assert result.to_dict()["stop_kind"] == "callback"


def test_a_run_that_spends_its_budget_has_no_stop_kind_and_kinds_are_checked():
    x, y = regression_data(16)
    result = Trainer(make_mlp(), sgd(), nn.MSELoss(), loader(x, y, 8)).fit()
    assert (result.stopped_early, result.stop_kind) == (None, None)
    with pytest.raises(ValueError, match="collapse, interrupt, callback"):
        StopTraining("oops", kind="crash")


def test_cpu_memory_is_reported_with_the_rss_at_the_start():
    x, y = regression_data(64)
    result = Trainer(make_mlp(width=256), sgd(), nn.MSELoss(), loader(x, y, 16), epochs=2).fit()
    assert result.peak_memory_kind == "cpu_rss"
    # The process's RSS when the run began: what the run added is peak - start.
    assert 0 < result.start_memory_bytes <= result.peak_memory_bytes
    assert result.to_dict()["start_memory_bytes"] == result.start_memory_bytes


def test_several_optimizers_share_one_scaler():
    x, y = regression_data(32)
    model = make_mlp()
    ref = copy.deepcopy(model)
    opt_a = torch.optim.SGD(model[0].parameters(), lr=0.1)
    opt_b = torch.optim.SGD(model[2].parameters(), lr=0.05)
    trainer = Trainer(
        model,
        [opt_a, opt_b],
        nn.MSELoss(),
        loader(x, y, 32),
        precision="fp16",
        device="cpu",
        max_grad_norm=None,
        scaler_kwargs={"init_scale": 1024.0},
    )
    result = trainer.fit()
    assert result.steps == 1 and result.skipped_steps == 0
    ref_a = torch.optim.SGD(ref[0].parameters(), lr=0.1)
    ref_b = torch.optim.SGD(ref[2].parameters(), lr=0.05)
    nn.MSELoss()(ref(x), y).backward()
    ref_a.step(), ref_b.step()
    torch.testing.assert_close(flat(model), flat(ref), rtol=1e-2, atol=1e-3)


# --------------------------------------------------------------------- bad inputs
@pytest.mark.parametrize("kwargs", [{"grad_accum": 0}, {"epochs": 0}, {"max_steps": -1}, {"max_grad_norm": 0.0}])
def test_bad_trainer_options_are_refused(kwargs):
    x, y = regression_data(8)
    with pytest.raises(ValueError):
        Trainer(make_mlp(), sgd(), nn.MSELoss(), loader(x, y, 8), **kwargs)


def test_fp16_scaler_with_half_parameters_is_refused_at_start():
    from mixft.errors import UsageError

    x, y = regression_data(8)
    with pytest.raises(UsageError, match="fp32 master weights"):
        Trainer(make_mlp().half(), sgd(), nn.MSELoss(), loader(x, y.half(), 8), precision="fp16", device="cpu")


def test_trainer_matches_a_plain_hand_written_loop_on_a_fixed_seed():
    # The reference: the textbook fp32 loop, no mixft. Same seed, data order, clipping, schedule.
    x, y = regression_data(48)
    ref = make_mlp()
    opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1.0, end_factor=0.1, total_iters=6)
    for xb, yb in loader(x, y, 8):
        opt.zero_grad()
        nn.MSELoss()(ref(xb), yb).backward()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.5)
        opt.step()
        sched.step()

    trainer = Trainer(
        make_mlp(),
        lambda p: torch.optim.AdamW(p, lr=1e-2),
        nn.MSELoss(),
        loader(x, y, 8),
        max_grad_norm=0.5,
        lr_scheduler=lambda o, total: torch.optim.lr_scheduler.LinearLR(o, 1.0, 0.1, total_iters=total),
    )
    trainer.fit()
    assert trainer.total_steps == 6
    torch.testing.assert_close(flat(trainer.model), flat(ref), rtol=1e-6, atol=1e-7)


# ------------------------------------------------------------- fused optimizers
def test_fused_adamw_availability_is_probed_not_assumed(monkeypatch):
    from mixft.train.optim import fused_adamw_available

    assert fused_adamw_available(torch.device("cpu")) is True  # torch >= 2.4 fuses AdamW on CPU

    def refuse(*args, **kwargs):
        raise RuntimeError("`fused=True` requires all the params to be floating point Tensors of supported devices")

    monkeypatch.setattr(torch.optim, "AdamW", refuse)
    assert fused_adamw_available(torch.device("cpu")) is False


def _fused_reference(x, y, max_norm, lr=1e-2):
    ref = make_mlp()
    opt = torch.optim.AdamW(ref.parameters(), lr=lr, fused=True)
    norms = []
    for xb, yb in loader(x, y, 8):
        opt.zero_grad()
        nn.MSELoss()(ref(xb), yb).backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(ref.parameters(), max_norm)))
        opt.step()
    return ref, norms


def test_fused_adamw_with_clipping_matches_clip_then_step():
    x, y = regression_data(48)
    max_norm = 0.3  # well below the gradient norms here: every step clips
    ref, ref_norms = _fused_reference(x, y, max_norm)
    assert min(ref_norms) > 2 * max_norm
    trainer = Trainer(
        make_mlp(),
        lambda p: torch.optim.AdamW(p, lr=1e-2, fused=True),
        nn.MSELoss(),
        loader(x, y, 8),
        max_grad_norm=max_norm,
        device="cpu",
    )
    result = trainer.fit()
    torch.testing.assert_close(flat(trainer.model), flat(ref), rtol=1e-6, atol=1e-7)
    assert result.history["grad_norm"] == pytest.approx(ref_norms, rel=1e-6)


def test_fused_and_plain_optimizers_side_by_side_are_clipped_by_one_global_norm():
    x, y = regression_data(48)

    def reference():
        model = make_mlp()
        a = torch.optim.AdamW(model[0].parameters(), lr=1e-2, fused=True)
        b = torch.optim.SGD(model[2].parameters(), lr=0.05)
        for xb, yb in loader(x, y, 8):
            a.zero_grad(), b.zero_grad()
            nn.MSELoss()(model(xb), yb).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.3)
            a.step(), b.step()
        return model

    model = make_mlp()
    opts = [
        torch.optim.AdamW(model[0].parameters(), lr=1e-2, fused=True),
        torch.optim.SGD(model[2].parameters(), lr=0.05),
    ]
    Trainer(model, opts, nn.MSELoss(), loader(x, y, 8), max_grad_norm=0.3, device="cpu").fit()
    torch.testing.assert_close(flat(model), flat(reference()), rtol=1e-6, atol=1e-7)


# ------------------------------------------------------------------ gradient norm
def test_grad_norms_come_from_one_foreach_call_and_match_the_per_parameter_reference(monkeypatch):
    from mixft.train.trainer import grad_norms

    model = make_mlp()
    nn.MSELoss()(model(torch.randn(16, 8)), torch.randn(16, 1)).backward()
    opt_a = torch.optim.SGD(model[0].parameters(), lr=0.1)
    opt_b = torch.optim.SGD(model[2].parameters(), lr=0.1)
    idle = torch.optim.SGD([nn.Parameter(torch.ones(3))], lr=0.1)  # no gradient yet
    calls = []
    real = torch._foreach_norm
    monkeypatch.setattr(
        torch, "_foreach_norm", lambda tensors, *a, **k: (calls.append(len(tensors)), real(tensors, *a, **k))[1]
    )
    norms = grad_norms([opt_a, opt_b, idle], torch.device("cpu"))
    assert calls == [4]  # every gradient of every optimizer in one call
    for opt, norm in zip((opt_a, opt_b), norms):
        grads = [p.grad for g in opt.param_groups for p in g["params"]]
        reference = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
        torch.testing.assert_close(norm, reference, rtol=1e-6, atol=0)
        torch.testing.assert_close(norm, torch.nn.utils.get_total_norm(grads), rtol=1e-6, atol=0)
    assert norms[2].item() == 0.0


def test_grad_norms_of_half_gradients_are_fp32_and_an_inf_stays_in_its_optimizer():
    from mixft.train.trainer import grad_norms

    big = nn.Parameter(torch.zeros(4, dtype=torch.bfloat16))
    big.grad = torch.full((4,), 300.0, dtype=torch.bfloat16)  # squares overflow nothing in fp32
    bad = nn.Parameter(torch.zeros(2))
    bad.grad = torch.tensor([1.0, float("inf")])
    norms = grad_norms([torch.optim.SGD([big], lr=0.1), torch.optim.SGD([bad], lr=0.1)], torch.device("cpu"))
    assert norms[0].dtype == torch.float32 and norms[0].item() == pytest.approx(600.0)
    assert torch.isinf(norms[1])


def test_a_result_keeps_its_own_history_when_the_trainer_fits_again():
    # Was: RunResult.history was the trainer's live dict: a second fit() grew the first result's history to 8
    # entries while its steps said 4 (and both results shared one dict).
    x, y = regression_data(16)
    trainer = Trainer(
        make_mlp(),
        lambda p: torch.optim.SGD(p, lr=0.05),
        nn.MSELoss(),
        DataLoader(TensorDataset(x, y), batch_size=4),
        device="cpu",
    )
    first = trainer.fit()
    kept = {key: list(values) for key, values in first.history.items()}
    trainer.epochs = 2
    second = trainer.fit()
    assert first.history == kept and len(first.history["loss"]) == first.steps == 4
    assert second.steps == 8 and len(second.history["loss"]) == 8 and second.history is not first.history
