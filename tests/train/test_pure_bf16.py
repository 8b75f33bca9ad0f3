"""Pure bf16 (--precision bf16-pure / bf16-true): updates kept, state held in bf16, resume exact, bad input refused.

The lost-update case is issue 32's: a bf16 weight of 1.0, 20 AdamW steps at lr 1e-4 with a
constant gradient. fp32 ends at 0.998; 0.998 is not a bf16 number (its neighbours are
0.99609375 and 1.0), so "moves as fp32 does, to bf16 tolerance" means: within one bf16
spacing below 1.0 (2**-8), and the weight plus its Kahan compensation within 1e-5 of fp32.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from mixft.amp.memory import optimizer_state_bytes
from mixft.amp.precision import PRECISIONS, Precision, choose_precision, resolve_precision
from mixft.callbacks.checkpointer import Checkpointer
from mixft.cli.main import main
from mixft.errors import UsageError
from mixft.train.checkpoint import load_checkpoint, resume
from mixft.train.optim import adamw_factory
from mixft.train.pure_bf16 import BF16_TRUE_NOTICE, _warned, is_compensated
from mixft.train.trainer import Trainer

REPO = Path(__file__).resolve().parents[2]
CPU = torch.device("cpu")
BF16_SPACING_BELOW_1 = 2.0**-8


def _twenty_steps(precision_name: str, factory=None) -> tuple[torch.Tensor, torch.optim.Optimizer]:
    precision = PRECISIONS[precision_name]
    weight = nn.Parameter(torch.ones(4, 4, dtype=precision.param_dtype or torch.float32))
    opt = (factory or adamw_factory(1e-4, CPU, weight_decay=0.0, precision=precision))([weight])
    for _ in range(20):
        weight.grad = torch.ones_like(weight)
        opt.step()
    return weight.detach(), opt


def test_plain_bf16_loses_the_update_and_bf16_pure_keeps_it():
    fp32, _ = _twenty_steps("fp32")
    assert abs(fp32[0, 0].item() - 0.998) < 1e-6
    plain, _ = _twenty_steps("bf16-true", lambda params: torch.optim.AdamW(params, lr=1e-4, weight_decay=0.0))
    assert torch.all(plain == 1.0)  # torch's own AdamW on bf16 weights: every 1e-4 step rounded away
    true, _ = _twenty_steps("bf16-true")
    assert torch.all(true == 1.0)  # bf16-true: the same loss, on request
    pure, opt = _twenty_steps("bf16-pure")
    assert pure.dtype == torch.bfloat16 and torch.all(pure < 1.0)
    assert torch.all((pure.float() - fp32).abs() <= BF16_SPACING_BELOW_1)
    comp = opt.state[opt.param_groups[0]["params"][0]]["kahan_comp"]
    assert comp.dtype == torch.bfloat16
    torch.testing.assert_close(pure.float() + comp.float(), fp32, rtol=0, atol=1e-5)


def test_the_factory_builds_torch_optimi_with_torchs_betas_and_only_bf16_pure_compensates():
    params = [nn.Parameter(torch.ones(2, 2, dtype=torch.bfloat16)), nn.Parameter(torch.ones(2, dtype=torch.bfloat16))]
    pure = adamw_factory(1e-3, CPU, precision=PRECISIONS["bf16-pure"])(params)
    true = adamw_factory(1e-3, CPU, precision=PRECISIONS["bf16-true"])(params)
    import optimi

    # bf16-pure: optimi's AdamW with the decay through the compensation (mixft.train.kahan_adamw).
    assert isinstance(pure, optimi.AdamW) and is_compensated(pure) and not is_compensated(true)
    group = pure.param_groups[0]
    assert (group["beta1"], group["beta2"], group["eps"]) == (0.9, 0.999, 1e-8)
    assert [g["weight_decay"] for g in pure.param_groups] == [0.01, 0.0]  # BERT's groups, as for AMP
    assert not is_compensated(torch.optim.AdamW(params, lr=1e-3))


# ---------------------------------------------------------------------------------------
# The loop: cast, state, memory, resume
# ---------------------------------------------------------------------------------------

_g = torch.Generator().manual_seed(1)
X = torch.randn(48, 8, generator=_g)
Y = torch.randn(48, 1, generator=_g)


def make_trainer(precision="bf16-pure", callbacks=(), epochs=2, grad_accum=2):
    """test_checkpoint's MLP: dropout, a shuffling loader, accumulation 2, clipping 1.0, a linear schedule."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 1))
    train = DataLoader(TensorDataset(X, Y), batch_size=4, shuffle=True)
    return Trainer(
        model,
        adamw_factory(1e-2, CPU, precision=PRECISIONS[precision]),
        nn.MSELoss(),
        train,
        eval_loader=DataLoader(TensorDataset(X, Y), batch_size=16),
        precision=precision,
        epochs=epochs,
        grad_accum=grad_accum,
        seed=0,
        callbacks=list(callbacks),
        max_grad_norm=1.0,
        lr_scheduler=lambda opt, n: torch.optim.lr_scheduler.LinearLR(opt, 1.0, 0.1, n),
    )


