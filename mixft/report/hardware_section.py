"""report.md's hardware section: the device, its CPU flags, and whether the AMP speed was measured.

Usage: ``text = render_hardware(doc.get("hardware"), summarize(doc), "fp32")``
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mixft.amp.hardware import CPU_FLAGS, hardware_line, native_line
from mixft.report.comparison_table import only_evaluated
from mixft.report.summary import (
    NA,
    number,
)


def _yes_no(value: Any) -> str:
    return "unknown" if value is None else ("yes" if value else "no")


def measured_speed_sentence(rows: Sequence[dict], baseline: str = "fp32", probe: dict | None = None) -> str:
    """What was measured about speed on this machine, in words: the runs' own speedups (the
    table's), and whether a probe is below. Where nothing was measured it says so and offers
    ``--probe``. Never a rule about CPU flags: a CPU without AMX has measured bf16 faster
    than fp32, so flags do not settle it.

    Usage: ``measured_speed_sentence(summarize(doc), probe=doc["hardware"].get("probe"))``
    -> ``"Measured in these runs: bf16 trained 1.78x faster than fp32 (the table's speedup)."``
    """
    said = []
    if only_evaluated(list(rows)):  # --eval-only measured inference, not training
        for r in rows:
            s = number(r.get("inference_speedup"))
            if r.get("is_baseline") or s is None:
                continue
            how = (
                f"{s:.2f}x faster than"
                if round(s, 2) > 1
                else f"at {s:.2f}x the speed of"
                if round(s, 2) < 1
                else "as fast as"
            )
            said.append(f"{r['precision']} evaluated {how} {baseline}")
        if said:
            return (
                f"Measured in these runs: {'; '.join(said)} (inference on the eval set, the table's inference "
                "speedup; nothing was trained)."
            )
    for r in rows:
        s = number(r.get("speedup"))
        if r.get("is_baseline") or s is None:
            continue
        if round(s, 2) > 1:
            said.append(f"{r['precision']} trained {s:.2f}x faster than {baseline}")
        elif round(s, 2) < 1:
            said.append(f"{r['precision']} trained at {s:.2f}x {baseline}'s speed, slower")
        else:
            said.append(f"{r['precision']} trained as fast as {baseline} (1.00x)")
    probed = isinstance(probe, dict) and bool(probe)
    if said:
        per_sample = any(r.get("speedup_basis") == "samples_per_s" for r in rows if not r.get("is_baseline"))
        basis = (
            "mean train time ratio, or samples/s ratio between runs of unequal steps"
            if per_sample
            else "mean train time ratio"
        )
        text = f"Measured in these runs: {'; '.join(said)} (the table's speedup, {basis})."
        return text + (" The probe below timed single training steps on this machine." if probed else "")
    if probed:
        return "These runs have no speed ratio to compare; the probe below measured one on this machine."
    return (
        "Nothing in these results measured one precision's speed against another on this machine: "
        "`--probe` measures it (about 30 s), or `--compare fp32,bf16` trains both."
    )


def render_hardware(hw: dict | None, rows: Sequence[dict] = (), baseline: str = "fp32") -> str | None:
    """The "Hardware" section: the machine in one line, its CPU flags as context, and what was
    measured about speed here (``rows``: ``summarize``'s, for the runs' own speedups; the
    record's ``probe``). None without a ``hardware`` record (older documents).

    Usage: ``render_hardware(doc.get("hardware"), summarize(doc))``
    """
    if not isinstance(hw, dict) or not hw:
        return None
    lines = ["## Hardware", ""]
    cpu = hw.get("cpu") if isinstance(hw.get("cpu"), dict) else {}
    try:
        lines += [hardware_line(hw), ""]
    except (KeyError, TypeError, AttributeError):  # a record from another version: say what is there
        lines += [str(cpu.get("model") or hw.get("device") or "machine not described"), ""]
    facts = []
    if hw.get("device"):
        facts.append(f"device `{hw['device']}`")
    if hw.get("torch"):
        threads = f" ({hw['torch_threads']} threads)" if hw.get("torch_threads") else ""
        facts.append(f"torch {hw['torch']}{threads}")
    if hw.get("cuda"):
        facts.append(f"CUDA {hw['cuda']}")
    if hw.get("python"):
        facts.append(f"Python {hw['python']}")
    if facts:
        lines.append("- " + " · ".join(facts))
    flags = cpu.get("flags") if isinstance(cpu.get("flags"), dict) else {}
    lines.append(
        "- CPU flags (context for the figures, not a forecast of them): "
        + " · ".join(f"`{f}` {_yes_no(flags.get(f))}" for f in CPU_FLAGS)
    )
    if isinstance(hw.get("native"), dict):  # torch's own check: is there a hardware path (not how fast it is)
        lines.append(f"- Native in torch's check: {native_line(hw['native'])}")
    gpu = hw.get("gpu")
    if isinstance(gpu, dict):
        mem = number(gpu.get("memory_bytes"))
        lines.append(
            f"- GPU {gpu.get('name', NA)}: compute capability {gpu.get('compute_capability', NA)} · "
            f"TF32 {_yes_no(gpu.get('tf32'))} · bf16 {_yes_no(gpu.get('bf16'))}"
            + (f" · {mem / 2**30:.0f} GiB" if mem else "")
        )
    lines.append("")
    lines.append(
        f"{measured_speed_sentence(rows, baseline, hw.get('probe'))} CPU flags alone do not settle whether "
        "mixed precision is faster, so only a measurement on this machine tells; a figure from one machine "
        "is not a fact about another."
    )
    return "\n".join(lines)
