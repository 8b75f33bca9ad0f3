"""Turn a results document (see :mod:`mixft.results`) into a comparison table and ``report.md``.

This module only *reads* results: every number it prints is taken from, or computed
from, the document it is given (means, sample standard deviations, differences and
ratios). Nothing is measured here and nothing is invented.

Usage::

    doc = json.loads(Path("runs/cmp/results.json").read_text())
    for row in summarize(doc):
        print(row["precision"], row["accuracy_mean"], row["speedup"])
    write_report(doc, "runs/cmp")          # report.md + PNG charts beside results.json

Conventions (kept the same everywhere):

* Runs are grouped by ``precision``; groups keep the order in which a precision first
  appears in ``doc["runs"]``. Within a group each run is one seed.
* ``*_std`` is the *sample* standard deviation (n-1) over the runs that have the value;
  it is ``None`` when fewer than two runs have it (one seed has no spread), and the
  markdown shows ``±`` only when it is not ``None``.
* Means skip runs whose value is null (e.g. ``peak_memory_bytes`` where the device
  could not tell); a mean is ``None`` when no run has the value.
* Comparisons are against the ``baseline`` precision (default ``fp32``): Δaccuracy is
  ``(mean accuracy - baseline mean accuracy) * 100`` points, speedup is
  ``baseline mean train time / mean train time`` and memory ratio is
  ``mean peak memory / baseline mean peak memory``. They are ``None`` (shown "n/a")
  when the baseline is absent, when either side lacks the value, or (memory) when the
  two sides measured different kinds of memory.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable, Sequence

from .atomic import write_text
from .log import logger

MIB = 2**20

#: Short names for ``peak_memory_kind`` used in table headers and cells.
MEMORY_KIND_LABELS = {"cpu_rss": "RSS", "cuda_max_allocated": "allocated"}

#: Title of each chart :func:`mixft.plots.write_plots` can write, by file name, in report order.
PLOT_TITLES = {
    "loss.png": "Training loss per step",
    "loss_scale.png": "GradScaler loss scale",
    "eval_accuracy.png": "Eval accuracy per epoch",
    "time_memory.png": "Train time and peak memory",
}


# ---------------------------------------------------------------------------- numbers


def _num(value: Any) -> float | None:
    """``value`` as a finite float, or None (null, NaN, inf, bool or non-numeric)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _mean(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def _std(values: Iterable[float | None]) -> float | None:
    """Sample standard deviation (n-1); None with fewer than two values."""
    vals = [v for v in values if v is not None]
    if len(vals) < 2:
        return None
    m = sum(vals) / len(vals)
    return math.sqrt(sum((v - m) ** 2 for v in vals) / (len(vals) - 1))


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den == 0:
        return None
    return num / den


def run_accuracy(run: dict) -> float | None:
    """A run's final accuracy: ``eval.accuracy``, else the last ``eval_history`` entry's."""
    acc = _num((run.get("eval") or {}).get("accuracy"))
    if acc is None:
        for entry in reversed(run.get("eval_history") or []):
            acc = _num(entry.get("accuracy"))
            if acc is not None:
                break
    return acc


def group_runs(doc: dict) -> dict[str, list[dict]]:
    """``doc["runs"]`` grouped by precision, in order of first appearance."""
    groups: dict[str, list[dict]] = {}
    for run in doc.get("runs") or []:
        groups.setdefault(str(run.get("precision", "?")), []).append(run)
    return groups


# ---------------------------------------------------------------------------- summarize


def summarize(doc: dict, baseline: str = "fp32") -> list[dict]:
    """One row per precision, aggregated over its runs (seeds). See the module docstring.

    Keys of each row: ``precision, is_baseline, autocast_dtype, grad_scaler, n_seeds,
    seeds, accuracy_n, accuracy_mean, accuracy_std, delta_accuracy_pts,
    train_time_s_mean, train_time_s_std, speedup, samples_per_s_mean,
    samples_per_s_std, peak_memory_n, peak_memory_bytes_mean, peak_memory_mib_mean,
    peak_memory_kind, memory_ratio, skipped_steps_mean, skipped_steps_total,
    final_loss_scale, final_loss_scale_min, final_loss_scale_max, steps,
    steps_total``.

    ``final_loss_scale`` is the mean over the runs that have one (None without a
    GradScaler); ``_min``/``_max`` give the spread across seeds. ``steps`` is the mean
    number of optimizer steps per run.
    """
    rows: list[dict] = []
    for precision, runs in group_runs(doc).items():
        accs = [run_accuracy(r) for r in runs]
        times = [_num(r.get("train_time_s")) for r in runs]
        sps = [_num(r.get("train_samples_per_s")) for r in runs]
        mems = [_num(r.get("peak_memory_bytes")) for r in runs]
        kinds = {r.get("peak_memory_kind") for r, m in zip(runs, mems) if m is not None}
        skipped = [_num(r.get("skipped_steps")) for r in runs]
        scales = [_num(r.get("final_loss_scale")) for r in runs]
        steps = [_num(r.get("steps")) for r in runs]
        present_scales = [s for s in scales if s is not None]
        present_skipped = [s for s in skipped if s is not None]
        present_steps = [s for s in steps if s is not None]
        mem_mean = _mean(mems)
        rows.append(
            {
                "precision": precision,
                "is_baseline": precision == baseline,
                "autocast_dtype": runs[0].get("autocast_dtype"),
                "grad_scaler": any(bool(r.get("grad_scaler")) for r in runs),
                "n_seeds": len(runs),
                "seeds": [r.get("seed") for r in runs],
                "accuracy_n": sum(a is not None for a in accs),
                "accuracy_mean": _mean(accs),
                "accuracy_std": _std(accs),
                "delta_accuracy_pts": None,
                "train_time_s_mean": _mean(times),
                "train_time_s_std": _std(times),
                "speedup": None,
                "samples_per_s_mean": _mean(sps),
                "samples_per_s_std": _std(sps),
                "peak_memory_n": sum(m is not None for m in mems),
                "peak_memory_bytes_mean": mem_mean,
                "peak_memory_mib_mean": mem_mean / MIB if mem_mean is not None else None,
                # None when unknown, or when seeds disagree on what was measured.
                "peak_memory_kind": kinds.pop() if len(kinds) == 1 else None,
                "memory_ratio": None,
                "skipped_steps_mean": _mean(skipped),
                "skipped_steps_total": int(sum(present_skipped)) if present_skipped else None,
                "final_loss_scale": _mean(scales),
                "final_loss_scale_min": min(present_scales) if present_scales else None,
                "final_loss_scale_max": max(present_scales) if present_scales else None,
                "steps": _mean(steps),
                "steps_total": int(sum(present_steps)) if present_steps else None,
            }
        )

    base = next((r for r in rows if r["is_baseline"]), None)
    if base is not None:
        for row in rows:
            if row["accuracy_mean"] is not None and base["accuracy_mean"] is not None:
                row["delta_accuracy_pts"] = (row["accuracy_mean"] - base["accuracy_mean"]) * 100
            row["speedup"] = _ratio(base["train_time_s_mean"], row["train_time_s_mean"])
            if row["peak_memory_kind"] is not None and row["peak_memory_kind"] == base["peak_memory_kind"]:
                row["memory_ratio"] = _ratio(row["peak_memory_bytes_mean"], base["peak_memory_bytes_mean"])
    return rows


# ---------------------------------------------------------------------------- formatting

NA = "n/a"


def _pm(mean: float | None, std: float | None, fmt: str) -> str:
    """``mean ± std`` (``±`` only when there is a spread, i.e. more than one seed)."""
    if mean is None:
        return NA
    return f"{mean:{fmt}}" if std is None else f"{mean:{fmt}} ± {std:{fmt}}"


def fmt_ratio(value: float | None) -> str:
    return NA if value is None else f"{value:.2f}×"


def fmt_delta(value: float | None) -> str:
    return NA if value is None else f"{value:+.2f}"


def fmt_scale(value: float | None) -> str:
    """Loss scales are usually powers of two: print them as integers when they are."""
    if value is None:
        return "—"
    return f"{value:.0f}" if value >= 1 and value == int(value) else f"{value:g}"


def _fmt_count(value: float) -> str:
    return f"{value:.0f}" if value == int(value) else f"{value:.1f}"


def _mem_label(kind: str | None) -> str:
    return MEMORY_KIND_LABELS.get(kind or "", kind or "")


def _seed_list(seeds: Sequence[Any]) -> str:
    return ", ".join(str(s) for s in seeds) if seeds else NA


def _distinct(runs: list[dict], key: str) -> list[str]:
    out: list[str] = []
    for r in runs:
        v = r.get(key)
        if v is not None and str(v) not in out:
            out.append(str(v))
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


# ---------------------------------------------------------------------------- markdown


def render_table(rows: list[dict], baseline: str = "fp32") -> str:
    """The comparison table (GitHub markdown) for ``summarize``'s rows."""
    mem_kinds = {r["peak_memory_kind"] for r in rows if r["peak_memory_kind"] is not None}
    one_kind = len(mem_kinds) <= 1
    mem_header = "peak memory (MiB"
    if one_kind and mem_kinds:
        mem_header += f", {_mem_label(next(iter(mem_kinds)))}"
    mem_header += ")"
    header = [
        "precision",
        "accuracy",
        f"Δacc vs {baseline} (pts)",
        "train time (s)",
        "speedup",
        "samples/s",
        mem_header,
        "memory ratio",
        "skipped steps",
        "final loss scale",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    for r in rows:
        if r["is_baseline"]:
            delta = "baseline"
        else:
            delta = fmt_delta(r["delta_accuracy_pts"])
        mem = NA if r["peak_memory_mib_mean"] is None else f"{r['peak_memory_mib_mean']:.1f}"
        if mem != NA and not one_kind:
            mem += f" ({_mem_label(r['peak_memory_kind'])})"
        if r["skipped_steps_total"] is None:
            skipped = NA
        elif r["n_seeds"] > 1 and r["skipped_steps_total"]:
            skipped = f"{r['skipped_steps_total']} ({_fmt_count(r['skipped_steps_mean'])}/seed)"
        else:
            skipped = str(r["skipped_steps_total"])
        if r["final_loss_scale_min"] is not None and r["final_loss_scale_min"] != r["final_loss_scale_max"]:
            scale = f"{fmt_scale(r['final_loss_scale_min'])}–{fmt_scale(r['final_loss_scale_max'])}"
        else:
            scale = fmt_scale(r["final_loss_scale"])
        cells = [
            r["precision"],
            _pm(r["accuracy_mean"], r["accuracy_std"], ".4f"),
            delta,
            _pm(r["train_time_s_mean"], r["train_time_s_std"], ".2f"),
            fmt_ratio(r["speedup"]),
            _pm(r["samples_per_s_mean"], r["samples_per_s_std"], ".1f"),
            mem,
            fmt_ratio(r["memory_ratio"]),
            skipped,
            scale,
        ]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)


def _skipped_at(runs: list[dict]) -> list[tuple[Any, list[int]]]:
    """(seed, [steps skipped]) for runs whose history marks skipped steps."""
    out = []
    for r in runs:
        hist = r.get("history") or {}
        steps, skipped = hist.get("step") or [], hist.get("skipped") or []
        at = [s for s, k in zip(steps, skipped) if k]
        if at:
            out.append((r.get("seed"), at))
    return out


def _notes(doc: dict, rows: list[dict], baseline: str) -> list[str]:
    groups = group_runs(doc)
    base = next((r for r in rows if r["is_baseline"]), None)
    notes: list[str] = []

    # -- accuracy: gap vs seed noise
    if base is None:
        notes.append(
            f"No `{baseline}` run in these results, so Δacc, speedup and memory ratio are n/a "
            f"(they compare against `{baseline}`)."
        )
    else:
        few = []
        for r in rows:
            if r["is_baseline"] or r["delta_accuracy_pts"] is None:
                continue
            if r["accuracy_n"] > 1 and base["accuracy_n"] > 1:
                # Pooled sample std of the pair, in points.
                pooled = math.sqrt((r["accuracy_std"] ** 2 + base["accuracy_std"] ** 2) / 2) * 100
                d = r["delta_accuracy_pts"]
                seeds = f"{r['accuracy_n']} vs {base['accuracy_n']} seeds"
                if abs(d) <= 2 * pooled:
                    notes.append(
                        f"**{r['precision']}** vs {baseline}: Δacc {fmt_delta(d)} pts is within 2× the seed "
                        f"spread (pooled std {pooled:.2f} pts, {seeds}), so it is indistinguishable from "
                        f"seed noise."
                    )
                else:
                    notes.append(
                        f"**{r['precision']}** vs {baseline}: Δacc {fmt_delta(d)} pts is more than 2× the seed "
                        f"spread (pooled std {pooled:.2f} pts, {seeds}): likely a real difference."
                    )
            else:
                few.append(r["precision"])
        if few:
            notes.append(
                f"Accuracy for {', '.join(f'**{p}**' for p in few)} vs {baseline} rests on one seed: "
                f"run `--compare --seeds 0,1,2` to tell a gap from noise."
            )

    # -- speed
    if base is not None and any(r["speedup"] is not None for r in rows if not r["is_baseline"]):
        notes.append(
            f"speedup = {baseline}'s mean train time ÷ this precision's (above 1.00× is faster); "
            f"memory ratio = this precision's mean peak memory ÷ {baseline}'s (below 1.00× is smaller)."
        )

    # -- GradScaler
    for r in rows:
        if not r["skipped_steps_total"]:
            continue
        steps = f" of {r['steps_total']}" if r["steps_total"] else ""
        where = "; ".join(
            f"seed {seed}: step{'s' if len(at) > 1 else ''} {', '.join(map(str, at[:8]))}"
            + (" …" if len(at) > 8 else "")
            for seed, at in _skipped_at(groups[r["precision"]])
        )
        notes.append(
            f"**{r['precision']}**: the GradScaler skipped {r['skipped_steps_total']}{steps} optimizer "
            f"steps for inf/NaN gradients" + (f" ({where})" if where else "") + ", lowering the loss "
            "scale each time. That is normal early in fp16 training while the scale calibrates; "
            "skips throughout training would mean gradients keep overflowing."
        )
    if rows and not any(r["grad_scaler"] for r in rows):
        notes.append("No GradScaler in these runs (fp32 and bf16 need none), so there are no skipped steps to watch.")
    elif any(not r["grad_scaler"] for r in rows):
        notes.append("In the final loss scale column, — means the precision ran without a GradScaler.")

    # -- memory
    kinds = _distinct(doc.get("runs") or [], "peak_memory_kind")
    if "cpu_rss" in kinds:
        notes.append(
            "Peak memory (RSS) is the process's peak resident set, not tensor memory: it includes "
            "the Python runtime, libraries and data, so it understates what a precision saves."
        )
    if "cuda_max_allocated" in kinds:
        notes.append(
            "Peak memory (allocated) is `torch.cuda.max_memory_allocated()`: the high-water mark of "
            "tensor memory, not counting the caching allocator's reserve or the CUDA context."
        )
    if len(kinds) > 1:
        notes.append("Runs measured different kinds of memory; memory ratios across kinds are n/a.")
    missing = [
        f"{r.get('precision')} seed {r.get('seed')}" for r in doc.get("runs") or [] if _num(r.get("peak_memory_bytes")) is None
    ]
    if missing:
        notes.append(
            f"Peak memory was not measured for {', '.join(missing)}; means use the runs that have it."
        )

    # -- anything unusual
    for r in doc.get("runs") or []:
        if r.get("stopped_early"):
            notes.append(f"**{r.get('precision')}** seed {r.get('seed')} stopped early: {r['stopped_early']}.")
    devices = _distinct(doc.get("runs") or [], "device_name")
    if len(devices) > 1:
        notes.append("Runs ran on different devices, so times and memory are not directly comparable.")
    return notes


def render_markdown(doc: dict, baseline: str = "fp32", *, plots: Iterable[str | Path] | None = None) -> str:
    """``report.md``'s text for ``doc``.

    ``plots``: the chart files to link (names or paths; linked by file name, i.e. relative
    to report.md). Default: the charts :func:`mixft.plots.write_plots` would write for ``doc``.

    Usage: ``IPython.display.Markdown(render_markdown(json.load(open("results.json"))))``
    """
    runs = doc.get("runs") or []
    rows = summarize(doc, baseline)
    precisions = [r["precision"] for r in rows]
    title = "# Mixed-precision comparison"
    if precisions:
        title += ": " + " vs ".join(precisions)
    out = [title, ""]

    seeds: list[Any] = []
    for r in runs:
        if r.get("seed") not in seeds:
            seeds.append(r.get("seed"))
    steps = sorted({int(r["steps"]) for r in rows if r["steps"] is not None})
    meta = [
        f"**model** `{', '.join(_distinct(runs, 'model')) or NA}`",
        f"**dataset** `{', '.join(_distinct(runs, 'dataset')) or NA}`",
        f"**device** {', '.join(_distinct(runs, 'device_name')) or ', '.join(_distinct(runs, 'device')) or NA}",
        f"**seeds** {_seed_list([s for s in seeds if s is not None])}",
        f"**steps/run** {', '.join(map(str, steps)) or NA}",
        f"**created** {doc.get('created') or NA}",
    ]
    out += [" · ".join(meta), ""]

    if not rows:
        out += ["No runs in this results document.", ""]
        return "\n".join(out)

    out += [render_table(rows, baseline), ""]
    out += ["Accuracy and times are mean ± sample std over seeds (± only with more than one seed).", ""]

    notes = _notes(doc, rows, baseline)
    if notes:
        out += ["## How to read this", ""] + [f"- {n}" for n in notes] + [""]

    if plots is None:
        from .plots import planned_plots

        plots = planned_plots(doc)
    names = [Path(p).name for p in plots]
    if names:
        out += ["## Charts", ""]
        for name in names:
            out += [f"![{PLOT_TITLES.get(name, name)}]({name})", ""]
    return "\n".join(out).rstrip("\n") + "\n"


def write_report(doc: dict, out_dir: str | Path, baseline: str = "fp32") -> list[Path]:
    """Write the charts and ``report.md`` into ``out_dir``; return the files written (report.md first).

    Each file is written atomically. Charts are written first so the report links only
    the ones that exist.

    Usage: ``write_report(results_document(results), "outputs/compare")``
    """
    from .plots import write_plots

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    pngs = write_plots(doc, out_dir, baseline=baseline)
    report = out_dir / "report.md"
    write_text(report, render_markdown(doc, baseline, plots=pngs))
    logger.info("wrote %s and %d chart(s)", report, len(pngs))
    return [report, *pngs]