def test_the_loop_holds_weights_gradients_and_optimizer_state_in_bf16():
    trainer = make_trainer(epochs=1)
    grad_dtypes = set()
    trainer.optimizer.register_step_pre_hook(
        lambda opt, args, kwargs: grad_dtypes.update(p.grad.dtype for g in opt.param_groups for p in g["params"])
    )
    result = trainer.fit()
    params = list(trainer.model.parameters())
    n = sum(p.numel() for p in params)
    assert {p.dtype for p in params} == {torch.bfloat16} and grad_dtypes == {torch.bfloat16}
    state = [v for s in trainer.optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    assert {v.dtype for v in state} == {torch.bfloat16} and len(state) == 3 * len(params)  # 2 moments + kahan_comp
    # 2 moments + compensation, 2 bytes each, plus optimi's int32 step counter per param group.
    assert optimizer_state_bytes(trainer.optimizers) == 6 * n + 4 * len(trainer.optimizer.param_groups)
    assert (result.precision, result.param_dtype, result.autocast_dtype, result.grad_scaler) == (
        "bf16-pure",
        "bfloat16",
        "bfloat16",
        False,
    )
    assert result.optimizer == "mixft.KahanAdamW(kahan_sum=True)"  # not optimi's own: its decay is compensated
    losses = trainer.state.history["loss"]
    assert all(math.isfinite(x) for x in losses) and len(losses) == 6
    lrs = trainer.state.history["lr"]
    assert lrs[0] > lrs[-1]  # the schedule moved optimi's float lr
    assert max(trainer.state.history["grad_norm"]) > 0


class StopAt:
    def __init__(self, step):
        self.step = step

    def __getattr__(self, name):  # every other callback hook: nothing
        return lambda *args, **kwargs: None

    def on_step_end(self, trainer, info):
        from mixft.train.hooks import StopTraining

        if info.step == self.step:
            raise StopTraining("test stop")


def _stopped_then_resumed(tmp_path, precision, stop_step, damage=None):
    path = tmp_path / "ckpt.pt"
    make_trainer(precision, [Checkpointer(path, every=1), StopAt(stop_step)]).fit()
    if damage is not None:
        ckpt = load_checkpoint(path)
        damage(ckpt)
        second = make_trainer(precision)
        second.load_state_dict(ckpt["trainer"])
    else:
        second = make_trainer(precision, [Checkpointer(path, every=1)])
        resume(second, path)
    second.fit()
    return second


def _same(a: Trainer, b: Trainer) -> bool:
    weights = all(torch.equal(x, y) for x, y in zip(a.model.parameters(), b.model.parameters()))
    states = all(
        torch.equal(x[k], y[k]) if isinstance(x[k], torch.Tensor) else x[k] == y[k]  # decay_factor: a float
        for x, y in zip(a.optimizer.state.values(), b.optimizer.state.values())
        for k in x
    )
    return weights and states


# 12 batches per epoch, 2 per window: 6 steps per epoch, 12 in all.
@pytest.mark.parametrize(
    "precision,stop_step",
    [("bf16-pure", 3), ("bf16-pure", 6), ("bf16-true", 8)],
    ids=["pure-mid-epoch", "pure-epoch-end", "true-2nd-epoch"],
)
def test_resumed_run_ends_bit_identical_with_the_compensation_state(tmp_path, precision, stop_step):
    reference = make_trainer(precision)
    reference.fit()
    resumed = _stopped_then_resumed(tmp_path, precision, stop_step)
    assert _same(reference, resumed)
    saved = torch.load(tmp_path / "ckpt.pt", weights_only=True)["trainer"]["optimizers"][0]  # plain data
    comps = [s["kahan_comp"] for s in saved["state"].values()]
    assert len(comps) == 4
    if precision == "bf16-pure":
        assert all(c.dtype == torch.bfloat16 for c in comps) and any(bool(c.any()) for c in comps)
        # The decay not yet put into the compensation (mixft.train.kahan_adamw) travels with it.
        factors = [s["decay_factor"] for s in saved["state"].values() if "decay_factor" in s]
        assert len(factors) == 2 and all(0 < f <= 1 for f in factors)  # the two decayed matrices
    else:
        assert all(c is None for c in comps)


def test_without_the_compensation_buffer_the_resumed_run_diverges(tmp_path):
    # Guards the test above: the saved kahan_comp really matters.
    reference = make_trainer()
    reference.fit()

    def zero_compensation(ckpt):
        for opt_state in ckpt["trainer"]["optimizers"]:
            for state in opt_state["state"].values():
                state["kahan_comp"].zero_()

    resumed = _stopped_then_resumed(tmp_path, "bf16-pure", 6, damage=zero_compensation)
    assert not _same(reference, resumed)


# ---------------------------------------------------------------------------------------
# Bad combinations: one line, before any work
# ---------------------------------------------------------------------------------------


def test_a_hand_made_pure_precision_with_a_grad_scaler_is_refused():
    with pytest.raises(UsageError, match="^precision mine: a GradScaler .* needs fp32 master weights") as info:
        Precision("mine", torch.bfloat16, grad_scaler=True, param_dtype=torch.bfloat16)
    assert "\n" not in str(info.value)


def test_an_uncompensated_optimizer_under_bf16_pure_is_refused_naming_bf16_true():
    model = nn.Linear(4, 1)
    with pytest.raises(UsageError) as info:
        Trainer(model, lambda p: torch.optim.AdamW(p, lr=1e-3), nn.MSELoss(), [], precision="bf16-pure")
    text = str(info.value)
    assert "\n" not in text and "torch.optim.AdamW would lose bf16 updates" in text and "bf16-true" in text


def test_scaler_kwargs_under_a_pure_precision_are_refused():
    with pytest.raises(UsageError, match="has no GradScaler"):
        Trainer(
            nn.Linear(4, 1),
            adamw_factory(1e-3, CPU, precision=PRECISIONS["bf16-pure"]),
            nn.MSELoss(),
            [],
            precision="bf16-pure",
            scaler_kwargs={"init_scale": 128.0},
        )


def test_a_gpu_without_bf16_refuses_the_pure_precisions(monkeypatch):
    # A T4: CUDA present, compute capability 7.5, no native bf16.
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: False)
    monkeypatch.setattr(torch.amp, "is_autocast_available", lambda device_type: True)
    for name in ("bf16-pure", "bf16-true"):
        with pytest.raises(UsageError) as info:
            resolve_precision(name, torch.device("cuda"))
        assert str(info.value) == (
            f"precision {name} needs a GPU with native bf16 (Ampere or newer); "
            "use fp16 (with loss scaling) or fp32 here"
        )


