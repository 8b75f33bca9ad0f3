"""Pure bf16 training: weights, gradients and optimizer state all in bf16, updates kept by compensation.

AMP keeps fp32 master weights, gradients and AdamW moments: 16 bytes per parameter. Pure
bf16 (``--precision bf16-pure``) holds 2 + 2 + 2·2 bytes, plus a 2-byte compensation buffer
per weight: 10 bytes. Plain bf16 weights lose small updates (a weight of 1.0 ignores any
step under half its bf16 spacing, 2⁻⁹: 20 AdamW steps at lr 1e-4 leave it at exactly 1.0);
torch-optimi's Kahan summation keeps what each rounding dropped in ``kahan_comp`` and adds
it back at the next step, so the weight follows fp32's to within one bf16 spacing.
Weight decay goes through the same buffer (``mixft.train.kahan_adamw``): optimi's own
decay multiplies the bf16 weight outside it and rounds back to the same weight.
Why torch-optimi's Kahan and not torchao's stochastic rounding: measured in
docs/pure_bf16.md (same accuracy as AMP over 3 seeds, deterministic, no compile).

``bf16-true`` (Lightning's name) is the same without compensation, only on request and
with ``BF16_TRUE_NOTICE``: small updates and weight decay are lost there by design.

Usage::

    opt = compensated_adamw(groups, lr=2e-5, compensated=True)   # KahanAdamW, an optimi.AdamW(kahan_sum=True)
    check_optimizers(PRECISIONS["bf16-pure"], [opt])              # UsageError for a plain torch AdamW
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch

from mixft.errors import UsageError
from mixft.log import logger

__all__ = [
    "BF16_TRUE_NOTICE",
    "check_optimizers",
    "compensated_adamw",
    "compensated_sgd",
    "is_compensated",
    "optimizer_name",
]

# torch.optim.AdamW's defaults, what AMP and fp32 runs use (optimi's own are 0.99 / 1e-6):
# the only difference from AMP's optimizer is then where the bits live.
TORCH_BETAS, TORCH_EPS = (0.9, 0.999), 1e-8

BF16_TRUE_NOTICE = (
    "notice: bf16-true keeps weights and optimizer state in bf16 without compensation: updates "
    "smaller than half a bf16 step of a weight are lost (a weight of 1.0 ignores steps below 0.002), "
    "and so is weight decay whenever lr x weight decay is below 0.002 (any usual setting); "
    "bf16-pure compensates both"
)

_warned: set[str] = set()


def warn_once(text: str) -> None:
    """Log ``text`` as a warning the first time this process sees it (a --compare builds a trainer per run)."""
    if text not in _warned:
        _warned.add(text)
        logger.warning(text)


def _optimi():
    try:
        import optimi
    except ImportError as e:  # a core dependency; only a broken install lacks it
        raise UsageError("pure bf16 needs the torch-optimi package (pip install torch-optimi)") from e
    return optimi


def compensated_adamw(
    params: Iterable[Any], lr: float, *, compensated: bool, weight_decay: float = 0.0, foreach: bool | None = True
) -> torch.optim.Optimizer:
    """torch-optimi's AdamW for bf16 parameters: Kahan-compensated when ``compensated``, with torch's betas/eps.

    ``weight_decay`` is decoupled and multiplied by the learning rate, as in ``torch.optim.AdamW``;
    compensated, it goes through the compensation (``mixft.train.kahan_adamw.KahanAdamW``) and
    follows fp32's to bf16 rounding; uncompensated (bf16-true), optimi's, lost below half a
    bf16 step like any small update.
    ``foreach``: optimi's multi-tensor path (the one measured in docs/pure_bf16.md).

    Usage: ``compensated_adamw(model.parameters(), lr=1e-4, compensated=True)``
    """
    params = list(params)
    # optimi's foreach path fails on an empty group (torch's tolerates it): a model without
    # biases, or a LoRA model whose trainable weights are all 2-d, has one.
    params = [g for g in params if not (isinstance(g, dict) and not list(g["params"]))]
    adamw = _optimi().AdamW
    if compensated:  # optimi's own decay would round away on bf16 weights
        from mixft.train.kahan_adamw import KahanAdamW

        adamw = KahanAdamW
    return adamw(
        params,
        lr=lr,
        betas=TORCH_BETAS,
        eps=TORCH_EPS,
        weight_decay=weight_decay,
        kahan_sum=compensated,
        foreach=foreach,
        triton=False,
    )


def compensated_sgd(params: Iterable[Any], lr: float, *, compensated: bool) -> torch.optim.Optimizer:
    """torch-optimi's SGD (no momentum, as ``torch.optim.SGD(params, lr)``), Kahan-compensated when asked.

    Usage: ``compensated_sgd(model.parameters(), lr=0.1, compensated=True)``
    """
    return _optimi().SGD(params, lr=lr, kahan_sum=compensated, triton=False)


def is_compensated(optimizer: torch.optim.Optimizer) -> bool:
    """Whether ``optimizer`` keeps the updates a bf16 weight cannot hold on its own.

    torch-optimi with ``kahan_sum`` True (or None: on for bf16 parameters), or torchao's
    AdamW with ``bf16_stochastic_round``. Anything else (torch.optim's own) is not.

    Usage: ``is_compensated(compensated_adamw(params, 1e-4, compensated=True)) is True``
    """
    module = _library_class(optimizer).__module__ or ""
    groups = optimizer.param_groups
    if module.startswith("optimi"):
        return bool(groups) and all(g.get("kahan_sum", None) in (True, None) for g in groups)
    if module.startswith("torchao"):
        return bool(groups) and all(bool(g.get("bf16_stochastic_round", False)) for g in groups)
    return False


def _library_class(optimizer: torch.optim.Optimizer) -> type:
    """The optimizer's class, or for mixft's own subclass (KahanAdamW) the library class it extends."""
    for cls in type(optimizer).__mro__:
        if not (cls.__module__ or "").startswith("mixft."):
            return cls
    return type(optimizer)


def optimizer_name(optimizer: torch.optim.Optimizer) -> str:
    """results.json's ``optimizer``: ``"mixft.KahanAdamW(kahan_sum=True)"``, ``"optimi.AdamW(kahan_sum=False)"``,
    ``"torch.optim.AdamW"``.

    mixft's own subclass is named as itself (its weight decay goes through the compensation, which
    optimi's does not): a results file says which of the two trained it.
    Usage: ``optimizer_name(trainer.optimizer)``
    """
    cls = _library_class(optimizer)
    top = (cls.__module__ or "").split(".")[0]
    name = f"{'torch.optim' if top == 'torch' else top}.{cls.__name__}"
    if type(optimizer) is not cls:  # mixft's subclass of the library's optimizer
        name = f"mixft.{type(optimizer).__name__}"
    if top == "optimi":
        kahan = {g.get("kahan_sum") for g in optimizer.param_groups}
        if len(kahan) == 1:
            value = kahan.pop()
            name += f"(kahan_sum={True if value is None else value})"
    return name


def check_optimizers(precision, optimizers: Sequence[torch.optim.Optimizer]) -> None:
    """Refuse, at start-up, a pure-bf16 precision whose optimizer would silently lose updates.

    ``precision.compensated``: each optimizer holding ``precision.param_dtype`` parameters must
    be compensated (``is_compensated``). bf16-true (not compensated) warns once instead.

    Usage: ``check_optimizers(trainer.precision, trainer.optimizers)``
    """
    dtype = getattr(precision, "param_dtype", None)
    if dtype is None:
        return
    if not precision.compensated:
        warn_once(BF16_TRUE_NOTICE)
        return
    for opt in optimizers:
        holds = any(p.dtype == dtype for group in opt.param_groups for p in group["params"])
        if holds and not is_compensated(opt):
            raise UsageError(
                f"precision {precision.name} needs a compensated optimizer (mixft.optim.adamw_factory builds "
                f"torch-optimi's Kahan AdamW); {optimizer_name(opt)} would lose bf16 updates; use bf16-true to "
                "train without compensation knowingly"
            )
