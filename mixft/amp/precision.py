"""The precision policy: the one place that maps a name to autocast dtype, GradScaler and TF32.

| name | autocast dtype | GradScaler | where                                              |
|------|----------------|------------|----------------------------------------------------|
| fp32 | none           | off        | everywhere (TF32 matmuls off: the true baseline)   |
| tf32 | none           | off        | CUDA Ampere+ (TF32 matmuls on)                     |
| fp16 | float16        | on         | CUDA; on CPU it runs, at a speed that depends on the CPU |
| bf16 | bfloat16       | off        | CUDA Ampere+, CPU                                  |
| bf16-pure | bfloat16  | off        | as bf16; weights, gradients, optimizer state bf16, compensated optimizer |
| bf16-true | bfloat16  | off        | as bf16-pure without compensation (on request; warns: updates are lost) |

The two pure rows hold the model itself in ``param_dtype`` (the trainer casts it) and need
an optimizer that keeps what bf16 rounding drops (``compensated``; mixft.train.pure_bf16).

``amp`` names the device's mixed precision: fp16 on CUDA, bf16 on CPU (what ``--compare``
and ``--probe`` try). Whether an ``--amp`` *run* (or ``Trainer(precision="amp")``) uses it
is the policy of ``choose_precision``, decided once per run from facts it is handed (torch's native
bf16/fp16 check, a probe cached for this machine), never from a rule about CPU flags:
on a CPU, bf16 only where torch says it is native and no probe measured it slower (a run
measures first where nothing is cached: ``mixft.runs.plan.measures_first``).
Nothing else in mixft turns a string into a dtype; unsupported combinations raise
``UsageError`` here, at start-up, never mid-run.

Usage::

    device = resolve_device("auto")
    precision = resolve_precision("amp", device)   # Precision(name='bf16', ...) on a CPU with native bf16
    choice = choose_precision("amp", "cpu", {"bf16": False, "cpu_capability": "AVX2", "via": "oneDNN"})
    choice.precision, choice.notice   # 'fp32', 'notice: --amp chose fp32: this CPU has no native bf16 ...'
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from mixft.amp import hardware
from mixft.amp.hardware import DEVICE_CHOICES, resolve_device  # noqa: F401 (the device half of the policy, kept importable here)
from mixft.errors import UsageError
from mixft.log import logger


@dataclass(frozen=True)
class Precision:
    """How one run computes: the switches are flags, so fp32/fp16/bf16 share one code path."""

    name: str
    autocast_dtype: torch.dtype | None  # None: no autocast, parameters' own dtype (fp32)
    grad_scaler: bool  # fp16's narrow exponent range needs loss scaling; bf16's does not
    tf32: bool = False  # let CUDA matmuls/convolutions use TF32 tensor cores
    # Pure low precision: the trainer casts the model's floating parameters and buffers to
    # this dtype (None: the model's own fp32, autocast casting per op).
    param_dtype: torch.dtype | None = None
    compensated: bool = False  # the optimizer must keep what rounding bf16 weights drops (Kahan)

    def __post_init__(self) -> None:
        # GradScaler unscales into the parameters' own gradients: it needs fp32 master weights.
        if self.param_dtype is not None and self.grad_scaler:
            raise UsageError(
                f"precision {self.name}: a GradScaler (fp16's loss scaling) needs fp32 master weights, "
                f"but this precision holds the weights in {str(self.param_dtype).removeprefix('torch.')}"
            )
        if self.compensated and self.param_dtype is None:
            raise UsageError(f"precision {self.name}: compensation is for low-precision weights (set param_dtype)")

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
    # autocast stays on: its fp32 list (the losses) still runs in fp32.
    "bf16-pure": Precision(
        "bf16-pure", torch.bfloat16, grad_scaler=False, param_dtype=torch.bfloat16, compensated=True
    ),
    "bf16-true": Precision("bf16-true", torch.bfloat16, grad_scaler=False, param_dtype=torch.bfloat16),
}

# The hardware-support key (mixft.hardware.native_precisions) of each low-precision dtype.
NATIVE_KEY = {torch.bfloat16: "bf16", torch.float16: "fp16"}

# The mixed precision of each device type: what "amp" names, and what an --amp run uses
# where choose_precision finds it native and not measured slower.
AMP_DEFAULT = {"cuda": "fp16", "cpu": "bf16"}


def amp_precision_names(device: torch.device) -> list[str]:
    """The mixed precisions this device can run, best first (what --compare tries by default)."""
    if device.type == "cuda":
        names = ["fp16"]
        if torch.cuda.is_bf16_supported(including_emulation=False):
            names.append("bf16")
        return names
    return [AMP_DEFAULT.get(device.type, "bf16")]


def precision_row(name: str, device_type: str) -> Precision:
    """The table's row for ``name`` ("amp": the device type's mixed precision, as ``--compare`` measures it),
    not yet checked against a device (``resolve_precision`` checks it): what a check before any device
    work reads the flags of. Raises UsageError for a name the table does not have.

    Usage: ``precision_row("amp", "cpu").autocast_dtype  # torch.bfloat16``
    """
    name = name.lower()
    if name == "amp":
        name = AMP_DEFAULT.get(device_type)
        if name is None:
            raise UsageError(f"--amp: no mixed precision is defined for device type {device_type!r}")
    if name not in PRECISIONS:
        raise UsageError(f"unknown precision {name!r}; choose one of: {', '.join(PRECISIONS)}")
    return PRECISIONS[name]


def resolve_precision(name: str | Precision | None, device: torch.device, *, policy: bool = True) -> Precision:
    """Validate ``name`` ("amp", "fp32", "tf32", "fp16", "bf16", "bf16-pure", "bf16-true") for ``device``.

    "amp" with ``policy`` (the default): ``choose_precision``'s policy handed torch's native check
    (``hardware.native_precisions``; no probe: a library caller names no recipe or model to look one
    up or measure), its notice logged. So ``Trainer(precision="amp")`` on a CPU without native bf16
    trains in fp32, as ``--amp`` does; where torch says bf16 is native it trains bf16 unmeasured,
    where an ``--amp`` run (``mixft.run``) measures first (``mixft.runs.plan.measures_first``).
    ``policy=False``: the device's mixed precision as it is (fp16 on CUDA, bf16 on CPU), what
    ``--compare`` and ``--probe`` measure.
    Raises UsageError with a one-line reason when the device cannot run it.

    Usage: ``resolve_precision("amp", torch.device("cpu"))  # bf16 where native, else fp32 with a notice``
    """
    if isinstance(name, Precision):
        precision = name
    else:
        name = (name or "fp32").lower()
        if name == "amp" and policy and device.type in AMP_DEFAULT:
            native = hardware.native_precisions(device)
            choice = choose_precision("amp", device.type, native)
            notice = choice.notice
            if notice is None and device.type == "cpu" and choice.precision != "fp32":  # torch's word, unmeasured
                notice = (
                    f'notice: precision "amp" is {choice.precision} on torch\'s word that this CPU runs it natively '
                    f"({native_evidence(native, choice.precision)}), not measured to train faster here: --probe or "
                    "mixft.run_probe measures it (an --amp run, or mixft.run, measures before it chooses)"
                )
            if notice:
                logger.warning(notice)
            name = choice.precision
        precision = precision_row(name, device.type)

    if precision.tf32:
        if device.type != "cuda":
            raise UsageError(
                f"precision tf32 needs a CUDA GPU (Ampere or newer); device is {device.type}: use fp32 or bf16"
            )
        if torch.cuda.get_device_capability(device)[0] < 8:
            raise UsageError("precision tf32 needs an Ampere or newer GPU (compute capability 8.0+); use fp32 or fp16")
    if precision.autocast_dtype is not None:
        if not torch.amp.is_autocast_available(device.type):
            raise UsageError(f"precision {precision.name}: autocast is not available on device type {device.type!r}")
        if precision.autocast_dtype == torch.bfloat16 and device.type == "cuda":
            if not torch.cuda.is_bf16_supported(including_emulation=False):
                if precision.param_dtype is not None:
                    raise UsageError(
                        f"precision {precision.name} needs a GPU with native bf16 (Ampere or newer); "
                        "use fp16 (with loss scaling) or fp32 here"
                    )
                raise UsageError("precision bf16 needs an Ampere or newer GPU; use fp16 (with loss scaling) here")
        if not _autocast_runs(device, precision.autocast_dtype):
            raise UsageError(
                f"precision {precision.name} is not supported by autocast on {device.type} in this torch build"
            )
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


class PrecisionChoice(NamedTuple):
    """What one run trains in and why: results.json's ``precision`` and ``precision_reason``."""

    precision: str  # the precision the run uses
    reason: str  # one sentence: why this one
    notice: str | None = None  # the one line to show before any work; None: nothing to warn about