def _cli(tiny_bert_dir, tiny_data_dir, out, *flags):
    return main(
        [
            "--recipe",
            "bert-sst2",
            "--model",
            str(tiny_bert_dir),
            "--data-dir",
            str(tiny_data_dir),
            "--output-dir",
            str(out),
            "--no-progress",
            *flags,
        ]
    )


@pytest.mark.parametrize(
    "flags,message",
    [
        (
            ["--precision", "bf16-pure", "--init-loss-scale", "128"],
            "--init-loss-scale: only fp16 uses a loss scale; this command trains bf16-pure",
        ),
        (
            ["--precision", "bf16-pure", "--fp32-modules", "classifier"],
            "--fp32-modules keeps modules in fp32 on fp32 master weights; bf16-pure holds the weights in bf16: drop "
            "--fp32-modules or train bf16-pure in a command of its own",
        ),
        (["--compare", "fp32,bf16-true", "--fp32-modules", "classifier"], "--fp32-modules keeps modules in fp32"),
    ],
)
def test_bad_combinations_exit_2_with_one_line_and_write_nothing(
    tiny_bert_dir, tiny_data_dir, tmp_path, capsys, flags, message
):
    out = tmp_path / "r"
    assert _cli(tiny_bert_dir, tiny_data_dir, out, *flags) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert not out.exists()


