"""Injected inf/NaN gradients are skipped and counted; a collapsing run is stopped with a diagnosis."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from mixft.callbacks.checkpointer import Checkpointer
from mixft.callbacks.faults import COLLAPSE, CollapseDetector, InjectNonFinite, is_collapse
from mixft.cli.main import main
from mixft.train.checkpoint import load_checkpoint
from mixft.train.hooks import Callback
from mixft.train.trainer import Trainer

_g = torch.Generator().manual_seed(2)
X = torch.randn(64, 8, generator=_g)
Y = torch.randn(64, 1, generator=_g)


def make_trainer(precision="fp32", callbacks=(), loss_fn=None):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    return Trainer(
        model,
        lambda p: torch.optim.SGD(p, lr=0.05),
        loss_fn or nn.MSELoss(),
        DataLoader(TensorDataset(X, Y), batch_size=2),  # 32 steps
        precision=precision,
        seed=0,
        callbacks=list(callbacks),
        lr_scheduler=lambda opt, n: torch.optim.lr_scheduler.LinearLR(opt, 1.0, 0.0, n),
    )


def test_injection_is_deterministic_per_seed_and_close_to_its_rate():
    a, b, c = InjectNonFinite(0.1, seed=0), InjectNonFinite(0.1, seed=0), InjectNonFinite(0.1, seed=1)
    hits = [s for s in range(1, 5001) if a.fires(s)]
    assert hits == [s for s in range(1, 5001) if b.fires(s)]
    assert hits != [s for s in range(1, 5001) if c.fires(s)]
    assert 400 < len(hits) < 600  # 10% of 5000, within ~4.5 standard deviations
    assert not any(InjectNonFinite(0.0).fires(s) for s in range(1, 200))
    assert all(InjectNonFinite(1.0).fires(s) for s in range(1, 200))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"rate": 1.5},
        {"rate": -0.1},
        {"rate": float("nan")},
        {"rate": 0.1, "value": 3.0},
        {"rate": 0.1, "value": "zero"},
    ],
)
def test_bad_injection_options_are_refused(kwargs):
    with pytest.raises(ValueError):
        InjectNonFinite(**kwargs)


@pytest.mark.parametrize("precision,value", [("fp32", "inf"), ("bf16", "nan"), ("fp16", "inf"), ("fp16", "nan")])
def test_injected_steps_are_skipped_counted_and_do_not_step_the_schedule(precision, value):
    inject = InjectNonFinite(0.25, seed=3, value=value)
    trainer = make_trainer(precision, [inject])
    result = trainer.fit()
    assert inject.injected_steps and result.steps == 32
    skipped = [s for s, k in zip(result.history["step"], result.history["skipped"]) if k]
    if precision == "fp16":  # the scaler may also skip steps of its own while it calibrates
        assert set(inject.injected_steps) <= set(skipped)
        assert result.final_loss_scale < 65536.0
    else:
        assert skipped == inject.injected_steps
    assert result.skipped_steps == len(skipped)
    assert trainer.lr_schedulers[0].last_epoch == 32 - len(skipped)  # a skipped step keeps its LR
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())
    lrs = result.history["lr"]
    for step in skipped:  # the step after a skipped one uses the same learning rate
        if step < 32:
            assert lrs[step] == lrs[step - 1]


def test_consecutive_skips_stop_the_run_with_a_diagnosis():
    detector = CollapseDetector(max_consecutive_skips=3)
    result = make_trainer("fp32", [InjectNonFinite(1.0), detector]).fit()
    assert result.steps == 3 and is_collapse(result) and result.stop_kind == "collapse"
    assert "3 optimizer steps in a row were skipped" in result.stopped_early
    assert "diagnosis: forward pass finite" in result.stopped_early
    assert "fault injection is on" in result.stopped_early
    assert detector.diagnosis is not None and detector.diagnosis.first_nonfinite is None


def test_loss_scale_floor_stops_an_fp16_run():
    # Every step skipped: the scale halves each time, 65536 -> 32768 -> 16384 -> 8192.
    detector = CollapseDetector(min_loss_scale=10_000, max_consecutive_skips=100, diagnose=False)
    result = make_trainer("fp16", [InjectNonFinite(1.0), detector]).fit()
    assert result.steps == 3 and result.final_loss_scale == 8192.0
    assert result.stopped_early == f"{COLLAPSE}: the loss scale fell to 8192, below the floor 10000"


def test_nonfinite_loss_is_checked_every_few_steps_not_every_step():
    def loss_fn(out, y):
        loss = nn.functional.mse_loss(out, y)
        return loss * float("nan") if loss_fn.calls == 5 else loss

    class Count(Callback):
        def on_step_end(self, trainer, info):
            loss_fn.calls += 1

    loss_fn.calls = 0
    detector = CollapseDetector(max_consecutive_skips=100, check_every=4, diagnose=False)
    result = make_trainer("fp32", [Count(), detector], loss_fn=loss_fn).fit()
    # The NaN loss of step 6 is seen at the next check, step 8.
    assert result.steps == 8
    assert result.stopped_early == f"{COLLAPSE}: the loss is nan at step 6"


def test_last_checkpoint_before_the_collapse_is_kept(tmp_path):
    def loss_fn(out, y):  # the loss turns NaN from step 5 on: a collapse
        return nn.functional.mse_loss(out, y) * (float("nan") if loss_fn.step >= 5 else 1.0)

    class Step(Callback):
        def on_step_end(self, trainer, info):
            loss_fn.step = info.step + 1

    loss_fn.step = 1
    path = tmp_path / "ckpt.pt"
    detector = CollapseDetector(max_consecutive_skips=3, check_every=100, diagnose=False)
    result = make_trainer("bf16", [Step(), detector, Checkpointer(path, every=2)], loss_fn=loss_fn).fit()
    assert result.steps == 7 and is_collapse(result)  # steps 5, 6, 7 skipped
    assert load_checkpoint(path)["meta"]["step"] == 4  # step 6's save was refused: its loss was NaN


# ----------------------------------------------------------------------------- CLI
def _args(model_dir, data_dir, out, *extra):
    return [
        "--recipe",
        "bert-sst2",
        "--model",
        str(model_dir),
        "--data-dir",
        str(data_dir),
        "--max-train-samples",
        "16",
        "--max-eval-samples",
        "8",
        "--batch-size",
        "2",
        "--epochs",
        "1",
        "--output-dir",
        str(out),
        "--no-progress",
        *extra,
    ]


def test_cli_injection_run_counts_its_skipped_steps(tmp_path, tiny_bert_dir, tiny_data_dir):
    out = tmp_path / "out"
    assert main(_args(tiny_bert_dir, tiny_data_dir, out, "--precision", "bf16", "--inject-nonfinite", "0.4")) == 0
    run = json.loads((out / "results.json").read_text())["runs"][0]
    expected = [s for s in range(1, 9) if InjectNonFinite(0.4, seed=0).fires(s)]
    assert expected and run["skipped_steps"] == len(expected)
    assert [s for s, k in zip(run["history"]["step"], run["history"]["skipped"]) if k] == expected
    assert run["config"]["inject_nonfinite"] == 0.4 and run["stopped_early"] is None and run["stop_kind"] is None


def test_cli_collapse_exits_3_with_the_diagnosis_and_keeps_results(tmp_path, tiny_bert_dir, tiny_data_dir, capsys):
    out = tmp_path / "out"
    code = main(_args(tiny_bert_dir, tiny_data_dir, out, "--inject-nonfinite", "1", "--max-consecutive-skips", "2"))
    err = capsys.readouterr().err
    assert code == 3
    assert "training collapsed: 2 optimizer steps in a row were skipped" in err and "diagnosis:" in err
    run = json.loads((out / "results.json").read_text())["runs"][0]
    assert run["steps"] == 2 and "suggested fix" in run["stopped_early"]
    assert run["stop_kind"] == "collapse" and is_collapse(run)  # the field, not the message, says so
    assert not (out / "checkpoint.pt").exists()  # stopped at step 2, before any save point (20, epoch end)


def test_a_loss_the_scale_made_inf_on_a_skipped_step_is_not_a_collapse():
    """Was: under fp16 a gradient penalty (computed from the scaled gradients) is inf on the steps whose scale
    overflows; GradScaler skipped them, as without the penalty, but the detector read their inf loss at the next
    check and stopped a healthy run as "training collapsed: the loss is inf at step 1"."""
    from mixft.amp.penalties import gradient_penalty
    from mixft.train.trainer import Trainer

    torch.manual_seed(0)
    loader = [(torch.randn(64, 8), torch.randn(64, 1)) for _ in range(4)]

    def fit(hook):
        torch.manual_seed(1)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
        with torch.no_grad():
            model[0].weight.mul_(4.0)  # gradients of a few units: x65536 overflows fp16, x16384 fits
        detector = CollapseDetector()
        trainer = Trainer(
            model,
            lambda p: torch.optim.SGD(p, lr=1e-3),
            nn.MSELoss(),
            loader,
            precision="fp16",
            epochs=3,
            seed=0,
            loss_hook=hook,
            callbacks=[detector],
        )
        return trainer.fit(), trainer.state.history

    plain, plain_history = fit(None)
    result, history = fit(lambda t, loss, out, x: gradient_penalty(t, loss, weight=0.01))
    skipped = [step for step, s in zip(history["step"], history["skipped"]) if s]
    assert skipped and any(plain_history["skipped"])  # the scale calibrates either way
    assert not all(math.isfinite(float(v)) for v in history["loss"])  # the skipped steps' penalised losses
    assert result.stopped_early is None and plain.stopped_early is None and result.steps == 12
