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
