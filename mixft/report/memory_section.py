"""report.md's memory section: saved activations, memory held, and the process's peak, per precision.

Usage: ``text = render_memory(doc, baseline="fp32")``
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mixft.report.comparison_table import cell
from mixft.report.summary import (
    MEMORY_PARTS,
    MIB,
    NA,
    memory_label,
    memory_rows,
    number,
)


def lighter_sentence(precision: str, saved: float, base_saved: float, baseline: str = "fp32") -> str:
    """The headline "lighter" figure in words, from two measured saved-activation peaks.

    Usage: ``lighter_sentence("bf16", 83, 100)`` -> ``"bf16 saved 0.83x the activation bytes of fp32: 17% lighter"``
    """
    ratio = saved / base_saved
    pct = round(abs(1 - ratio) * 100)
    if pct == 0:
        how = "the same within 1%"
    else:
        how = f"{pct}% {'lighter' if ratio < 1 else 'heavier'}"
    return f"{precision} saved {ratio:.2f}x the activation bytes of {baseline}: {how}"


def held_sentence(precision: str, held: float, base_held: float, baseline: str = "fp32") -> str:
    """Parameters + gradients + optimizer state in words, from two measured sums of bytes.

    Usage: ``held_sentence("bf16-pure", 227e6, 363e6)`` -> ``"bf16-pure holds 216.5 MiB in parameters,
    gradients and optimizer state against fp32's 346.2 MiB (0.63x)"``
    """
    return (
        f"{precision} holds {held / MIB:.1f} MiB in parameters, gradients and optimizer state against "
        f"{baseline}'s {base_held / MIB:.1f} MiB ({held / base_held:.2f}x)"
    )


def _held(row: Mapping[str, Any] | None) -> float | None:
    """A memory row's parameters + gradients + optimizer state (None when one is missing)."""
    parts = [number((row or {}).get(key)) for key in ("parameters", "gradients", "optimizer_state")]
    return None if any(p is None for p in parts) else float(sum(parts))


def _mib_of(value: float | None) -> str:
    return NA if value is None else f"{value / MIB:.1f}"


def _shares(parts: Sequence[tuple[str, float]], total: float) -> str:
    return ", ".join(f"{name} {b / MIB:.1f} MiB" + (f" ({b / total:.0%})" if total else "") for name, b in parts)


def fresh_rss_steps(runs: Sequence[dict]) -> int | None:
    """The steps every CPU run's fresh process trained (``memory.device_figure_steps``), when all
    CPU-RSS runs were measured that way with the same count; else None (in-process figures)."""
    cpu = [r for r in runs if r.get("peak_memory_kind") == "cpu_rss"]
    scopes = {
        ((r.get("memory") or {}).get("device_figure_scope"), (r.get("memory") or {}).get("device_figure_steps"))
        for r in cpu
    }
    if len(scopes) == 1:
        scope, steps = scopes.pop()
        if scope == "fresh_process" and steps:
            return int(steps)
    return None


def render_memory(doc: dict, baseline: str = "fp32") -> str | None:
    """The "Memory breakdown" section from the runs' ``memory`` records (see
    ``mixft.amp.memory``): a table per precision, the saved-activation ratio vs ``baseline`` in
    words, and the saved bytes by dtype and by op. None when no run has a record.

    Usage: ``render_memory(doc)``
    """
    rows = memory_rows(doc)
    if not rows:
        return None
    base = next((r for r in rows if r["precision"] == baseline), None)
    lines, words = _table(rows, base, baseline)
    held = [
        held_sentence(r["precision"], _held(r), _held(base), baseline)
        for r in rows
        if base is not None and r is not base and _held(r) and _held(base) and abs(_held(r) / _held(base) - 1) >= 0.01
    ]
    if words:
        lines += [
            f"**Lighter?** {'; '.join(words)} (peak bytes autograd saved for backward in one training "
            "step, the part of memory a precision changes).",
            "",
        ]
    if held:  # pure bf16 (mixft.train.pure_bf16) holds the weights, gradients and optimizer state themselves in bf16
        lines += [
            f"**Held?** {'; '.join(held)} (the bytes of those tensors as held after training, a "
            "compensation buffer included).",
            "",
        ]
    autocast = (
        "Autocast changes the dtype of what the forward computes, not of the parameters, gradients or "
        "optimizer state"
        + ("; the precisions under Held? keep those themselves in a lower precision." if held else ".")
    )
    lines.append(
        "- Measured on one forward + backward of a training batch: every storage autograd saved, "
        "counted once, autocast's cached low-precision weight copies included; the parameters' own "
        f"storages are under parameters. {autocast}"
    )
    lines += _saved_breakdown(rows)
    if any(r["device_figure_kind"] == "cpu_rss" for r in rows):
        fresh = fresh_rss_steps(doc.get("runs") or [])
        where = (
            f"the peak RSS of a fresh process that built the run's model and data and trained its first {fresh} steps"
            if fresh
            else "the run's peak RSS"
        )
        lines.append(
            f"- The device figure on CPU is {where}: the whole process (runtime, libraries, data), not tensors alone."
        )
    return "\n".join(lines)


def _table(rows: list[dict], base: dict | None, baseline: str) -> tuple[list[str], list[str]]:
    """(the section's heading and table, one line per precision; the "lighter" sentences): one loop,
    since a row's saved-vs-baseline cell and its sentence come from the same two figures."""
    kinds = {r["device_figure_kind"] for r in rows if r["device_figure"] is not None}
    kind = memory_label(next(iter(kinds))) if len(kinds) == 1 and None not in kinds else "device"
    header = [
        "precision",
        *(f"{label} (MiB)" for _, label in MEMORY_PARTS),
        f"device figure (MiB, {kind})",
        f"saved vs {baseline}",
    ]
    lines = ["## Memory breakdown", "", "| " + " | ".join(header) + " |", "|---" + "|---:" * (len(header) - 1) + "|"]
    words = []
    for r in rows:
        ratio = NA
        if base is not None and r is not base and r["saved_activations_peak"] and base["saved_activations_peak"]:
            ratio = f"{r['saved_activations_peak'] / base['saved_activations_peak']:.2f}×"
            words.append(
                lighter_sentence(r["precision"], r["saved_activations_peak"], base["saved_activations_peak"], baseline)
            )
        elif r is base:
            ratio = "baseline"
        cells = [r["precision"], *(_mib_of(r[key]) for key, _ in MEMORY_PARTS), _mib_of(r["device_figure"]), ratio]
        lines.append("| " + " | ".join(cell(c) for c in cells) + " |")
    lines.append("")
    return lines, words


def _saved_breakdown(rows: list[dict]) -> list[str]:
    """One bullet per precision: its saved bytes by dtype and its top three ops (none where it has neither)."""
    lines = []
    for r in rows:
        dtypes = list(r["saved_by_dtype"].items())
        ops = [(str(op), float(b)) for op, b in r["saved_by_op"][:3] if number(b) is not None]
        total = r["saved_activations_peak"] or 0
        parts = []
        if dtypes:
            parts.append("by dtype: " + _shares(dtypes, total))
        if ops:
            parts.append("top ops: " + _shares(ops, total))
        if parts:
            lines.append(f"- **{r['precision']}** saved " + " · ".join(parts) + ".")
    return lines