def choose_precision(
    requested: str,
    device_type: str,
    native: Mapping[str, Any] | None = None,
    *,
    probe_ratios: Mapping[str, float] | None = None,
    probe_date: str | None = None,
    option: str | None = None,
    comparing: bool = False,
) -> PrecisionChoice:
    """The precision a run of ``requested`` ("amp" or a name) uses, with its reason: the ``--amp`` policy.

    Pure: every fact is an argument. ``native``: torch's native bf16/fp16 check
    (``mixft.amp.hardware.native_precisions``: ``{"bf16", "fp16", "via", "cpu_capability",
    "compute_capability"}``). ``probe_ratios``: a probe of this machine cached for this
    recipe and model, ``{precision: fp32 step time / its step time}`` (None: never probed),
    measured on ``probe_date``. ``option``: how the user asked ("--amp", "--precision bf16",
    "--compare fp32,bf16"), for the words. ``comparing``: part of a ``--compare``.

    ``--amp`` (not comparing): on CUDA fp16 (with a GradScaler). On a CPU bf16 only where
    torch says it is native and no cached probe measured it slower than fp32 per training
    step; otherwise fp32, with a notice saying why and that ``--precision bf16`` forces it. (Handed no
    probe, it decides on torch's word; ``make_plan`` measures first where it can: ``measures_first``.)
    A name, and "amp" in a comparison (the device's mixed precision), is honoured as asked;
    the notice then says where it runs emulated or measured slower.

    Usage: ``choose_precision("amp", "cpu", hw["native"], probe_ratios={"bf16": 0.6}, probe_date="2026-11-25")``
    """
    native = native or {}
    ratios = dict(probe_ratios or {})
    if requested == "amp" and not comparing:
        return _amp_choice(device_type, native, ratios, probe_date)
    name = AMP_DEFAULT.get(device_type, requested) if requested == "amp" else requested
    option = option or f"--precision {name}"
    reason = f"{name} as asked ({option})"
    ratio = ratios.get(name) if name != "fp32" else None
    measured = _measured(name, ratio, probe_date)
    # bf16-pure/bf16-true compute in bf16 as bf16 does: the same hardware question.
    row = PRECISIONS.get(name)
    key = NATIVE_KEY.get(row.autocast_dtype) if row is not None else None
    if device_type == "cpu" and key is not None and native.get(key) is False:
        lacks = f"this CPU has no native {key} ({native_evidence(native, key)})"
        also = f" and {measured}" if measured else ""
        notice = (
            f"notice: {lacks}: {option} runs it emulated, as asked{also}; the estimate after the first "
            "steps says how long it takes"
        )
        return PrecisionChoice(name, f"{reason}; {lacks}, so it runs emulated{also}", notice)
    if ratio is not None and ratio < 1.0 and not comparing:  # a comparison measures exactly this: no advice
        faster = max(ratios.items(), key=lambda item: item[1], default=("fp32", 1.0))
        faster_name = faster[0] if faster[1] > 1.0 and faster[0] != name else "fp32"
        notice = (
            f"notice: {measured} on this {_where(device_type)}; {option} keeps {name} as asked; "
            f"--precision {faster_name} would be faster"
        )
        return PrecisionChoice(name, f"{reason}; {measured}", notice)
    if name == "fp16" and device_type == "cpu":
        notice = precision_notice(PRECISIONS["fp16"], torch.device("cpu"), measured=ratio is not None)
        return PrecisionChoice(name, reason + (f"; {measured}" if measured else ""), notice)
    return PrecisionChoice(name, reason + (f"; {measured}" if measured else ""))


