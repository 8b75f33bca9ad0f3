"""The loop's speed switches (mixft.speed) change the time, not the maths.

Each switch is checked against the thing it replaces: the fast dropout against the
dropout distribution and its own backward, the clip folded into a fused optimizer against
clip-then-step, the freed-memory setting against page-fault counts, compile against eager.
"""

from __future__ import annotations

import functools
import sys

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from mixft.cpu_allocator import keep_freed_memory
from mixft.fast_dropout import FastCPUDropout, fast_cpu_dropout, keep_mask
from mixft.speed import SpeedOptions
from mixft.trainer import Trainer


def make_mlp(seed: int = 0, dropout: float = 0.0) -> nn.Module:
    torch.manual_seed(seed)
    layers = [nn.Linear(8, 32), nn.ReLU()] + ([nn.Dropout(dropout)] if dropout else []) + [nn.Linear(32, 1)]
    return nn.Sequential(*layers)


def data(n: int = 48, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    return x, x[:, :1] * 3.0 - x[:, 1:2]


def loader(x, y, bs=8):
    return DataLoader(TensorDataset(x, y), batch_size=bs, shuffle=False)


def flat(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


# ---------------------------------------------------------------------- fast dropout
@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_keep_mask_drops_the_requested_fraction(p):
    torch.manual_seed(0)
    n = 1_000_000
    dropped = 1.0 - keep_mask((n,), p).double().mean().item()
    # p is rounded to 1/65536; the binomial std over 1e6 draws is <= 5e-4: 6 sigma.
    assert abs(dropped - round(p * 65536) / 65536) < 3e-3


def test_keep_mask_lanes_are_independent_and_uniform():
    # Three mask bits come from one 64-bit draw: neighbours must not be correlated.
    torch.manual_seed(1)
    m = keep_mask((300_000,), 0.5).view(-1, 3).double()
    assert m.mean(0).sub(0.5).abs().max() < 6e-3  # every lane at the rate
    both = (m[:, 0] * m[:, 1]).mean().item()
    assert abs(both - 0.25) < 6e-3  # P(keep, keep) = P(keep)^2


def test_fast_dropout_scales_kept_values_and_backward_uses_the_same_mask():
    torch.manual_seed(0)
    x = torch.randn(64, 33, requires_grad=True)
    layer = FastCPUDropout(0.25)
    out = layer(x)
    kept = out != 0
    torch.testing.assert_close(out[kept], x.detach()[kept] / 0.75)
    assert 0.15 < 1 - kept.double().mean().item() < 0.35
    out.backward(torch.ones_like(out))
    torch.testing.assert_close(x.grad, kept.float() / 0.75)


def test_fast_dropout_is_reproducible_from_torch_seed_and_differs_across_seeds():
    x = torch.ones(1000)
    masks = []
    for seed in (3, 3, 4):
        torch.manual_seed(seed)
        masks.append(FastCPUDropout(0.5)(x) != 0)
    assert torch.equal(masks[0], masks[1])
    assert not torch.equal(masks[0], masks[2])


def test_fast_dropout_matches_torch_dropout_in_distribution():
    # Same first two moments as nn.Dropout (unbiased: E[out] = x), over many draws.
    torch.manual_seed(0)
    x = torch.full((400_000,), 2.0)
    ours, theirs = FastCPUDropout(0.1)(x), nn.Dropout(0.1)(x)
    assert ours.mean().item() == pytest.approx(theirs.mean().item(), abs=5e-3)
    assert ours.mean().item() == pytest.approx(2.0, abs=5e-3)
    assert ours.std().item() == pytest.approx(theirs.std().item(), rel=2e-2)


def test_fast_dropout_is_identity_in_eval_and_keeps_bf16_under_autocast():
    x = torch.randn(16, 8)
    layer = FastCPUDropout(0.3).eval()
    assert torch.equal(layer(x), x)
    layer.train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert layer(x.bfloat16()).dtype == torch.bfloat16


def test_swap_covers_exact_dropout_only_and_is_undone_even_on_error():
    class MyDropout(nn.Dropout):  # a subclass may do more: left alone
        pass

    model = nn.Sequential(nn.Dropout(0.1), MyDropout(0.1), nn.Sequential(nn.Dropout(0.2)))
    with pytest.raises(RuntimeError, match="boom"):
        with fast_cpu_dropout(model) as n:
            assert n == 2
            assert [type(m) for m in model.modules()][1:] == [FastCPUDropout, MyDropout, nn.Sequential, FastCPUDropout]
            raise RuntimeError("boom")
    assert [type(m) for m in model.modules()][1:] == [nn.Dropout, MyDropout, nn.Sequential, nn.Dropout]


def test_trainer_runs_fast_dropout_on_cpu_and_hands_back_the_model_unchanged():
    seen = []

    class Spy(nn.Module):
        def __init__(self):
            super().__init__()
            self.drop = nn.Dropout(0.2)

        def forward(self, x):
            seen.append(type(self.drop))
            return self.drop(x)

    model = nn.Sequential(nn.Linear(8, 1), Spy())
    x, y = data(16)
    Trainer(model, lambda p: torch.optim.SGD(p, lr=0.1), nn.MSELoss(), loader(x, y), device="cpu",
            speed=SpeedOptions(fast_cpu_dropout=True)).fit()
    assert set(seen) == {FastCPUDropout}
    assert type(model[1].drop) is nn.Dropout
    seen.clear()
    # Opt-in: the default loop runs torch's dropout.
    Trainer(model, lambda p: torch.optim.SGD(p, lr=0.1), nn.MSELoss(), loader(x, y), device="cpu").fit()
    assert set(seen) == {nn.Dropout}


def test_fast_dropout_trains_like_torch_dropout():
    # Different masks, same regulariser: both runs fit the data about equally well.
    x, y = data(256)
    losses = {}
    for name, speed in (("fast", SpeedOptions(fast_cpu_dropout=True)), ("torch", SpeedOptions.reference())):
        trainer = Trainer(make_mlp(dropout=0.2), lambda p: torch.optim.Adam(p, lr=1e-2), nn.MSELoss(),
                          loader(x, y, 32), device="cpu", epochs=15, seed=0, speed=speed,
                          eval_loader=loader(x, y, 256))
        losses[name] = trainer.fit().eval["loss"]
    assert losses["fast"] < 0.1 and losses["torch"] < 0.1
    assert losses["fast"] == pytest.approx(losses["torch"], rel=0.5, abs=0.02)


# ------------------------------------------------------------ clip inside the fused step
def _fused_reference(x, y, max_norm, lr=1e-2):
    ref = make_mlp()
    opt = torch.optim.AdamW(ref.parameters(), lr=lr, fused=True)
    norms = []
    for xb, yb in loader(x, y):
        opt.zero_grad()
        nn.MSELoss()(ref(xb), yb).backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(ref.parameters(), max_norm)))
        opt.step()
    return ref, norms


