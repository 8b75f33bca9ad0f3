"""SIGINT / SIGTERM: stop at the next step boundary, save, mark the results, exit 130 / 143."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import without_timings
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import mixft.cli.console
from mixft.callbacks.checkpointer import Checkpointer
from mixft.callbacks.interrupt import Interrupted, SignalHandler, StopOnSignal, is_interrupted
from mixft.cli.main import main
from mixft.train.checkpoint import load_checkpoint, resume
from mixft.train.hooks import Callback
from mixft.train.trainer import Trainer

REPO = Path(__file__).resolve().parents[2]

_g = torch.Generator().manual_seed(1)
X = torch.randn(32, 8, generator=_g)
Y = torch.randn(32, 1, generator=_g)


def make_trainer(callbacks=(), grad_accum=1):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 1))
    return Trainer(
        model,
        lambda p: torch.optim.SGD(p, lr=0.05),
        nn.MSELoss(),
        DataLoader(TensorDataset(X, Y), batch_size=4, shuffle=True),
        epochs=2,
        grad_accum=grad_accum,
        seed=0,
        callbacks=list(callbacks),
    )


class RaiseAt(Callback):
    """Sends this process ``signals`` at the end of optimizer step ``step``."""

    def __init__(self, step, *signals):
        self.step, self.signals = step, signals
        self.steps_after_signal = 0

    def on_step_end(self, trainer, info):
        if info.step == self.step:
            for sig in self.signals:
                signal.raise_signal(sig)
        elif info.step > self.step:
            self.steps_after_signal += 1


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_first_signal_stops_at_the_step_end_with_a_checkpoint(tmp_path, sig, code):
    path = tmp_path / "ckpt.pt"
    # What the process had before (a shell's background job starts with SIGINT ignored).
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with SignalHandler() as handler:
        raiser = RaiseAt(3, sig)
        trainer = make_trainer([raiser, StopOnSignal(handler), Checkpointer(path, every=0)])
        result = trainer.fit()
    assert result.stopped_early == f"interrupted ({signal.Signals(sig).name})"
    assert result.stop_kind == "interrupt" and is_interrupted(result) and is_interrupted(result.to_dict())
    assert result.steps == 3 and raiser.steps_after_signal == 0
    assert handler.exit_code == code
    assert load_checkpoint(path)["meta"]["step"] == 3  # saved although every=0: the stop forces it
    assert {s: signal.getsignal(s) for s in before} == before  # handlers restored


def test_signal_mid_window_finishes_the_window_then_resumes_identically(tmp_path):
    path = tmp_path / "ckpt.pt"
    reference = make_trainer(grad_accum=2)
    reference.fit()

    micro = {"n": 0}

    def count(module, args):
        micro["n"] += 1
        if micro["n"] == 3:  # first micro-batch of the second window
            signal.raise_signal(signal.SIGINT)

    with SignalHandler() as handler:
        trainer = make_trainer([StopOnSignal(handler), Checkpointer(path, every=0)], grad_accum=2)
        hook = trainer.model.register_forward_pre_hook(count)
        result = trainer.fit()
        hook.remove()
    assert result.steps == 2 and trainer.state.batch_in_epoch == 4  # the window was completed
    resumed = make_trainer(grad_accum=2)
    resume(resumed, path)
    resumed.fit()
    assert all(torch.equal(a, b) for a, b in zip(reference.model.parameters(), resumed.model.parameters()))


def test_second_signal_raises_at_once():
    with SignalHandler() as handler:
        raiser = RaiseAt(2, signal.SIGINT, signal.SIGINT)
        with pytest.raises(Interrupted) as e:
            make_trainer([raiser, StopOnSignal(handler)]).fit()
    assert e.value.exit_code == 130 and raiser.steps_after_signal == 0


def test_a_signal_adopted_from_another_process_keeps_this_processs_own_first_signal_graceful():
    # Under torchrun the processes agree on a signal one of them saw; the launcher's copy of it can
    # reach this process later, during the checkpoint save: that is its first signal, not a second.
    with SignalHandler() as handler:
        handler.armed = True
        handler.adopt(signal.SIGTERM)
        assert (handler.signal_name, handler.exit_code) == ("SIGTERM", 143)
        signal.raise_signal(signal.SIGTERM)  # no Interrupted: the stop already under way goes on
        assert handler.signum == signal.SIGTERM
        with pytest.raises(Interrupted):
            signal.raise_signal(signal.SIGTERM)  # a second one here: leave at once


def test_signal_outside_training_raises_at_once_and_library_installs_no_handler():
    make_trainer().fit()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the Trainer left signals alone
    with SignalHandler():
        with pytest.raises(Interrupted) as e:
            signal.raise_signal(signal.SIGTERM)  # not armed: nothing to stop gracefully
    assert e.value.exit_code == 143
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


# ----------------------------------------------------------------------------- CLI
def _args(model_dir, data_dir, out, *extra, epochs="2"):
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
        "4",
        "--epochs",
        epochs,
        "--checkpoint-every",
        "1",
        "--output-dir",
        str(out),
        "--no-progress",
        *extra,
    ]


def test_cli_compare_interrupted_then_resumed_matches_uninterrupted(
    tmp_path, tiny_bert_dir, tiny_data_dir, monkeypatch, capsys
):
    ref_out, out = tmp_path / "ref", tmp_path / "out"
    compare = ("--compare", "fp32,bf16", "--checkpoint-every", "0")  # 4 steps each; saves at the end
    assert main(_args(tiny_bert_dir, tiny_data_dir, ref_out, *compare, epochs="1")) == 0

    original = mixft.cli.console.ProgressBar.on_step_end

    def ctrl_c_in_bf16_step_2(self, trainer, info):
        original(self, trainer, info)
        if trainer.precision.name == "bf16" and info.step == 2:
            signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(mixft.cli.console.ProgressBar, "on_step_end", ctrl_c_in_bf16_step_2)
    capsys.readouterr()
    assert main(_args(tiny_bert_dir, tiny_data_dir, out, *compare, epochs="1")) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert "checkpoint-bf16-seed0.pt" in err[-1] and "rerun the same command with --resume" in err[-1]
    runs = json.loads((out / "results.json").read_text())["runs"]
    assert [(r["precision"], r["stopped_early"], r["stop_kind"], r["steps"]) for r in runs] == [
        ("fp32", None, None, 4),
        ("bf16", "interrupted (SIGINT)", "interrupt", 2),
    ]
    assert load_checkpoint(out / "checkpoint-bf16-seed0.pt")["meta"]["step"] == 2
    assert not (out / "report.md").exists()  # no comparison report from half a comparison

    monkeypatch.setattr(mixft.cli.console.ProgressBar, "on_step_end", original)
    assert main(_args(tiny_bert_dir, tiny_data_dir, out, *compare, "--resume", epochs="1")) == 0
    reference = json.loads((ref_out / "results.json").read_text())["runs"]
    resumed = json.loads((out / "results.json").read_text())["runs"]
    assert resumed[0] == runs[0]  # the finished fp32 run was kept, not retrained
    assert without_timings(resumed) == without_timings(reference)
    assert (out / "report.md").exists()


def test_sigterm_to_the_real_script(tmp_path, tiny_bert_dir, tiny_data_dir):
    out = tmp_path / "out"
    cmd = [sys.executable, str(REPO / "scripts" / "finetune.py"), *_args(tiny_bert_dir, tiny_data_dir, out)]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)}
    )
    deadline = time.monotonic() + 120
    while not (out / "checkpoint.pt").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)  # training has started once the first checkpoint is there
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 143, stderr
    assert stderr.strip().splitlines()[-1].endswith("rerun the same command with --resume to continue")
    run = json.loads((out / "results.json").read_text())["runs"][0]
    assert run["stopped_early"] == "interrupted (SIGTERM)" and 1 <= run["steps"] < 8
    assert load_checkpoint(out / "checkpoint.pt")["meta"]["step"] == run["steps"]
