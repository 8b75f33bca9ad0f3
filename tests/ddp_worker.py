"""Worker for tests/test_distributed.py, started by torchrun: trains a tiny MLP under DDP.

Usage: python -m torch.distributed.run --nproc_per_node 2 tests/ddp_worker.py OUT.pt RUN[,...]

RUN is ``PRECISION:GRAD_ACCUM``, or ``collapse:PRECISION:GRAD_ACCUM`` (process 1 alone sees a NaN
loss after step 2, under the CLI's CollapseDetector) or ``signal:PRECISION:GRAD_ACCUM`` (process 1
alone sees SIGTERM at the end of step 2, under the CLI's StopOnSignal; process 0 keeps a
checkpoint, as in the CLI). Each trains in turn in the same two processes (one launch, one
process group); every process saves ``{RUN: {...}}`` to OUT.pt.rank<N>.
"""

import gc
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from mixft import distributed
from mixft.data.batching import LengthGroupedBatchSampler
from mixft.train.trainer import Trainer
from tests.one_process_sees import NanLossAt, SignalAt


def data():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(32, 8, generator=g)
    y = x[:, :1] * 2.0 - x[:, 1:2]
    return x, y


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))


def train(precision: str, grad_accum: int, callbacks=()):
    x, y = data()
    ds = TensorDataset(x, y)
    # Equal lengths + shuffle=False: the global batch order is simply 0, 1, 2, ...
    sampler = LengthGroupedBatchSampler([1] * len(ds), batch_size=4, shuffle=False)
    eval_sampler = LengthGroupedBatchSampler([1] * len(ds), batch_size=8, shuffle=False)
    trainer = Trainer(
        model(),
        lambda p: torch.optim.SGD(p, lr=0.05),
        nn.MSELoss(),
        DataLoader(ds, batch_sampler=sampler),
        eval_loader=DataLoader(ds, batch_sampler=eval_sampler),
        precision=precision,
        device="cpu",
        grad_accum=grad_accum,
        max_grad_norm=None,
        predict_fn=lambda out: (out > 0).long().reshape(-1),
        scaler_kwargs={"init_scale": 1024.0} if precision == "fp16" else None,  # only fp16 has a GradScaler
        callbacks=callbacks,
    )
    # Count the micro-batches whose all-reduce DDP defers (no_sync): accumulation under
    # DDP must sync once per window, not per micro-batch.
    trainer.no_sync_calls = 0
    if hasattr(trainer.model, "no_sync"):
        real_no_sync = trainer.model.no_sync

        def counting_no_sync():
            trainer.no_sync_calls += 1
            return real_no_sync()

        trainer.model.no_sync = counting_no_sync
    result = trainer.fit()
    return trainer, result


def callbacks_for(kind: str, out: str) -> list:
    from mixft.callbacks.checkpointer import Checkpointer
    from mixft.callbacks.faults import CollapseDetector
    from mixft.callbacks.interrupt import SignalHandler, StopOnSignal

    if kind == "collapse":
        return [NanLossAt(rank=1, step=2), CollapseDetector(check_every=1)]
    if kind == "signal":
        handler = SignalHandler()  # not entered: no handler of the OS's is installed
        saves = [Checkpointer(f"{out}.signal.pt", every=0)] if distributed.is_main_process() else []
        return [SignalAt(handler, rank=1, step=2), StopOnSignal(handler), *saves]
    return []


def summary(trainer, result) -> dict:
    """What the test compares with the one-process run: this process's weights, counts and metrics."""
    return {
        "weights": torch.cat([p.detach().reshape(-1) for p in trainer.module.parameters()]),
        "steps": result.steps,
        "eval": result.eval,
        "samples_per_s": result.train_samples_per_s,
        "samples": trainer.state.samples,
        "world": distributed.world_size(),
        "no_sync_calls": trainer.no_sync_calls,
        "final_loss_scale": result.final_loss_scale,
        "skipped": result.skipped_steps,
        "stop_kind": result.stop_kind,
        "stopped_early": result.stopped_early,
        "step": trainer.state.step,
        # What the CLI would exit with: the signal this process stopped for (StopOnSignal's handler), if any.
        "exit_code": next((cb.handler.exit_code for cb in trainer.callbacks if hasattr(cb, "handler")), None),
    }


if __name__ == "__main__":
    out, runs = sys.argv[1], sys.argv[2].split(",")
    assert distributed.init_from_env("cpu"), "expected to run under torchrun"
    saved = {}
    for run in runs:
        *kind, precision, grad_accum = run.split(":")
        trainer, result = train(precision, int(grad_accum), callbacks_for(kind[0] if kind else "", out))
        saved[run] = summary(trainer, result)
        # The DDP wrapper's reducer holds gloo work with tensors: free it while the
        # interpreter is fully alive, or finalization can abort the process (SIGABRT,
        # "terminate called without an active exception", seen once in CI).
        del trainer, result
        gc.collect()
    torch.save(saved, f"{out}.rank{distributed.rank()}")
    distributed.shutdown()