def test_bf16_true_warns_once_that_updates_are_lost(caplog):
    _warned.discard(BF16_TRUE_NOTICE)
    with caplog.at_level("WARNING", logger="mixft"):
        make_trainer("bf16-true")
        make_trainer("bf16-true")
    notices = [r.getMessage() for r in caplog.records if "bf16-true" in r.getMessage()]
    assert notices == [BF16_TRUE_NOTICE] and "lost" in notices[0] and "\n" not in notices[0]


def test_bf16_pure_on_a_cpu_without_native_bf16_gets_the_emulation_notice():
    avx2 = {"bf16": False, "fp16": False, "via": "oneDNN", "cpu_capability": "AVX2", "compute_capability": None}
    choice = choose_precision("bf16-pure", "cpu", avx2)
    assert choice.precision == "bf16-pure"
    assert choice.notice == (
        "notice: this CPU has no native bf16 (torch: CPU capability AVX2, oneDNN has no bf16 "
        "here): --precision bf16-pure runs it emulated, as asked; the estimate after the first "
        "steps says how long it takes"
    )
    assert choose_precision("amp", "cpu", avx2).precision == "fp32"  # --amp never means bf16-pure


def test_bf16_pure_runs_emulated_where_the_cpu_has_no_native_bf16(tiny_bert_dir, tiny_data_dir, tmp_path):
    # The real emulation: torch's AVX2 kernels and oneDNN without bf16, in a fresh process.
    env = {
        **os.environ,
        "ATEN_CPU_CAPABILITY": "avx2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "OMP_NUM_THREADS": "1",
        "MIXFT_CACHE": str(tmp_path / "cache"),
    }
    out = tmp_path / "r"
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "finetune.py"),
            "--recipe",
            "bert-sst2",
            "--model",
            str(tiny_bert_dir),
            "--data-dir",
            str(tiny_data_dir),
            "--output-dir",
            str(out),
            "--no-progress",
            "--precision",
            "bf16-pure",
            "--max-steps",
            "2",
            "--batch-size",
            "4",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "this CPU has no native bf16 (torch: CPU capability AVX2" in done.stderr
    (run,) = json.loads((out / "results.json").read_text())["runs"]
    assert (run["precision"], run["param_dtype"], run["steps"]) == ("bf16-pure", "bfloat16", 2)
    assert all(math.isfinite(x) for x in run["history"]["loss"])


# ---------------------------------------------------------------------------------------
# The loop's features and the comparison
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    from tiny_models import make_tiny_model_dir

    root = tmp_path_factory.mktemp("pure-bf16-models")
    return {arch: make_tiny_model_dir(arch, root / arch) for arch in ("bert", "gpt2")}


def _train_tiny(path, lora: bool = False):
    from tiny_models import toy_batch
    from transformers import AutoConfig, AutoTokenizer

    from mixft.models.classifiers import load_classifier, pad_for_classification
    from mixft.models.lora import LoraOptions, apply_lora

    tokenizer = pad_for_classification(AutoTokenizer.from_pretrained(path), AutoConfig.from_pretrained(path))
    model = load_classifier(str(path), seed=0, labels=["bad", "so-so", "good"], tokenizer=tokenizer)
    if lora:
        model = apply_lora(model, LoraOptions())
    batch = toy_batch(tokenizer, "3-class")
    trainer = Trainer(
        model,
        adamw_factory(1e-2, CPU, weight_decay=0.0, precision=PRECISIONS["bf16-pure"]),
        model.loss_fn,
        [batch] * 6,
        precision="bf16-pure",
        device="cpu",
        epochs=1,
        seed=0,
    )
    trainer.fit()
    return trainer