@pytest.mark.parametrize("clip_in_optimizer", [True, False])
def test_fused_adamw_with_clipping_matches_clip_then_step(clip_in_optimizer):
    x, y = data(48)
    max_norm = 0.3  # well below the gradient norms here: every step clips
    ref, ref_norms = _fused_reference(x, y, max_norm)
    assert min(ref_norms) > 2 * max_norm

    handed = []

    def adamw(params):
        opt = torch.optim.AdamW(params, lr=1e-2, fused=True)
        step = opt.step
        opt.step = functools.wraps(step)(lambda *a, **k: (handed.append(getattr(opt, "grad_scale", None)), step(*a, **k))[1])
        return opt

    trainer = Trainer(make_mlp(), adamw, nn.MSELoss(), loader(x, y), max_grad_norm=max_norm, device="cpu",
                      speed=SpeedOptions(clip_in_optimizer=clip_in_optimizer))
    result = trainer.fit()
    torch.testing.assert_close(flat(trainer.model), flat(ref), rtol=1e-6, atol=1e-7)
    assert result.history["grad_norm"] == pytest.approx(ref_norms, rel=1e-6)
    if clip_in_optimizer:  # the kernel got norm / max_norm each step, and nothing after the step
        assert [float(s) for s in handed] == pytest.approx([n / max_norm for n in ref_norms], rel=1e-5)
    else:
        assert handed == [None] * len(ref_norms)
    assert not hasattr(trainer.optimizer, "grad_scale")


def test_clip_in_fused_step_with_fp16_scaler_matches_the_separate_clip():
    x, y = data(48)
    runs = {}
    for folded in (True, False):
        trainer = Trainer(make_mlp(), lambda p: torch.optim.AdamW(p, lr=1e-2, fused=True), nn.MSELoss(),
                          loader(x, y), precision="fp16", device="cpu", max_grad_norm=0.3,
                          scaler_kwargs={"init_scale": 256.0}, speed=SpeedOptions(clip_in_optimizer=folded))
        result = trainer.fit()
        assert result.skipped_steps == 0 and not hasattr(trainer.optimizer, "grad_scale")
        runs[folded] = flat(trainer.model)
    torch.testing.assert_close(runs[True], runs[False], rtol=1e-5, atol=1e-6)


def test_non_fused_optimizers_are_clipped_in_place_beside_fused_ones():
    # Two optimizers, one fused: each is clipped by its own route, both by the one global norm.
    x, y = data(48)

    def reference():
        model = make_mlp()
        a = torch.optim.AdamW(model[0].parameters(), lr=1e-2, fused=True)
        b = torch.optim.SGD(model[2].parameters(), lr=0.05)
        for xb, yb in loader(x, y):
            a.zero_grad(), b.zero_grad()
            nn.MSELoss()(model(xb), yb).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.3)
            a.step(), b.step()
        return model

    model = make_mlp()
    opts = [torch.optim.AdamW(model[0].parameters(), lr=1e-2, fused=True), torch.optim.SGD(model[2].parameters(), lr=0.05)]
    Trainer(model, opts, nn.MSELoss(), loader(x, y), max_grad_norm=0.3, device="cpu").fit()
    torch.testing.assert_close(flat(model), flat(reference()), rtol=1e-6, atol=1e-7)


