"""The autocast trap, live: the README's sigmoid + ``nn.BCELoss`` under ``torch.autocast``, then the fix.

Usage::

    print(AUTOCAST_TRAP)
    print(format_trap(demonstrate_bce_trap("cpu", "fp16")))
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from mixft.amp.precision import Precision, resolve_device, resolve_precision
from mixft.errors import UsageError
from mixft.log import logger

AUTOCAST_TRAP = (
    "sigmoid + BCELoss under autocast: CUDA autocast refuses binary_cross_entropy ('unsafe to "
    "autocast'), because in fp16 the sigmoid rounds to exactly 0 or 1 and BCELoss then takes log(0). "
    "CPU autocast (torch 2.13) does not refuse: it runs BCELoss in fp32 on the already-rounded "
    "probability, so the loss is clamped at 100 and the gradient is NaN (fp16) or 0 (bf16). "
    "Fix: return logits and use BCEWithLogitsLoss (autocast runs it in fp32, as one stable log-sum-exp); "
    "apply the sigmoid only for predictions."
)

#: Three examples, the first confidently wrong (logit 9, label 0): the one that saturates.
TRAP_LOGITS = (9.0, 2.0, -3.0)
TRAP_LABELS = (0.0, 1.0, 0.0)


@dataclass
class TrapDemo:
    """What sigmoid + BCELoss and BCEWithLogitsLoss did under one autocast precision."""

    device: str
    precision: str
    logits: list[float]
    labels: list[float]
    refused: str | None  # autocast's RuntimeError for BCELoss on this device, if it refused
    cuda_policy: str | None  # torch's CUDA autocast verdict, asked directly when not refused here
    probabilities: list[float] | None  # sigmoid outputs in the autocast dtype
    bce_loss: float | None  # nn.BCELoss on them (when not refused)
    bce_grads: list[float] | None  # d loss / d logit through sigmoid + BCELoss
    logits_loss: float = math.nan  # nn.BCEWithLogitsLoss under the same autocast
    logits_grads: list[float] = field(default_factory=list)
    reference_loss: float = math.nan  # BCEWithLogitsLoss in fp32, no autocast
    reference_grads: list[float] = field(default_factory=list)

    @property
    def bce_is_wrong(self) -> bool:
        """BCELoss ran but its loss or gradients are off (NaN, or far from the fp32 reference)."""
        if self.bce_loss is None or self.bce_grads is None:
            return False
        if not math.isclose(self.bce_loss, self.reference_loss, rel_tol=0.05):
            return True
        return any(
            not math.isclose(g, r, rel_tol=0.1, abs_tol=1e-3) for g, r in zip(self.bce_grads, self.reference_grads)
        )


def _head(device: torch.device) -> nn.Linear:
    # A 1 -> 1 Linear with weight 1: under autocast it emits the logits in the autocast
    # dtype, exactly as the README's classifier head does.
    head = nn.Linear(1, 1).to(device)
    with torch.no_grad():
        head.weight.fill_(1.0)
        head.bias.zero_()
    return head


def demonstrate_bce_trap(device: str | torch.device = "cpu", precision: str | Precision = "fp16") -> TrapDemo:
    """Run the README's sigmoid + ``nn.BCELoss`` under ``torch.autocast``, then the fix.

    On CUDA autocast refuses BCELoss with a RuntimeError ("... unsafe to autocast"),
    recorded in ``refused``. CPU autocast lets it run; the numbers show the damage
    (``probabilities`` of exactly 1.0, a clamped loss, NaN or zero gradients), and
    ``cuda_policy`` holds the error CUDA would raise. fp16 on CPU is emulated: slow, but
    these tensors are tiny.

    Usage: ``demo = demonstrate_bce_trap("cpu", "fp16"); print(demo.refused or demo.bce_grads)``
    """
    device = resolve_device(device)
    precision = resolve_precision(precision, device)
    if not precision.autocast_enabled:
        raise UsageError(f"the autocast trap needs a mixed precision (fp16 or bf16), got {precision.name}")
    labels = torch.tensor(TRAP_LABELS, device=device)

    def logits_leaf() -> torch.Tensor:
        return torch.tensor(TRAP_LOGITS, device=device).unsqueeze(-1).requires_grad_(True)

    def autocast():
        return torch.autocast(device.type, dtype=precision.autocast_dtype)

    head = _head(device)
    refused = cuda_policy = None
    probabilities = bce_loss = bce_grads = None

    # The README's pattern: sigmoid on the head's output, then BCELoss, inside autocast.
    z = logits_leaf()
    try:
        with autocast():
            probs = nn.Sigmoid()(head(z)).squeeze(-1)
            loss = nn.BCELoss()(probs, labels)
    except RuntimeError as exc:
        refused = str(exc)
    else:
        (grad,) = torch.autograd.grad(loss, z)
        probabilities = probs.detach().float().cpu().tolist()
        bce_loss = float(loss.detach())
        bce_grads = grad.squeeze(-1).float().cpu().tolist()
        cuda_policy = cuda_autocast_bce_verdict()

    # mixft's fix: the model returns logits; BCEWithLogitsLoss is autocast-safe.
    z = logits_leaf()
    with autocast():
        loss = nn.BCEWithLogitsLoss()(head(z).squeeze(-1), labels)
    (grad,) = torch.autograd.grad(loss, z)

    # The fp32 truth, for comparison.
    z_ref = logits_leaf()
    ref = nn.BCEWithLogitsLoss()(head(z_ref).squeeze(-1), labels)
    (ref_grad,) = torch.autograd.grad(ref, z_ref)

    return TrapDemo(
        device=device.type,
        precision=precision.name,
        logits=list(TRAP_LOGITS),
        labels=list(TRAP_LABELS),
        refused=refused,
        cuda_policy=cuda_policy,
        probabilities=probabilities,
        bce_loss=bce_loss,
        bce_grads=bce_grads,
        logits_loss=float(loss.detach()),
        logits_grads=grad.squeeze(-1).float().cpu().tolist(),
        reference_loss=float(ref.detach()),
        reference_grads=ref_grad.squeeze(-1).float().cpu().tolist(),
    )


def cuda_autocast_bce_verdict() -> str | None:
    """The RuntimeError torch's CUDA autocast raises for ``binary_cross_entropy``, without a GPU.

    Calls the kernel torch registers for that op under the AutocastCUDA dispatch key
    (a private torch API, hence the broad guard). None when it accepts the op or when
    this torch build cannot be asked.
    """
    try:
        keys = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCUDA)
        p, y = torch.full((1,), 0.5), torch.ones(1)
        torch.ops.aten.binary_cross_entropy.default.redispatch(keys, p, y, None, 1)
    except RuntimeError as exc:
        return str(exc)
    except Exception as exc:  # private API moved: say nothing rather than guess
        logger.debug("could not query CUDA autocast's binary_cross_entropy policy: %s", exc)
    return None


def _floats(values: Sequence[float] | None, fmt: str = ".4g") -> str:
    return "n/a" if values is None else "[" + ", ".join(f"{v:{fmt}}" for v in values) + "]"


def format_trap(demo: TrapDemo) -> str:
    """What :func:`demonstrate_bce_trap` found, for the terminal."""
    head = f"sigmoid + nn.BCELoss under torch.autocast({demo.device!r}, {demo.precision}), logits {_floats(demo.logits, 'g')}, labels {_floats(demo.labels, 'g')}:"
    lines = [head]
    if demo.refused is not None:
        lines.append("  RuntimeError: " + demo.refused.strip().replace("\n", "\n    "))
    else:
        lines.append(
            f"  no error on {demo.device}: sigmoid gave {_floats(demo.probabilities, '.6g')} in {demo.precision}"
        )
        saturated = any(p in (0.0, 1.0) for p in demo.probabilities or ())
        why = ": log(0) = -inf, which BCELoss clamps at -100" if saturated else ""
        lines.append(f"  BCELoss = {demo.bce_loss:.4f} (fp32 truth {demo.reference_loss:.4f}{why})")
        lines.append(f"  d loss/d logit = {_floats(demo.bce_grads)} (truth {_floats(demo.reference_grads)})")
        if demo.cuda_policy:
            lines.append(
                "  torch's CUDA autocast raises instead: RuntimeError: " + demo.cuda_policy.strip().splitlines()[0]
            )
    lines.append(
        f"  fix, BCEWithLogitsLoss on the logits under the same autocast: loss {demo.logits_loss:.4f}, "
        f"d loss/d logit = {_floats(demo.logits_grads)}"
    )
    return "\n".join(lines)
