"""Checkpoints: a stopped run continued from its checkpoint ends bit-identical; bad files are refused.

Unit tests use a small MLP with dropout and a shuffling DataLoader (both draw from the
global torch RNG, so a resume that forgot the RNG would diverge). The kill tests run the
real CLI in a subprocess on a tiny BERT and SIGKILL it at random moments.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import torch
from conftest import without_timings
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from mixft.callbacks.checkpointer import Checkpointer
from mixft.cli.main import main
from mixft.rng import capture_rng_state, restore_rng_state
from mixft.train.checkpoint import CheckpointError, load_checkpoint, resume, save_checkpoint
from mixft.train.hooks import Callback, StopTraining
from mixft.train.trainer import Trainer

REPO = Path(__file__).resolve().parents[2]

_g = torch.Generator().manual_seed(1)
X = torch.randn(48, 8, generator=_g)
Y = torch.randn(48, 1, generator=_g)


def make_trainer(precision="fp32", callbacks=(), epochs=2, grad_accum=2, workers=0):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 1))
    loader = dict(num_workers=workers, persistent_workers=workers > 0)
    train = DataLoader(TensorDataset(X, Y), batch_size=4, shuffle=True, **loader)  # RandomSampler: global RNG
    return Trainer(
        model,
        lambda p: torch.optim.AdamW(p, lr=1e-2),
        nn.MSELoss(),
        train,
        eval_loader=DataLoader(TensorDataset(X, Y), batch_size=16, **loader),
        precision=precision,
        epochs=epochs,
        grad_accum=grad_accum,
        seed=0,
        callbacks=list(callbacks),
        lr_scheduler=lambda opt, n: torch.optim.lr_scheduler.LinearLR(opt, 1.0, 0.1, n),
    )


class StopAt(Callback):
    def __init__(self, step):
        self.step = step

    def on_step_end(self, trainer, info):
        if info.step == self.step:
            raise StopTraining("test stop")


def weights(trainer):
    return [p.detach().clone() for p in trainer.model.parameters()]


def stopped_then_resumed(tmp_path, precision, stop_step):
    path = tmp_path / "ckpt.pt"
    first = make_trainer(precision, [Checkpointer(path, every=1), StopAt(stop_step)])
    assert first.fit().stopped_early == "test stop"
    second = make_trainer(precision, [Checkpointer(path, every=1)])
    resume(second, path)
    return second, second.fit()


# 12 batches per epoch, 2 per window: 6 steps per epoch, 12 in all.
@pytest.mark.parametrize(
    "precision,stop_step",
    [
        ("fp32", 3),
        ("fp32", 6),
        ("fp32", 8),
        ("bf16", 3),
        ("bf16", 6),
        ("fp16", 8),
    ],
    ids=["fp32-mid-epoch", "fp32-epoch-end", "fp32-2nd-epoch", "bf16-mid-epoch", "bf16-epoch-end", "fp16-2nd-epoch"],
)
def test_resumed_run_ends_bit_identical(tmp_path, precision, stop_step):
    reference = make_trainer(precision)
    ref = reference.fit()
    resumed, res = stopped_then_resumed(tmp_path, precision, stop_step)
    for a, b in zip(weights(reference), weights(resumed)):
        assert torch.equal(a, b)
    assert res.history == ref.history
    assert without_timings(res.eval_history) == without_timings(ref.eval_history)
    assert (res.steps, res.skipped_steps, res.final_loss_scale) == (ref.steps, ref.skipped_steps, ref.final_loss_scale)
    assert resumed.lr_schedulers[0].last_epoch == reference.lr_schedulers[0].last_epoch == ref.steps - ref.skipped_steps
    for a, b in zip(reference.optimizer.state.values(), resumed.optimizer.state.values()):
        assert torch.equal(a["exp_avg"], b["exp_avg"])


class StopAtEpochEnd(Callback):
    def on_epoch_end(self, trainer, metrics):
        raise StopTraining("test stop")  # after the Checkpointer's epoch-end save


@pytest.mark.parametrize("stop", ["epoch-end", "mid-2nd-epoch"])
def test_resumed_run_with_persistent_workers_ends_bit_identical(tmp_path, stop):
    # A persistent-worker loader draws from the global RNG at its first iter() only:
    # resume() starts the loaders the stopped process had started, without that draw.
    reference = make_trainer(epochs=3, workers=2)
    ref = reference.fit()
    path = tmp_path / "ckpt.pt"
    stopper = StopAtEpochEnd() if stop == "epoch-end" else StopAt(8)  # both after the first evaluation
    make_trainer(callbacks=[Checkpointer(path, every=1), stopper], epochs=3, workers=2).fit()
    resumed = make_trainer(callbacks=[Checkpointer(path, every=1)], epochs=3, workers=2)
    resume(resumed, path)
    res = resumed.fit()
    assert all(torch.equal(a, b) for a, b in zip(weights(reference), weights(resumed)))
    assert res.history == ref.history


def test_without_the_rng_states_the_resumed_run_diverges(tmp_path):
    # Guards the test above: dropout and shuffling really depend on the restored RNGs.
    reference = make_trainer()
    reference.fit()
    path = tmp_path / "ckpt.pt"
    make_trainer(callbacks=[Checkpointer(path, every=1), StopAt(2)]).fit()
    ckpt = load_checkpoint(path)
    del ckpt["trainer"]["rng"]
    second = make_trainer()
    second.load_state_dict(ckpt["trainer"])
    second.fit()
    assert any(not torch.equal(a, b) for a, b in zip(weights(reference), weights(second)))


def test_checkpoint_holds_plain_state_and_loads_weights_only(tmp_path):
    path = tmp_path / "ckpt.pt"
    trainer = make_trainer(callbacks=[Checkpointer(path, every=2, meta={"recipe": "mlp"})], epochs=1)
    trainer.fit()
    ckpt = torch.load(path, weights_only=True)  # no pickled code: plain data and tensors
    loop = ckpt["trainer"]["loop"]
    assert ckpt["meta"]["recipe"] == "mlp" and ckpt["meta"]["precision"] == "fp32"
    assert (loop["step"], loop["epoch"], loop["batch_in_epoch"]) == (6, 1, 0)  # epoch-end save
    assert all(type(v) is float for v in loop["history"]["loss"] + loop["history"]["grad_norm"])
    assert loop["train_time_s"] > 0 and loop["samples"] == 48
    assert loop["eval_history"][0]["epoch"] == 1
    assert {"python", "torch"} <= set(ckpt["trainer"]["rng"]["now"])
    assert not list(tmp_path.glob(".*.tmp"))  # atomic write left no temporary behind


def test_rng_state_round_trip():
    import numpy as np

    state = capture_rng_state()
    a = (random.random(), np.random.rand(), torch.rand(1))
    restore_rng_state(state)
    assert (random.random(), np.random.rand(), torch.rand(1)) == a


@pytest.mark.parametrize("damage", ["flip-a-weight-byte", "truncate", "empty", "not-a-zip", "other-torch-file"])
def test_damaged_checkpoint_is_refused_with_one_line(tmp_path, damage):
    path = tmp_path / "ckpt.pt"
    save_checkpoint(make_trainer(epochs=1), path)
    data = bytearray(path.read_bytes())
    if damage == "flip-a-weight-byte":  # torch.load alone would not notice this one
        with zipfile.ZipFile(path) as z:
            info = max((i for i in z.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
        off = info.header_offset  # local header: 30 bytes, then name and extra field, then data
        start = (
            off
            + 30
            + int.from_bytes(data[off + 26 : off + 28], "little")
            + int.from_bytes(data[off + 28 : off + 30], "little")
        )
        data[start + 5] ^= 0xFF
        path.write_bytes(bytes(data))
        torch.load(path, weights_only=True)  # loads "fine"...
    elif damage == "truncate":
        path.write_bytes(bytes(data[: len(data) // 2]))
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "not-a-zip":
        path.write_bytes(b"garbage" * 100)
    else:
        torch.save({"weights": torch.ones(3)}, path)
    with pytest.raises(CheckpointError) as e:
        resume(make_trainer(), path)  # ...but a resume refuses it
    assert "\n" not in str(e.value) and str(path) in str(e.value)


def test_missing_checkpoint_and_precision_mismatch_are_refused(tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoint"):
        load_checkpoint(tmp_path / "nope.pt")
    path = tmp_path / "ckpt.pt"
    save_checkpoint(make_trainer("fp32", epochs=1), path, meta={"lr": 0.1})
    with pytest.raises(CheckpointError, match=r"--precision 'fp32', this run has 'bf16'"):
        resume(make_trainer("bf16"), path)
    assert resume(make_trainer(), path)["step"] == 0  # same precision: accepted
    # (Other options are the run layer's to compare: tests/test_run_identity.py.)


@pytest.mark.parametrize("every", [-1, True, 1.5, "20"])
def test_checkpointer_refuses_a_bad_interval_with_the_options_rule(tmp_path, every):
    with pytest.raises(ValueError, match=rf"^every must be an integer >= 0, got {every!r}$"):
        Checkpointer(tmp_path / "ckpt.pt", every=every)


def test_checkpointer_keeps_the_last_good_checkpoint_once_the_loss_is_nan(tmp_path):
    calls = {"n": 0}

    def loss_fn(out, y):  # from the 5th micro-batch on, the loss is NaN (so are the gradients)
        calls["n"] += 1
        loss = nn.functional.mse_loss(out, y)
        return loss * float("nan") if calls["n"] >= 5 else loss

    path = tmp_path / "ckpt.pt"
    ckpt = Checkpointer(path, every=1)
    trainer = make_trainer(callbacks=[ckpt], epochs=1, grad_accum=1)
    trainer.loss_fn = loss_fn
    result = trainer.fit()  # 12 steps; 5..12 skipped, their losses NaN
    assert result.skipped_steps == 8
    assert ckpt.saved_step == 4 and load_checkpoint(path)["meta"]["step"] == 4


def test_a_skipped_step_with_a_finite_loss_is_still_saved(tmp_path):
    class InjectAt(Callback):
        def on_before_optimizer_step(self, trainer):
            if trainer.state.step + 1 == 12:  # the last step of the epoch
                next(p for p in trainer.params if p.grad is not None).grad.view(-1)[0] = float("inf")

    path = tmp_path / "ckpt.pt"
    result = make_trainer(callbacks=[InjectAt(), Checkpointer(path, every=0)], epochs=1, grad_accum=1).fit()
    assert result.history["skipped"][-1]
    assert load_checkpoint(path)["meta"]["step"] == 12  # the final state, for a later --resume


def test_stale_temporary_from_a_killed_write_is_removed(tmp_path):
    path = tmp_path / "ckpt.pt"
    stale = tmp_path / ".ckpt.pt.abc123.tmp"
    stale.write_bytes(b"half a checkpoint")
    make_trainer(callbacks=[Checkpointer(path, every=0)], epochs=1).fit()
    assert path.exists() and not stale.exists()


# ----------------------------------------------------------------------- kill tests
# Starting Python with torch + transformers costs seconds per process on this 2-core
# machine, so the killed runs are forked from one warm process ("zygote") that has done
# the imports but no computation (no thread pools to break across fork). Each fork runs
# the CLI entry point, mixft.cli.main.main(argv), as scripts/finetune.py does, and gets
# SIGKILLed. (tests/test_interrupt.py runs scripts/finetune.py itself in a subprocess.)
ZYGOTE = r"""
import json, os, sys
import mixft.cli.main, mixft.runs.runner, recipes.bert_sst2, transformers, datasets, evaluate  # warm imports only
from transformers import AutoModel, AutoTokenizer, DataCollatorWithPadding
for line in sys.stdin:
    argv = json.loads(line)
    pid = os.fork()
    if pid == 0:
        log = os.open(argv.pop(), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        os.dup2(log, 1); os.dup2(log, 2)
        os._exit(mixft.cli.main.main(argv))
    print(pid, flush=True)
    print(json.dumps(os.waitpid(pid, 0)[1]), flush=True)
"""


def _cli_args(model_dir, data_dir, out):
    return [
        "--recipe",
        "bert-sst2",
        "--model",
        str(model_dir),
        "--data-dir",
        str(data_dir),
        "--max-train-samples",
        "48",
        "--max-eval-samples",
        "8",
        "--batch-size",
        "4",
        "--epochs",
        "2",
        "--checkpoint-every",
        "1",
        "--output-dir",
        str(out),
        "--no-progress",
    ]


@pytest.fixture
def kill_data_dir(tmp_path):
    from conftest import make_data_dir

    return make_data_dir(tmp_path / "sst2", 48, 8)


def _step(path: Path) -> int:
    try:
        return int(torch.load(path, weights_only=True, map_location="cpu")["meta"]["step"])
    except Exception:  # absent, or replaced under our feet: read it next time
        return 0


def _wait_for_step(path: Path, target: int, timeout: float = 120.0) -> float:
    """Wait until the checkpoint at ``path`` reaches ``target``; returns the last step's duration."""

    def stamp():
        try:
            st = path.stat()
            return st.st_ino, st.st_mtime_ns  # each save is a new file (atomic rename)
        except FileNotFoundError:
            return None

    deadline, seen, step = time.monotonic() + timeout, stamp(), _step(path)
    saves: list[float] = []  # when this process's saves appeared
    while step < target and time.monotonic() < deadline:
        time.sleep(0.005)
        now = stamp()
        if now != seen:
            seen, step = now, _step(path)
            saves.append(time.monotonic())
    return saves[-1] - saves[-2] if len(saves) >= 2 else 0.1


def test_sigkill_at_random_moments_then_resume_matches_an_uninterrupted_run(tmp_path, tiny_bert_dir, kill_data_dir):
    """3 SIGKILLs at random moments (the first run, then each --resume), then a last --resume.

    After every kill: results.json (if any) parses; checkpoint.pt passes its CRC check and
    loads with torch.load. At the end: the same weights and the same results.json
    figures (times aside) as a run that was never killed.
    """
    ref_out, out = tmp_path / "ref", tmp_path / "killed"
    zygote = subprocess.Popen(
        [sys.executable, "-c", ZYGOTE],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    steps_at_kill = []
    try:
        # The uninterrupted reference, in this process while the zygote imports.
        assert main(_cli_args(tiny_bert_dir, kill_data_dir, ref_out)) == 0
        reference = json.loads((ref_out / "results.json").read_text())["runs"][0]
        total = reference["steps"]
        assert total == 24  # 12 steps per epoch
        rng = random.Random(1234)
        ckpt = out / "checkpoint.pt"
        log = tmp_path / "killed.log"
        for kill, target in enumerate([3, 10, 15]):  # one near the first epoch's end (12), one in the second
            args = _cli_args(tiny_bert_dir, kill_data_dir, out) + (["--resume"] if kill else [])
            before = _step(ckpt)
            zygote.stdin.write(json.dumps([*args, str(log)]) + "\n")
            zygote.stdin.flush()
            pid = int(zygote.stdout.readline())
            # Let the run get to its target step, then kill it at a random moment of the
            # next one: mid-forward, mid-backward, mid-checkpoint-write, mid-evaluation.
            per_step = _wait_for_step(ckpt, max(target, before + 1))
            time.sleep(rng.uniform(0.0, min(per_step, 0.5)))
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass  # it ended by itself: the status check below says how
            status = int(zygote.stdout.readline())
            assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, log.read_text()[-3000:]
            if (out / "results.json").exists():
                json.loads((out / "results.json").read_text())
            with zipfile.ZipFile(ckpt) as z:
                assert z.testzip() is None
            step = int(torch.load(ckpt, weights_only=True)["meta"]["step"])
            assert before < step < total
            steps_at_kill.append(step)
    finally:
        zygote.stdin.close()
        zygote.wait(timeout=60)

    assert main(_cli_args(tiny_bert_dir, kill_data_dir, out) + ["--resume"]) == 0
    resumed = json.loads((out / "results.json").read_text())["runs"][0]
    assert without_timings(resumed) == without_timings(reference)
    ref_w = torch.load(ref_out / "checkpoint.pt", weights_only=True)["trainer"]["model"]
    new_w = torch.load(ckpt, weights_only=True)["trainer"]["model"]
    assert ref_w.keys() == new_w.keys() and all(torch.equal(ref_w[k], new_w[k]) for k in ref_w)
    print("checkpoint step after each kill:", steps_at_kill)