def test_lora_adapters_train_in_bf16_with_state_for_the_trainable_parameters_only(model_dirs):
    trainer = _train_tiny(model_dirs["bert"], lora=True)
    params = list(trainer.module.parameters())
    trainable = [p for p in params if p.requires_grad]
    assert {p.dtype for p in params} == {torch.bfloat16} and 0 < len(trainable) < len(params)
    assert set(trainer.optimizer.state) == set(trainable)
    assert all(s["kahan_comp"].dtype == torch.bfloat16 for s in trainer.optimizer.state.values())
    losses = [float(x) for x in trainer.state.history["loss"]]
    assert all(math.isfinite(x) for x in losses) and losses[-1] < losses[0]


def test_a_decoder_trains_in_bf16_pure_with_its_loss_in_fp32(model_dirs):
    trainer = _train_tiny(model_dirs["gpt2"])
    assert {p.dtype for p in trainer.module.parameters()} == {torch.bfloat16}
    losses = [float(x) for x in trainer.state.history["loss"]]
    assert all(math.isfinite(x) for x in losses) and losses[-1] < losses[0]


def test_compare_fp32_bf16_bf16_pure_reports_memory_held_and_agreement(
    tiny_bert_dir, tiny_data_dir, tmp_path, monkeypatch
):
    monkeypatch.setenv("MIXFT_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "c"
    assert (
        _cli(
            tiny_bert_dir,
            tiny_data_dir,
            out,
            "--compare",
            "fp32,bf16,bf16-pure",
            "--max-steps",
            "2",
            "--batch-size",
            "4",
        )
        == 0
    )
    runs = {r["precision"]: r for r in json.loads((out / "results.json").read_text())["runs"]}
    assert list(runs) == ["fp32", "bf16", "bf16-pure"]
    fp32, amp, pure = runs["fp32"]["memory"], runs["bf16"]["memory"], runs["bf16-pure"]["memory"]
    assert amp["parameters"] == fp32["parameters"] and amp["optimizer_state"] >= 2 * fp32["parameters"]
    assert 2 * pure["parameters"] == fp32["parameters"] and pure["gradients"] == pure["parameters"]
    assert 3 * pure["parameters"] <= pure["optimizer_state"] <= 3 * pure["parameters"] + 64  # + optimi's step counters
    assert runs["bf16-pure"]["agreement_vs_fp32"] is not None and runs["fp32"]["agreement_vs_fp32"] is None
    assert (runs["bf16-pure"]["param_dtype"], runs["bf16"]["param_dtype"]) == ("bfloat16", None)
    report = (out / "report.md").read_text()
    held = sum(pure[k] for k in ("parameters", "gradients", "optimizer_state"))
    base = sum(fp32[k] for k in ("parameters", "gradients", "optimizer_state"))
    assert (
        f"**Held?** bf16-pure holds {held / 2**20:.1f} MiB in parameters, gradients and optimizer state against "
        f"fp32's {base / 2**20:.1f} MiB ({held / base:.2f}x)"
    ) in report
    assert "bf16 holds" not in report  # AMP holds what fp32 holds: no words for it


def test_mlp_recipe_trains_in_bf16_pure_with_a_compensated_sgd(tmp_path, monkeypatch):
    # A tiny MLP through the run layer: at the seed's width (4096, batch 512) an emulated-bf16 CPU
    # (no native bf16) spent over ten minutes on this one test.
    from mixft import run
    from mixft.config.run_config import RunConfig
    from recipes import mlp_synthetic

    monkeypatch.setenv("MIXFT_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "m"
    cfg = RunConfig(
        recipe="mlp-synthetic",
        device="cpu",
        batch_size=16,
        max_steps=3,
        precisions=["bf16-pure"],
        extra={"width": 64, "batches": 4, "eval_batches": 1},
        output_dir=str(out),
    )
    (result,) = run(cfg.with_defaults(mlp_synthetic.DEFAULTS).validate())
    assert result.steps == 3 and result.skipped_steps == 0
    (saved,) = json.loads((out / "results.json").read_text())["runs"]
    assert saved["optimizer"] == "optimi.SGD(kahan_sum=True)" and saved["param_dtype"] == "bfloat16"


def test_init_loss_scale_goes_to_fp16_only_when_a_compare_also_trains_bf16_pure(
    tiny_bert_dir, tiny_data_dir, tmp_path, monkeypatch
):
    monkeypatch.setenv("MIXFT_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "c"
    assert (
        _cli(
            tiny_bert_dir,
            tiny_data_dir,
            out,
            "--compare",
            "fp16,bf16-pure",
            "--init-loss-scale",
            "128",
            "--no-preflight",
            "--max-steps",
            "1",
            "--batch-size",
            "4",
        )
        == 0
    )
    runs = {r["precision"]: r for r in json.loads((out / "results.json").read_text())["runs"]}
    assert runs["fp16"]["history"]["loss_scale"][0] == 128.0 and runs["bf16-pure"]["final_loss_scale"] is None


def _encoder_weight_norm(model_dir: Path) -> float:
    """The norm of a saved encoder's layer matrices (AdamW decays them; biases and LayerNorms it does not)."""
    from safetensors.torch import load_file

    tensors = load_file(str(next(model_dir.glob("*.safetensors"))))
    return math.sqrt(
        sum(float(t.float().pow(2).sum()) for name, t in tensors.items() if t.dim() == 2 and ".layer." in name)
    )


def test_weight_decay_shrinks_bf16_pure_weights_as_it_shrinks_fp32s_through_the_cli(
    tiny_bert_dir, tiny_data_dir, tmp_path
):
    # Gradients clipped to ~0, so Adam's update is ~0 (m / (sqrt(v) + eps) with v ~ 1e-64) and decay alone acts:
    # each constant-lr step multiplies every decayed matrix by 1 - lr * wd = 0.999, below half a bf16 spacing
    # (0.2-0.4 % of a weight), so optimi's own decay rounded back to the same bf16 weight every step (ratio
    # exactly 1); through the compensation the 16 steps' 1.6 % reach the weights as they reach fp32's.
    flags = ("--lr", "1e-3", "--lr-scheduler", "constant", "--max-grad-norm", "1e-30", "--epochs", "1")
    flags += ("--batch-size", "1", "--save-model")  # 16 rows: 16 steps
    norms = {}
    for precision in ("bf16-pure", "fp32"):
        for wd in ("1", "0"):
            out = tmp_path / f"{precision}-{wd}"
            assert _cli(tiny_bert_dir, tiny_data_dir, out, "--precision", precision, "--weight-decay", wd, *flags) == 0
            norms[precision, wd] = _encoder_weight_norm(out / "model")
    fp32 = norms["fp32", "1"] / norms["fp32", "0"]
    pure = norms["bf16-pure", "1"] / norms["bf16-pure", "0"]
    assert fp32 == pytest.approx(0.999**16, abs=1e-4)  # the reference: 16 steps of decay alone
    # A bf16 weight lags the decay not yet taken by at most half its spacing (<= 2^-8 = 0.4 %): no more.
    assert pure == pytest.approx(fp32, abs=4e-3), (pure, fp32)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_scaler_kwargs_without_a_grad_scaler_are_refused_but_amp_may_become_fp16(precision):
    # Was: fp32 and bf16 took scaler_kwargs and ignored them (only the pure precisions refused them).
    with pytest.raises(UsageError, match=f"precision {precision} has no GradScaler"):
        Trainer(
            nn.Linear(4, 1),
            lambda p: torch.optim.SGD(p, lr=0.1),
            nn.MSELoss(),
            [],
            precision=precision,
            scaler_kwargs={"init_scale": 128.0},
        )
    Trainer(
        nn.Linear(4, 1),
        lambda p: torch.optim.SGD(p, lr=0.1),
        nn.MSELoss(),
        [],
        precision="amp",
        scaler_kwargs={"init_scale": 128.0},
    )  # the scale is for the fp16 "amp" may choose elsewhere


@pytest.mark.parametrize("scale", [0.0, -4.0, float("nan"), float("inf")])
def test_a_scaler_that_cannot_scale_is_refused(scale):
    # Was: init_scale 0 (or -4) accepted under fp16: every step skipped, the scale stuck, the run "finished".
    with pytest.raises(UsageError, match="scaler_kwargs init_scale must be a positive finite number"):
        Trainer(
            nn.Linear(4, 1),
            lambda p: torch.optim.SGD(p, lr=0.1),
            nn.MSELoss(),
            [],
            precision="fp16",
            scaler_kwargs={"init_scale": scale},
        )
