"""The precision policy: the one place that maps a name to autocast dtype, GradScaler and TF32.

| name | autocast dtype | GradScaler | where                                              |
|------|----------------|------------|----------------------------------------------------|
| fp32 | none           | off        | everywhere (TF32 matmuls off: the true baseline)   |
| tf32 | none           | off        | CUDA Ampere+ (TF32 matmuls on)                     |
| fp16 | float16        | on         | CUDA; on CPU it runs, at a speed that depends on the CPU |
| bf16 | bfloat16       | off        | CUDA Ampere+, CPU                                  |

``--amp`` means the device's best mixed precision: fp16 on CUDA, bf16 on CPU.
Nothing else in mixft turns a string into a dtype; unsupported combinations raise
``UsageError`` here, at start-up, never mid-run.

Usage::

    device = resolve_device("auto")
    precision = resolve_precision("amp", device)   # Precision(name='bf16', ...) on CPU
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from .config import DEVICE_CHOICES
from .errors import UsageError


@dataclass(frozen=True)
class Precision:
    """How one run computes: the switches are flags, so fp32/fp16/bf16 share one code path."""

    name: str
    autocast_dtype: torch.dtype | None  # None: no autocast, parameters' own dtype (fp32)
    grad_scaler: bool  # fp16's narrow exponent range needs loss scaling; bf16's does not
    tf32: bool = False  # let CUDA matmuls/convolutions use TF32 tensor cores

    @property
    def autocast_enabled(self) -> bool:
        return self.autocast_dtype is not None

    @property
    def autocast_dtype_name(self) -> str | None:
        return None if self.autocast_dtype is None else str(self.autocast_dtype).removeprefix("torch.")


PRECISIONS: dict[str, Precision] = {
    "fp32": Precision("fp32", None, grad_scaler=False, tf32=False),
    "tf32": Precision("tf32", None, grad_scaler=False, tf32=True),
    "fp16": Precision("fp16", torch.float16, grad_scaler=True),
    "bf16": Precision("bf16", torch.bfloat16, grad_scaler=False),
}

# What --amp means on each device type.
AMP_DEFAULT = {"cuda": "fp16", "cpu": "bf16"}



def resolve_device(name: str | torch.device = "auto") -> torch.device:
    """``auto`` -> cuda when available, else cpu. Asking for an absent CUDA is a UsageError."""
    if isinstance(name, torch.device):
        name = str(name)
    kind = name.split(":", 1)[0]
    if kind not in DEVICE_CHOICES:
        raise UsageError(f"unknown device {name!r}; choose one of: {', '.join(DEVICE_CHOICES)}")
    if kind == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if kind == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device is available here; use --device cpu or auto")
    return torch.device(name)


def amp_precision_names(device: torch.device) -> list[str]:
    """The mixed precisions this device can run, best first (what --compare tries by default)."""
    if device.type == "cuda":
        names = ["fp16"]
        if torch.cuda.is_bf16_supported(including_emulation=False):
            names.append("bf16")
        return names
    return [AMP_DEFAULT.get(device.type, "bf16")]


def resolve_precision(name: str | Precision | None, device: torch.device) -> Precision:
    """Validate ``name`` ("amp", "fp32", "tf32", "fp16", "bf16") for ``device``.

    Raises UsageError with a one-line reason when the device cannot run it.
    """
    if isinstance(name, Precision):
        precision = name
    else:
        name = (name or "fp32").lower()
        if name == "amp":
            name = AMP_DEFAULT.get(device.type)
            if name is None:
                raise UsageError(f"--amp: no mixed precision is defined for device type {device.type!r}")
        if name not in PRECISIONS:
            raise UsageError(f"unknown precision {name!r}; choose one of: {', '.join(PRECISIONS)}")
        precision = PRECISIONS[name]

    if precision.tf32:
        if device.type != "cuda":
            raise UsageError(f"precision tf32 needs a CUDA GPU (Ampere or newer); device is {device.type}: use fp32 or bf16")
        if torch.cuda.get_device_capability(device)[0] < 8:
            raise UsageError("precision tf32 needs an Ampere or newer GPU (compute capability 8.0+); use fp32 or fp16")
    if precision.autocast_dtype is not None:
        if not torch.amp.is_autocast_available(device.type):
            raise UsageError(f"precision {precision.name}: autocast is not available on device type {device.type!r}")
        if precision.autocast_dtype == torch.bfloat16 and device.type == "cuda":
            if not torch.cuda.is_bf16_supported(including_emulation=False):
                raise UsageError("precision bf16 needs an Ampere or newer GPU; use fp16 (with loss scaling) here")
        if not _autocast_runs(device, precision.autocast_dtype):
            raise UsageError(f"precision {precision.name} is not supported by autocast on {device.type} in this torch build")
    return precision


def precision_notice(precision: Precision, device: torch.device, *, measured: bool = False) -> str | None:
    """A one-line caution for combinations that run but that users rarely want.

    ``measured``: a probe of this machine is at hand (its own notice then says what it
    measured), so this one, which says nothing was measured, is not given.

    Usage: ``precision_notice(precision, device, measured=cached is not None)``
    """
    if precision.name == "fp16" and device.type == "cpu" and not measured:
        return (
            "notice: fp16 on CPU runs through autocast; how fast it runs on this CPU is not known "
            "until measured: --probe measures it (about 30 s), --compare fp32,fp16 trains both"
        )
    return None


@contextlib.contextmanager
def configure_matmul(precision: Precision, device: torch.device) -> Iterator[None]:
    """Within the block, matmuls run at ``precision``'s setting; the process's own comes back after.

    TF32 off makes fp32 a true baseline (on CPU too: ``"high"`` lets oneDNN use reduced
    precision where the CPU has it). The setting is process-wide, so the trainer holds it
    only for the length of fit/evaluate/predict: a notebook's own choice survives.

    Usage: ``with configure_matmul(precision, device): model(x)``
    """
    saved = _matmul_state()
    torch.set_float32_matmul_precision("high" if precision.tf32 else "highest")
    if device.type == "cuda":
        torch.backends.cudnn.allow_tf32 = precision.tf32
    try:
        yield
    finally:
        _restore_matmul_state(saved)


def _matmul_state() -> tuple:
    backends = torch.backends
    try:
        legacy = torch.get_float32_matmul_precision()
    except RuntimeError:  # the process mixed torch's legacy and per-backend APIs: no legacy level
        legacy = None
    return (backends.cuda.matmul.fp32_precision, backends.mkldnn.matmul.fp32_precision,
            backends.cudnn.allow_tf32, legacy)


def _restore_matmul_state(saved: tuple) -> None:
    # Per-backend values first (set_float32_matmul_precision wrote those); they restore an
    # untouched process exactly. Where the legacy level then reads differently (or not at
    # all, as torch refuses after a per-backend write), the legacy call that set it does.
    cuda_matmul, mkldnn_matmul, cudnn_tf32, legacy = saved
    torch.backends.cuda.matmul.fp32_precision = cuda_matmul
    torch.backends.mkldnn.matmul.fp32_precision = mkldnn_matmul
    if legacy is not None:
        try:
            same = torch.get_float32_matmul_precision() == legacy
        except RuntimeError:
            same = False
        if not same:
            torch.set_float32_matmul_precision(legacy)
    torch.backends.cudnn.allow_tf32 = cudnn_tf32


def _autocast_runs(device: torch.device, dtype: torch.dtype) -> bool:
    # Some builds list a device type as autocast-capable yet reject a dtype on it;
    # a 2x2 matmul finds out at start-up instead of at the first batch.
    try:
        with torch.autocast(device.type, dtype=dtype):
            a = torch.ones(2, 2, device=device)
            (a @ a).sum().item()
        return True
    except (RuntimeError, AssertionError, ValueError):
        return False