# ---------------------------------------------------------------- freed memory reuse
_FAULTS_SCRIPT = """
import json, resource, torch
from mixft.cpu_allocator import keep_freed_memory

def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

def faults_per_alloc():
    # Warm-up: inside the block glibc's heap grows for a few allocations (posix_memalign
    # requests do not fit the chunk just freed; measured 6-12) and then reuses it.
    quiet = 0
    for _ in range(40):
        before = faults()
        torch.zeros(64 << 18)  # 64 MiB
        quiet = quiet + 1 if faults() - before < 100 else 0
        if quiet == 2:
            break
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(5):
        torch.zeros(64 << 18)
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 5

plain = faults_per_alloc()
with keep_freed_memory() as active:
    kept = faults_per_alloc()
print(json.dumps({"active": active, "plain": plain, "kept": kept}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc tuning is Linux-only")
def test_keep_freed_memory_stops_the_page_faults_of_a_large_tensor_per_step():
    # A fresh interpreter: glibc's heap in this test process depends on every test before.
    # (After the block, reuse depends on where the freed chunks ended up; not asserted.)
    import json
    import subprocess

    proc = subprocess.run([sys.executable, "-c", _FAULTS_SCRIPT], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    if not got["active"]:
        pytest.skip("not glibc: nothing to tune")
    assert got["plain"] > 10_000  # 64 MiB / 4 KiB pages, faulted in on every allocation
    assert got["kept"] < got["plain"] / 20


def test_keep_freed_memory_off_does_nothing():
    with keep_freed_memory(enabled=False) as active:
        assert active is False


# ----------------------------------------------------------------------------- compile
def test_compile_trains_the_compiled_module_and_matches_eager(monkeypatch):
    # aot_eager runs dynamo's capture and AOT autograd, everything but inductor's C++
    # code generation (minutes on 2 cores): the wiring and the numerics are what is tested.
    compiled = []
    real_compile = torch.compile

    def compile_aot_eager(model, **kwargs):
        compiled.append(kwargs)
        return real_compile(model, backend="aot_eager", **kwargs)

    monkeypatch.setattr(torch, "compile", compile_aot_eager)
    x, y = data(48)
    eager = Trainer(make_mlp(), lambda p: torch.optim.AdamW(p, lr=1e-2), nn.MSELoss(), loader(x, y), device="cpu")
    eager.fit()
    trainer = Trainer(make_mlp(), lambda p: torch.optim.AdamW(p, lr=1e-2), nn.MSELoss(), loader(x, y), device="cpu",
                      speed=SpeedOptions(compile=True), eval_loader=loader(x, y, 48))
    result = trainer.fit()
    assert compiled == [{"dynamic": True}]
    assert trainer._train_model is not trainer.model  # the optimized module ran training
    assert result.steps == 6 and result.eval["loss"] > 0  # evaluation ran on the eager module
    torch.testing.assert_close(flat(trainer.model), flat(eager.model), rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------------- CLI
def test_cli_speed_flags_reach_the_trainer_and_results(tmp_path, tiny_bert_dir, tiny_data_dir, monkeypatch):
    import json

    from mixft import trainer as trainer_module
    from mixft.cli import main

    seen = []
    real_init = trainer_module.Trainer.__init__

    def spy(self, *args, **kwargs):
        seen.append(kwargs.get("speed"))
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(trainer_module.Trainer, "__init__", spy)
    common = ["--recipe", "bert-sst2", "--model", str(tiny_bert_dir), "--data-dir", str(tiny_data_dir),
              "--batch-size", "4", "--max-steps", "2", "--no-progress"]
    assert main([*common, "--output-dir", str(tmp_path / "a")]) == 0
    assert main([*common, "--no-speedups", "--output-dir", str(tmp_path / "b")]) == 0
    assert seen == [SpeedOptions(), SpeedOptions.reference()]
    configs = [json.loads((tmp_path / d / "results.json").read_text())["runs"][0]["config"] for d in "ab"]
    assert [(c["speedups"], c["compile"]) for c in configs] == [(True, False), (False, False)]


@pytest.mark.parametrize("field", ["compile", "speedups"])
def test_speed_flags_in_run_config_must_be_booleans(field):
    from mixft.config import RunConfig
    from mixft.errors import UsageError
    from mixft.registry import get_recipe

    cfg = RunConfig(**{field: "yes"}).with_defaults(get_recipe("bert-sst2").DEFAULTS)
    with pytest.raises(UsageError, match=f"RunConfig.{field} must be True or False, got 'yes'") as err:
        cfg.validate()
    assert "\n" not in str(err.value)
