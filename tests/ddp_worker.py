"""Worker for tests/test_distributed.py, started by torchrun: trains a tiny MLP under DDP.

Usage: python -m torch.distributed.run --nproc_per_node 2 tests/ddp_worker.py OUT.pt PRECISION
"""

import gc
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from mixft import distributed
from mixft.data.batching import LengthGroupedBatchSampler
from mixft.trainer import Trainer


def data():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(32, 8, generator=g)
    y = x[:, :1] * 2.0 - x[:, 1:2]
    return x, y


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))


def train(precision: str, grad_accum: int):
    x, y = data()
    ds = TensorDataset(x, y)
    # Equal lengths + shuffle=False: the global batch order is simply 0, 1, 2, ...
    sampler = LengthGroupedBatchSampler([1] * len(ds), batch_size=4, shuffle=False)
    eval_sampler = LengthGroupedBatchSampler([1] * len(ds), batch_size=8, shuffle=False)
    trainer = Trainer(model(), lambda p: torch.optim.SGD(p, lr=0.05), nn.MSELoss(),
                      DataLoader(ds, batch_sampler=sampler), eval_loader=DataLoader(ds, batch_sampler=eval_sampler),
                      precision=precision, device="cpu", grad_accum=grad_accum, max_grad_norm=None,
                      predict_fn=lambda out: (out > 0).long().reshape(-1))
    result = trainer.fit()
    return trainer, result


if __name__ == "__main__":
    out, precision = sys.argv[1], sys.argv[2]
    assert distributed.init_from_env(), "expected to run under torchrun"
    trainer, result = train(precision, grad_accum=1)
    if distributed.is_main_process():
        weights = torch.cat([p.detach().reshape(-1) for p in trainer.module.parameters()])
        torch.save({"weights": weights, "steps": result.steps, "eval": result.eval,
                    "samples_per_s": result.train_samples_per_s, "samples": trainer.state.samples,
                    "world": distributed.world_size()}, out)
    # The DDP wrapper's reducer holds gloo work with tensors: free it while the
    # interpreter is fully alive, or finalization can abort the process (SIGABRT,
    # "terminate called without an active exception", seen once in CI).
    del trainer, result
    gc.collect()
    distributed.shutdown()