def _amp_choice(
    device_type: str, native: Mapping[str, Any], ratios: Mapping[str, float], probe_date: str | None
) -> PrecisionChoice:
    """``--amp``'s policy (see ``choose_precision``)."""
    mixed = AMP_DEFAULT.get(device_type)
    if mixed is None:
        raise UsageError(f"--amp: no mixed precision is defined for device type {device_type!r}")
    ratio = ratios.get(mixed)
    measured = _measured(mixed, ratio, probe_date)
    if device_type == "cuda":
        bf16 = (
            "bf16 is native here too: --precision bf16 uses it" if native.get("bf16") else "this GPU has no native bf16"
        )
        reason = f"--amp uses fp16 on CUDA (with loss scaling; {bf16})"
        if ratio is not None and ratio < 1.0:
            reason = f"{reason}, but {measured}: --precision fp32 would be faster"
            return PrecisionChoice("fp16", reason, f"notice: {reason}")
        return PrecisionChoice("fp16", reason + (f"; {measured}" if measured else ""))
    if native.get(mixed) is not True:
        lacks = (
            f"this CPU has no native {mixed} ({native_evidence(native, mixed)})"
            if native.get(mixed) is False
            else f"torch cannot tell whether this CPU has native {mixed} ({native_evidence(native, mixed)})"
        )
        emulated = f", so {mixed} would run emulated" if native.get(mixed) is False else ""
        why = f" and {measured}" if measured else emulated
        reason = f"--amp chose fp32: {lacks}{why}; --precision {mixed} forces {mixed}"
        return PrecisionChoice("fp32", reason, f"notice: {reason}")
    if ratio is not None and ratio < 1.0:
        reason = f"--amp chose fp32: {measured} on this CPU; --precision {mixed} forces {mixed}"
        return PrecisionChoice("fp32", reason, f"notice: {reason}")
    reason = f"--amp chose {mixed}: this CPU runs {mixed} natively ({native_evidence(native, mixed)})"
    return PrecisionChoice(mixed, reason + (f" and {measured}" if measured else ""))


