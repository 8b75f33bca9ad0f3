"""build_trainer (mixft.runs.build): a recipe's parts under a RunConfig make the trainer a hand-written call would."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from mixft.config.run_config import RunConfig
from mixft.recipe import TrainerParts
from mixft.runs.build import build_trainer
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


def flat(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).float() for p in model.parameters()])


def test_build_trainer_builds_the_trainer_a_hand_written_call_would():
    x, y = regression_data(48)

    def parts():
        return TrainerParts(
            model=make_mlp(),
            optimizer=lambda p: torch.optim.AdamW(p, lr=1e-2),
            loss_fn=nn.MSELoss(),
            train_loader=loader(x, y, 4),
            eval_loader=loader(x, y, 16),
            lr_scheduler=lambda o, n: torch.optim.lr_scheduler.LinearLR(o, 1.0, 0.1, n),
            predict_fn=lambda out: out,
            run_info={"model": "mlp", "dataset": "toy"},
        )

    cfg = RunConfig(recipe="mlp", epochs=2, max_steps=5, grad_accum=2, max_grad_norm=0.4, batch_size=4, lr=1e-2)
    trainer = build_trainer(parts(), cfg, precision="bf16", device="cpu", seed=3)
    assert (trainer.grad_accum, trainer.max_grad_norm, trainer.epochs, trainer.max_steps) == (2, 0.4, 2, 5)
    assert (trainer.precision.name, trainer.seed, trainer.total_steps) == ("bf16", 3, 5)
    result = trainer.fit()
    p = parts()
    by_hand = Trainer(
        p.model,
        p.optimizer,
        p.loss_fn,
        p.train_loader,
        eval_loader=p.eval_loader,
        precision="bf16",
        device="cpu",
        lr_scheduler=p.lr_scheduler,
        grad_accum=2,
        max_grad_norm=0.4,
        epochs=2,
        max_steps=5,
        predict_fn=p.predict_fn,
        seed=3,
    )
    by_hand.fit()
    assert torch.equal(flat(trainer.model), flat(by_hand.model))
    assert (result.model, result.dataset, result.steps) == ("mlp", "toy", 5)
    assert result.config == {}  # the loop carries no run config: the plan records it (identity.recorded_config)
    # max_grad_norm 0 means "no clipping" on the command line: the trainer gets None.
    assert (
        build_trainer(
            parts(), RunConfig(epochs=1, max_grad_norm=0.0), precision="fp32", device="cpu", seed=0
        ).max_grad_norm
        is None
    )


def test_build_trainer_passes_the_callbacks_in_order():
    x, y = regression_data(8)
    parts = TrainerParts(
        model=make_mlp(),
        optimizer=lambda p: torch.optim.SGD(p, lr=0.1),
        loss_fn=nn.MSELoss(),
        train_loader=loader(x, y, 4),
    )
    first, second = object(), object()
    trainer = build_trainer(
        parts, RunConfig(epochs=1), precision="fp32", device="cpu", seed=0, callbacks=[first, second]
    )
    assert trainer.callbacks == [first, second]
