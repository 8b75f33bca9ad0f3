"""Probe results made by hand: what a probe of a machine would have cached, for tests of what runs make of it;
and a machine simulated in this process (``simulate_cpu``).

Usage: ``fake_result(bf16_step_s=0.25).step_ratios()  # {"bf16": 2.0}``
"""

from __future__ import annotations

from mixft.report.probe_result import PrecisionProbe, ProbeResult
from mixft.runs.probe import _fill_ratios, recommend  # the ratios and the recommendation probe() fills in

NO_AMX = {"amx_bf16": False, "avx512_bf16": False, "avx512_fp16": False}


def fake_hardware(flags=NO_AMX, torch_version="2.13.0+cpu"):
    return {
        "device": "cpu",
        "cpu": {
            "model": "Intel(R) Xeon(R) Processor @ 2.50GHz",
            "cores": 2,
            "flags": dict(flags),
            "source": "/proc/cpuinfo",
        },
        "gpu": None,
        "torch": torch_version,
        "torch_threads": 2,
        "cuda": None,
        "python": "3.11.7",
        "os": "Linux",
    }


def simulate_cpu(monkeypatch, bf16: bool, fp16: bool = False, amx: bool = False) -> None:
    """This process answers as a CPU where torch says ``bf16``/``fp16`` are native, and whose /proc/cpuinfo lists
    amx_bf16 (with avx512_bf16 and avx512_fp16) when ``amx``."""
    from mixft.amp import hardware

    monkeypatch.setattr(hardware, "native_precisions", lambda device: {"bf16": bf16, "fp16": fp16})
    cpu = fake_hardware(dict.fromkeys(NO_AMX, amx))["cpu"]
    monkeypatch.setattr(hardware, "describe_cpu", lambda *args, **kwargs: dict(cpu))


def row(name, step_s, matmul_gflops, skipped=None):
    times = [] if step_s is None else [step_s * 2, step_s, step_s * 1.1, step_s * 0.9]
    return PrecisionProbe(
        name,
        step_s=step_s,
        step_times_s=times,
        warmup_steps=1 if times else 0,
        matmul_flops_per_s=matmul_gflops * 1e9,
        skipped=skipped,
    )


def fake_result(bf16_step_s: float, *, flags=NO_AMX, torch_version="2.13.0+cpu") -> ProbeResult:
    """fp32 at 0.5 s/step and 50 GFLOP/s; bf16 at ``bf16_step_s`` and 26 GFLOP/s; fp16 not timed."""
    rows = [
        row("fp32", 0.5, 50.0),
        row("bf16", bf16_step_s, 26.0),
        row("fp16", None, 4.0, skipped="about 70 s for a warm-up and 3 steps: over the 30 s budget"),
    ]
    _fill_ratios(rows)
    recommended, reason = recommend(rows)
    return ProbeResult(
        recipe="bert-sst2",
        model="tiny-bert",
        dataset="generated (32 train / 8 eval)",
        device="cpu",
        hardware=fake_hardware(flags, torch_version),
        batch={"shape": [32, 25], "samples": 32, "tokens": 411},
        matmul_shapes=[{"rows": 800, "in": 384, "out": 1536, "bias": True, "calls": 6}],
        rows=rows,
        recommended=recommended,
        reason=reason,
        measured_at="2026-11-22T21:30:00+00:00",
        wall_s=24.3,
        time_budget_s=30.0,
    )
