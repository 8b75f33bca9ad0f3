"""Learning-rate schedules by name, and class weights for imbalanced labels.

The schedules are transformers' own (``get_scheduler``), so ``--lr-scheduler cosine``
means here what it means in Hugging Face's Trainer. The default stays mixft's: linear
decay after a warm-up over the first 10 % of the optimizer steps.

Usage::

    Trainer(..., lr_scheduler=build_scheduler_factory("cosine", warmup_steps=100))
    nn.CrossEntropyLoss(weight=class_weights_balanced(train_labels, num_classes=3))
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from mixft.errors import UsageError
from mixft.options import NON_NEGATIVE_INT, PROBABILITY, choice

if TYPE_CHECKING:  # torch is imported where it is used: mixft.config.run_config reads the names above without it
    import torch

#: The ``--lr-scheduler`` names (transformers' SchedulerType values mixft offers).
SCHEDULERS = ("linear", "cosine", "cosine_with_restarts", "polynomial", "constant", "constant_with_warmup")
SCHEDULER = choice(*SCHEDULERS)
#: The warm-up when none is asked for: mixft's historical 10 % (``optim.linear_warmup_factory``).
DEFAULT_WARMUP_RATIO = 0.1
#: ``--class-weights`` values.
CLASS_WEIGHTS = ("balanced",)


def check_schedule(
    name: str, warmup_ratio: float | None = None, warmup_steps: int | None = None, cycles: int | None = None
) -> None:
    """Refuse a schedule that cannot be built, or that would silently be another, in one line
    (``RunConfig.validate`` runs it before any work).

    Usage: ``check_schedule("cosine_with_restarts", warmup_steps=100, cycles=3)``
    """
    SCHEDULER.validate("--lr-scheduler", name)
    if name == "cosine_with_restarts" and (cycles is None or cycles < 2):
        # transformers' default is one cycle: no restart, the cosine schedule step for step.
        raise UsageError(
            "--lr-scheduler cosine_with_restarts restarts only with --lr-cycles N, N >= 2 "
            f"({'one cycle' if cycles == 1 else 'without it: one cycle'} is the cosine schedule, step for step)"
        )
    if cycles is not None and name != "cosine_with_restarts":
        raise UsageError(f"--lr-cycles counts the restarts of --lr-scheduler cosine_with_restarts, not of {name}")
    if warmup_ratio is not None and warmup_steps is not None:
        raise UsageError("give --warmup-ratio or --warmup-steps, not both")
    if warmup_ratio is not None:
        PROBABILITY.validate("--warmup-ratio", warmup_ratio)
    if warmup_steps is not None:
        NON_NEGATIVE_INT.validate("--warmup-steps", warmup_steps)
    if name == "constant" and (warmup_ratio or warmup_steps):
        raise UsageError(
            "--lr-scheduler constant has no warm-up: use constant_with_warmup with --warmup-ratio/--warmup-steps"
        )


def build_scheduler_factory(
    name: str = "linear", warmup_ratio: float | None = None, warmup_steps: int | None = None, cycles: int | None = None
):
    """``f(optimizer, total_steps) -> scheduler`` for a transformers schedule with a warm-up.

    The warm-up is ``warmup_steps``, or ``int(warmup_ratio * total_steps)`` (rounded down, as
    mixft always has), or 10 % when neither is given; ``constant`` has none. ``cycles``:
    ``cosine_with_restarts``'s cosine cycles (required, >= 2). Bad names and values raise a
    one-line UsageError here, before any training.

    Usage: ``Trainer(..., lr_scheduler=build_scheduler_factory("linear", warmup_ratio=0.06))``
    """
    check_schedule(name, warmup_ratio, warmup_steps, cycles)
    if warmup_ratio is None and warmup_steps is None:
        warmup_ratio = 0.0 if name == "constant" else DEFAULT_WARMUP_RATIO

    def build(optimizer: torch.optim.Optimizer, total_steps: int):
        from transformers import get_scheduler  # importing transformers takes seconds: only when training

        warmup = warmup_steps if warmup_steps is not None else int(warmup_ratio * total_steps)
        if name == "polynomial" and warmup >= total_steps:
            # transformers divides by (total - warm-up) after the warm-up: a ZeroDivisionError at the last step.
            raise UsageError(
                f"--lr-scheduler polynomial needs at least one optimizer step after the warm-up: a "
                f"warm-up of {warmup} covers all {total_steps} steps"
            )
        kwargs = {"scheduler_specific_kwargs": {"num_cycles": cycles}} if cycles is not None else {}
        return get_scheduler(name, optimizer, num_warmup_steps=warmup, num_training_steps=total_steps, **kwargs)

    return build


def class_weights_balanced(label_ids: Sequence[int] | torch.Tensor, num_classes: int) -> torch.Tensor:
    """Inverse class frequency, ``n / (k * count_c)`` per class (scikit-learn's ``"balanced"``).

    For ``CrossEntropyLoss(weight=...)``: each class then weighs as much in the loss as if
    the classes were equally frequent. A class with no training example has no weight to
    give, so it is refused (one line naming it).

    Usage: ``class_weights_balanced([0, 0, 0, 1], 2)  # tensor([0.6667, 2.0000])``
    """
    import torch

    labels = torch.as_tensor(label_ids).reshape(-1)
    if labels.is_floating_point():
        if not torch.equal(labels, labels.round()):
            raise UsageError("--class-weights balanced needs class labels, got non-integer (regression) labels")
        labels = labels.long()
    if labels.numel() == 0:
        raise UsageError("--class-weights balanced: the training data has no labels")
    if int(labels.min()) < 0 or int(labels.max()) >= num_classes:
        raise UsageError(
            f"--class-weights balanced: labels must be 0..{num_classes - 1}, got "
            f"{int(labels.min())}..{int(labels.max())}"
        )
    counts = torch.bincount(labels, minlength=num_classes)
    missing = [str(c) for c in range(num_classes) if counts[c] == 0]
    if missing:
        raise UsageError(f"--class-weights balanced: class(es) {', '.join(missing)} have no training example")
    return (labels.numel() / (num_classes * counts.double())).float()
