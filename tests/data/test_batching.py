"""Length-grouped batching changes the order, not what is learned from: every example once."""

import random

import pytest

from mixft.data.batching import LengthGroupedBatchSampler


def test_every_example_once_per_epoch_and_epochs_differ():
    rng = random.Random(0)
    lengths = [rng.randint(3, 60) for _ in range(1001)]
    sampler = LengthGroupedBatchSampler(lengths, batch_size=32, seed=7)
    orders = []
    for epoch in range(3):
        sampler.set_epoch(epoch)
        batches = list(sampler)
        assert len(batches) == len(sampler) == 32  # ceil(1001 / 32)
        flat = [i for b in batches for i in b]
        assert sorted(flat) == list(range(1001))
        orders.append(flat)
    assert orders[0] != orders[1] != orders[2]
    # Same (seed, epoch): the same order, which resuming relies on.
    sampler.set_epoch(1)
    assert [i for b in sampler for i in b] == orders[1]


def test_grouping_cuts_padding_against_random_batches():
    rng = random.Random(1)
    lengths = [rng.randint(3, 60) for _ in range(2000)]

    def padded_tokens(batches):
        return sum(max(lengths[i] for i in b) * len(b) for b in batches)

    grouped = list(LengthGroupedBatchSampler(lengths, 32, seed=0))
    shuffled = list(range(2000))
    random.Random(0).shuffle(shuffled)
    plain = [shuffled[i : i + 32] for i in range(0, 2000, 32)]
    assert padded_tokens(grouped) < 0.75 * padded_tokens(plain)


def test_eval_order_is_deterministic_longest_first():
    lengths = [5, 9, 2, 9, 7]
    batches = list(LengthGroupedBatchSampler(lengths, 2, shuffle=False))
    assert batches == [[1, 3], [4, 0], [2]]


def test_evaluation_figures_go_back_to_the_data_order_for_one_process_and_for_several():
    import torch
    from torch.utils.data import DataLoader

    from mixft.data.batching import in_input_order

    lengths = [5, 9, 2, 9, 7, 1, 3]
    for replicas in (1, 2, 3):
        samplers = [
            LengthGroupedBatchSampler(lengths, 2, shuffle=False, num_replicas=replicas, rank=r) for r in range(replicas)
        ]
        # What an evaluation gathers: each rank's examples in its batches' order, rank 0 first.
        gathered = [i for sampler in samplers for batch in sampler for i in batch]
        assert samplers[0].gathered_order() == gathered
        loader = DataLoader(range(len(lengths)), batch_sampler=samplers[0])
        values = torch.tensor(gathered) * 10  # each example's figure is its index x 10
        assert in_input_order(loader, values).tolist() == [i * 10 for i in range(len(lengths))]
    training = DataLoader(range(7), batch_sampler=LengthGroupedBatchSampler(lengths, 2, shuffle=True))
    assert in_input_order(training, torch.arange(7)).tolist() == list(range(7))  # no order to restore: unchanged


@pytest.mark.parametrize("kwargs", [{"batch_size": 0}, {"batch_size": 2.5}, {"batch_size": 4, "group_factor": 0}])
def test_sizes_follow_the_options_rule(kwargs):
    from mixft.errors import UsageError

    with pytest.raises(UsageError, match="must be a positive integer"):
        LengthGroupedBatchSampler([3, 1, 2], **kwargs)