def _measured(name: str, ratio: float | None, date: str | None) -> str | None:
    """``"the probe of 2026-11-25 measured bf16 at 0.05x fp32 per training step"``; None: not measured."""
    if ratio is None:
        return None
    return f"the probe of {date or 'an unknown date'} measured {name} at {ratio:.2f}x fp32 per training step"


def native_evidence(native: Mapping[str, Any], name: str) -> str:
    """torch's words for ``name``'s hardware path: ``"torch: CPU capability AVX2, oneDNN has no bf16 here"``."""
    if native.get("via") == "CUDA":
        return f"torch: compute capability {native.get('compute_capability')}"
    if native.get(name) is None:
        return "no oneDNN check in this torch build"
    has = "has" if native.get(name) else "has no"
    return f"torch: CPU capability {native.get('cpu_capability')}, oneDNN {has} {name} here"


def _where(device_type: str) -> str:
    return "GPU" if device_type == "cuda" else "CPU"


def fsdp_policies(precision: Precision) -> tuple[Any, Any]:
    """FSDP2's mixed-precision policies for ``precision``: ``(blocks_and_root, fp32_units)``.

    fp32/tf32: torch's default policy (weights gathered as stored, fp32) and no fp32 units.
    fp16/bf16: the blocks and the root gather their weights in the autocast dtype
    (``param_dtype``) and reduce gradients in fp32 (``reduce_dtype``), so the shards and their
    gradients stay fp32; the fp32 units (norms, embeddings: ``mixft.train.fsdp.fp32_units``) keep
    ``param_dtype=float32``. Why both engines under FSDP: autocast alone over fp32 shards
    saves a half-precision copy of every weight for backward on every rank (docs/fsdp.md).

    Usage: ``blocks, units = fsdp_policies(resolve_precision("bf16", device))``
    """
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if precision.autocast_dtype is None:
        return MixedPrecisionPolicy(), None
    return (
        MixedPrecisionPolicy(param_dtype=precision.autocast_dtype, reduce_dtype=torch.float32),
        MixedPrecisionPolicy(param_dtype=torch.float32, reduce_dtype=torch.float32),
    )


@contextlib.contextmanager
def configure_matmul(precision: Precision, device: torch.device) -> Iterator[None]:
    """Within the block, matmuls run at ``precision``'s setting; the process's own comes back after.

    TF32 off makes fp32 a true baseline (on CPU too: ``"high"`` lets oneDNN use reduced
    precision where the CPU has it). The setting is process-wide, so the trainer holds it
    only for the length of fit/evaluate/predict: a notebook's own choice survives.

    Usage: ``with configure_matmul(precision, device): model(x)``
    """
    with matmul_settings_kept():
        torch.set_float32_matmul_precision("high" if precision.tf32 else "highest")
        if device.type == "cuda":
            torch.backends.cudnn.allow_tf32 = precision.tf32
        yield


@contextlib.contextmanager
def matmul_settings_kept() -> Iterator[None]:
    """The process's matmul settings (fp32 precision per backend, cuDNN's TF32, torch's legacy level) as
    they were before the block, whatever it sets.

    Read through the per-backend API: the legacy getters (``torch.get_float32_matmul_precision``,
    ``torch.backends.cuda.matmul.allow_tf32``) raise once a process has set TF32 through
    ``torch.backends.cuda.matmul.fp32_precision``, the API PyTorch now documents.

    Usage: ``with matmul_settings_kept(): torch.set_float32_matmul_precision("high")``
    """
    saved = _matmul_state()
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
    return (
        backends.cuda.matmul.fp32_precision,
        backends.mkldnn.matmul.fp32_precision,
        backends.cudnn.allow_tf32,
        legacy,
    )


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
