"""Which machine produced a figure: CPU model and the flags that decide AMP's speed, GPU, torch.

Machines of one kind give opposite answers to "is mixed precision faster?", and the CPU
flags do not settle it (two CPUs with avx512_bf16 and no AMX measured a bf16 step 0.64x
and ~1.7x fp32). So mixft measures, and every figure it reports carries the hardware that
produced it, flags included as context::

    hw = describe_hardware("cpu")
    hardware_line(hw)
    # 'Intel(R) Xeon(R) Processor @ 2.50GHz, 2 cores, flags: avx512_bf16 (no amx_bf16, no avx512_fp16)'

Whether the device runs bf16 and fp16 natively is a different kind of fact: torch's own
answer (``native_precisions``: oneDNN's check and the CPU capability ATen dispatches to,
or the GPU's), recorded as ``hardware["native"]`` and shown in every run header::

    native_line(describe_hardware("cpu")["native"])
    # 'bf16: yes (oneDNN; CPU capability AVX512), fp16: yes'

It says whether a hardware path exists, never how fast it is: that is measured.

The description is plain JSON-ready data (results.json ``hardware``). Reading it costs
one small file read and never starts a CUDA context on a CPU run.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

from mixft.errors import UsageError

# The CPU flags recorded beside every figure as context: AMX tiles for bf16 matmuls, AVX512
# instructions for bf16 and fp16 arithmetic. They are what oneDNN can use, not a forecast:
# how fast autocast runs is measured (mixft.runs.probe, --compare).
CPU_FLAGS = ("amx_bf16", "avx512_bf16", "avx512_fp16")

CPUINFO = "/proc/cpuinfo"

# cpuinfo keys that name the processor: x86 ("model name"), some ARM kernels
# ("Hardware", "Processor"), s390x/MIPS ("cpu model"). The first one present wins.
_MODEL_KEYS = ("model name", "hardware", "processor", "cpu model")
_FLAG_KEYS = ("flags", "features")  # x86, ARM


def parse_cpuinfo(text: str) -> dict[str, Any]:
    """``/proc/cpuinfo`` text -> ``{"model": str | None, "flags": {flag: bool}}`` (first CPU only).

    Flags are None when the text lists no flags at all (nothing can be said).

    Usage: ``parse_cpuinfo(open("/proc/cpuinfo").read())["flags"]["amx_bf16"]``
    """
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        key = key.strip().lower()
        # A "processor" line that is only a number is the x86 CPU index, not a name.
        if not sep or key in fields or (key == "processor" and value.strip().isdigit()):
            continue
        fields[key] = value.strip()
    model = next((fields[k] for k in _MODEL_KEYS if fields.get(k)), None)
    flag_text = next((fields[k] for k in _FLAG_KEYS if k in fields), None)
    if flag_text is None:
        flags: dict[str, bool | None] = dict.fromkeys(CPU_FLAGS)
    else:
        present = set(flag_text.split())
        flags = {flag: flag in present for flag in CPU_FLAGS}
    return {"model": model, "flags": flags}


def describe_cpu(cpuinfo_path: str | os.PathLike = CPUINFO) -> dict[str, Any]:
    """The host CPU: model name, core count, the flags in ``CPU_FLAGS`` and where they came from.

    Without ``/proc/cpuinfo`` (macOS, Windows) the model comes from ``platform.processor()``
    and the flags are None: unknown, not absent.

    Usage: ``describe_cpu()["flags"]``
    """
    try:
        parsed = parse_cpuinfo(Path(cpuinfo_path).read_text(encoding="utf-8", errors="replace"))
        source = str(cpuinfo_path)
    except OSError:
        parsed, source = {"model": None, "flags": dict.fromkeys(CPU_FLAGS)}, "platform"
    model = parsed["model"] or platform.processor() or platform.machine() or "unknown CPU"
    cores = os.cpu_count()
    cpu = {"model": model, "cores": cores, "flags": parsed["flags"], "source": source}
    usable = usable_cores()
    if usable is not None and usable != cores:  # taskset, a container's cpuset: what the figures ran on
        cpu["usable_cores"] = usable
    return cpu


def usable_cores() -> int | None:
    """The CPUs this process may run on (its affinity: ``taskset``, a container's cpuset), None where unknown.

    ``os.cpu_count()`` counts the machine's; the speed figures come from these.
    """
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # macOS, Windows
        return None


def cores_text(cpu: dict[str, Any]) -> str:
    """``"2 cores"``, or ``"8 cores (2 usable by this process)"`` when the process is pinned to fewer."""
    if not cpu.get("cores"):
        return ""
    usable = cpu.get("usable_cores")
    return f"{cpu['cores']} cores" + (f" ({usable} usable by this process)" if usable else "")


# Where a run may train (``--device``; RunConfig.device).
DEVICE_CHOICES = ("auto", "cpu", "cuda")


def resolve_device(name="auto"):
    """``auto`` -> cuda when available, else cpu (a ``torch.device``). Asking for an absent CUDA is a UsageError.

    Here, with the machine's other facts, and not in ``mixft.amp.precision`` (which imports it):
    the precision policy asks this module what the machine can do, never the other way round.
    Usage: ``resolve_device("auto")``
    """
    import torch

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


def native_precisions(device) -> dict[str, Any]:
    """Whether ``device`` (a ``torch.device``) runs bf16 and fp16 natively, as torch itself says.

    The one place mixft reads these facts (tests simulate a machine by replacing this
    function). CPU: oneDNN's own checks (``torch.ops.mkldnn._is_mkldnn_bf16_supported``,
    ``_is_mkldnn_fp16_supported``: is there an instruction-set path for the dtype) and the
    capability ATen's kernels dispatch to (``torch.backends.cpu.get_cpu_capability``);
    without them autocast still runs the dtype, emulated. CUDA: ``is_bf16_supported(
    including_emulation=False)`` and the compute capability. A fact torch cannot give is None.

    Returns ``{"bf16": bool | None, "fp16": bool | None, "via": "oneDNN" | "CUDA" | None,
    "cpu_capability": str | None, "compute_capability": str | None}``.

    Usage: ``native_precisions(torch.device("cpu"))["bf16"]``
    """
    import torch

    facts: dict[str, Any] = {
        "bf16": None,
        "fp16": None,
        "via": None,
        "cpu_capability": None,
        "compute_capability": None,
    }
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        facts.update(
            via="CUDA",
            compute_capability=f"{major}.{minor}",
            bf16=bool(torch.cuda.is_bf16_supported(including_emulation=False)),
            fp16=(major, minor) >= (5, 3),
        )  # half-precision arithmetic arrived with sm_53
        return facts
    if device.type != "cpu":
        return facts
    try:
        facts["cpu_capability"] = str(torch.backends.cpu.get_cpu_capability())
    except (AttributeError, RuntimeError):
        pass
    try:  # private ops: a build without oneDNN lacks them (then: unknown, not "no")
        facts["bf16"] = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
        facts["fp16"] = bool(torch.ops.mkldnn._is_mkldnn_fp16_supported())
        facts["via"] = "oneDNN"
    except (AttributeError, RuntimeError):
        pass
    return facts


def describe_hardware(device=None, *, cpuinfo_path: str | os.PathLike = CPUINFO) -> dict[str, Any]:
    """The machine behind ``device`` ("cpu", "cuda", "auto", a ``torch.device``; None: "auto").

    Returns ``{"device", "cpu": describe_cpu(), "gpu": None | {name, compute_capability,
    tf32, bf16, memory_bytes}, "native": native_precisions(), "torch", "torch_threads",
    "cuda", "python", "os"}``.

    Usage: ``hardware_line(describe_hardware("cpu"))``
    """
    import torch

    dev = resolve_device("auto" if device is None else device)
    gpu = None
    if dev.type == "cuda":
        major, minor = torch.cuda.get_device_capability(dev)
        gpu = {
            "name": torch.cuda.get_device_name(dev),
            "compute_capability": f"{major}.{minor}",
            "tf32": major >= 8,  # TF32 tensor cores arrived with Ampere (8.0)
            "bf16": bool(torch.cuda.is_bf16_supported(including_emulation=False)),
            "memory_bytes": int(torch.cuda.get_device_properties(dev).total_memory),
        }
    return {
        "device": str(dev),
        "cpu": describe_cpu(cpuinfo_path),
        "gpu": gpu,
        "native": native_precisions(dev),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "os": platform.system(),
    }


def flags_text(flags: dict[str, bool | None]) -> str:
    """``"flags: avx512_bf16 (no amx_bf16, no avx512_fp16)"``; ``"flags: unknown"`` without cpuinfo."""
    known = {k: v for k, v in flags.items() if v is not None}
    if not known:
        return "flags: unknown"
    present = [k for k, v in known.items() if v]
    absent = [k for k, v in known.items() if not v]
    if not present:
        return f"flags: none of {', '.join(absent)}"
    return f"flags: {' '.join(present)}" + (f" (no {', no '.join(absent)})" if absent else "")


def hardware_line(hw: dict[str, Any]) -> str:
    """One line naming the machine, for run headers and docs.

    CPU: ``"Intel(R) Xeon(R) Processor @ 2.50GHz, 2 cores, flags: avx512_bf16 (no amx_bf16, no avx512_fp16)"``;
    GPU: ``"NVIDIA H100 80GB HBM3 (compute capability 9.0, TF32, bf16); host: <the CPU line>"``.

    Usage: ``hardware_line(describe_hardware())``
    """
    cpu = hw["cpu"]
    cores = f", {cores_text(cpu)}" if cpu.get("cores") else ""
    cpu_line = f"{cpu['model']}{cores}, {flags_text(cpu['flags'])}"
    gpu = hw.get("gpu")
    if not gpu:
        return cpu_line
    features = [f"compute capability {gpu['compute_capability']}"]
    features += [name for name, key in (("TF32", "tf32"), ("bf16", "bf16")) if gpu.get(key)]
    return f"{gpu['name']} ({', '.join(features)}); host: {cpu_line}"


def native_text(native: dict[str, Any] | None, name: str) -> str:
    """Whether ``name`` ("bf16", "fp16") is native, with torch's evidence, for headers and tables:
    ``"yes (oneDNN; CPU capability AVX512)"``, ``"no (emulated: CPU capability AVX2, oneDNN has
    no bf16 here)"``, ``"yes (compute capability 8.0)"``; ``"unknown"`` where torch could not say.

    Usage: ``native_text(hw["native"], "bf16")``
    """
    native = native or {}
    value = native.get(name)
    if value is None:
        return "unknown (this torch build cannot tell)" if native else "unknown"
    if name != "bf16":
        return "yes" if value else "no (emulated)"
    if native.get("via") == "CUDA":
        return f"{'yes' if value else 'no'} (compute capability {native.get('compute_capability')})"
    cap = native.get("cpu_capability")
    if value:
        return f"yes (oneDNN; CPU capability {cap})"
    return f"no (emulated: CPU capability {cap}, oneDNN has no bf16 here)"


def native_line(native: dict[str, Any] | None) -> str:
    """The run header's ``native`` line: ``"bf16: yes (oneDNN; CPU capability AVX512), fp16: yes"``.

    Usage: ``native_line(describe_hardware("cpu")["native"])``
    """
    return f"bf16: {native_text(native, 'bf16')}, fp16: {native_text(native, 'fp16')}"


def device_note(hw: dict[str, Any]) -> str | None:
    """The machine in a few words, as context beside a measured figure: ``"this CPU has no AMX"``,
    a GPU's name. A fact about the machine, never a reason given for a speed.

    None on a CPU whose flags are unknown.
    """
    gpu = hw.get("gpu")
    if gpu:
        return gpu["name"]
    amx = hw["cpu"]["flags"].get("amx_bf16")
    if amx is None:
        return None
    return "this CPU has AMX" if amx else "this CPU has no AMX"


def hardware_key(hw: dict[str, Any]) -> dict[str, Any]:
    """What must match for a measurement on one machine to stand for another: CPU model and
    flags, GPU name, torch version, device type, and torch's native bf16/fp16 and CPU
    capability (ATEN_CPU_CAPABILITY or ONEDNN_MAX_CPU_ISA change which kernels run on the
    same CPU). Core counts and threads may differ."""
    gpu = hw.get("gpu")
    native = hw.get("native") or {}
    return {
        "device": str(hw["device"]).split(":", 1)[0],
        "cpu_model": hw["cpu"]["model"],
        "cpu_flags": dict(sorted(hw["cpu"]["flags"].items())),
        "gpu": gpu["name"] if gpu else None,
        "torch": hw["torch"],
        "native": {k: native.get(k) for k in ("bf16", "fp16", "cpu_capability")},
    }
