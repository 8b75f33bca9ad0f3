"""ResumeRng: a resumed fit's RNG draws are an unbroken run's."""

from __future__ import annotations

import torch

from mixft.rng import ResumeRng


def test_a_mid_epoch_resume_replays_the_epoch_start_then_takes_the_saved_state():
    torch.manual_seed(0)
    rng = ResumeRng()
    rng.start_epoch(mid_epoch=False)
    loader_draw = torch.rand(1)  # what the epoch's loader draws as it starts
    torch.rand(5)  # the steps before the checkpoint
    saved = rng.state()
    after_saved = torch.rand(3)  # what the unbroken run draws next

    torch.manual_seed(123)  # a new process: some other RNG state
    resumed = ResumeRng()
    resumed.load(saved)
    resumed.start_epoch(mid_epoch=True)
    assert torch.equal(torch.rand(1), loader_draw)  # the loader starts as it did
    resumed.catch_up()
    assert torch.equal(torch.rand(3), after_saved)
    resumed.catch_up()  # once only: later calls leave the RNG alone
    assert not torch.equal(torch.rand(3), after_saved)


def test_a_resume_at_an_epoch_boundary_restores_the_saved_state_at_once():
    torch.manual_seed(0)
    rng = ResumeRng()
    rng.start_epoch(mid_epoch=False)
    saved = rng.state()
    expected = torch.rand(2)
    torch.manual_seed(9)
    resumed = ResumeRng()
    resumed.load(saved)
    resumed.start_epoch(mid_epoch=False)
    assert torch.equal(torch.rand(2), expected)
    assert resumed.state()["epoch_start"] is not None


def test_a_fit_with_a_seed_fixes_pythons_and_numpys_draws_too():
    # Was: only torch was seeded; Python's and numpy's generators started from the OS's entropy, so two
    # runs of one seed (one node or two) drew differently there and their checkpoints' RNG states differed.
    import random

    import numpy as np
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    from mixft.train.hooks import Callback
    from mixft.train.trainer import Trainer

    class Draw(Callback):
        def on_train_begin(self, trainer):
            self.drawn = (random.random(), float(np.random.rand()), float(torch.rand(1)))

    data = TensorDataset(torch.randn(8, 4), torch.randn(8, 1))
    draws = []
    for entropy in (1, 2):
        random.seed(entropy)  # whatever the process drew before the run
        np.random.seed(entropy)
        draw = Draw()
        model = nn.Linear(4, 1)
        Trainer(
            model, torch.optim.SGD, nn.MSELoss(), DataLoader(data, batch_size=4), max_steps=1, seed=0, callbacks=[draw]
        ).fit()
        draws.append(draw.drawn)
    assert draws[0] == draws[1]


def test_every_seed_the_cli_takes_seeds_numpy_with_its_own_stream():
    import numpy as np

    from mixft.rng import seed_all

    drawn = []
    for seed in (-3, 0, 3, 2**32 + 3, 2**64 - 1):  # the CLI's range is [-2**63, 2**64)
        seed_all(seed)
        drawn.append(float(np.random.rand()))
    assert len(set(drawn)) == len(drawn)
