"""report.md's comparison table: one row per precision, its cells and the deltas against the baseline.

Every number is read from ``summarize``'s rows (:mod:`mixft.report.summary`); nothing is measured here.

Usage: ``print(render_table(summarize(doc), baseline="fp32"))``
"""

from __future__ import annotations

from mixft.report.summary import (
    NA,
    delta_key,
    fmt_delta,
    fmt_mean_std,
    fmt_ratio,
    fmt_scale,
    is_points,
    memory_label,
    metric_label,
    metric_short,
)

#: A train cell of an ``--eval-only`` row beside trained ones.
NO_TRAINING = "no training"


def fmt_count(value: float) -> str:
    return f"{value:.0f}" if value == int(value) else f"{value:.1f}"


def _mib(value: float | None) -> str:
    return NA if value is None else f"{value:.1f}"


def cell(text: str) -> str:
    return text.replace("|", "\\|")


def table_metrics(rows: list[dict]) -> list[str]:
    """The metrics ``summarize``'s rows hold a value of, in their order; ``["accuracy"]``
    when none has any (the table keeps its accuracy column, n/a)."""
    if not rows:
        return ["accuracy"]
    found = []
    for key in rows[0]:
        m = key[:-2]
        if key.endswith("_n") and f"{m}_mean" in rows[0] and delta_key(m) in rows[0]:
            if any(r[key] for r in rows):
                found.append(m)
    return found or ["accuracy"]


def fmt_metric_delta(metric: str, value: float | None) -> str:
    """A Δ vs the baseline: points with two decimals for [0, 1] scores, four decimals otherwise."""
    if value is None or is_points(metric):
        return fmt_delta(value)
    return f"{value:+.4f}"


def _delta_header(metric: str, baseline: str) -> str:
    return f"Δ{metric_short(metric)} vs {baseline}" + (" (pts)" if is_points(metric) else "")


def render_table(rows: list[dict], baseline: str = "fp32", *, task: dict | None = None) -> str:
    """The comparison table (GitHub markdown) for ``summarize``'s rows: a column and a Δ
    column per task metric (accuracy, macro-F1, Matthews, Pearson/Spearman: those the
    rows hold), then speed, memory and GradScaler columns. ``task`` (a run's ``task``)
    names F1 "macro-F1" for multi-class tasks.

    Usage: ``render_table(summarize(doc), task=doc["runs"][0].get("task"))``
    """
    metrics = table_metrics(rows)
    mem_kinds = {r["peak_memory_kind"] for r in rows if r["peak_memory_kind"] is not None}
    one_kind = len(mem_kinds) <= 1
    mem_header = "peak memory (MiB"
    if one_kind and mem_kinds:
        mem_header += f", {memory_label(next(iter(mem_kinds)))}"
    mem_header += ")"
    # Results written before start_memory_bytes existed have no increase: no column then.
    show_increase = any(r["memory_increase_n"] for r in rows)
    # --eval-only runs trained nothing: their speed is inference, and train columns would only say 0.
    evaluated = only_evaluated(rows)
    speed = (
        ["eval time (s)", "inference speedup", "inference samples/s"]
        if evaluated
        else ["train time (s)", "speedup", "samples/s"]
    )
    header = [
        "precision",
        *(h for m in metrics for h in (metric_label(m, task), _delta_header(m, baseline))),
        *speed,
        mem_header,
        *(["increase over start (MiB)"] if show_increase else []),
        "memory ratio",
        *([] if evaluated else ["skipped steps", "final loss scale"]),
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    for r in rows:
        scores = []
        for m in metrics:
            scores.append(fmt_mean_std(r[f"{m}_mean"], r[f"{m}_std"], ".4f"))
            scores.append("baseline" if r["is_baseline"] else fmt_metric_delta(m, r[delta_key(m)]))
        mem = NA if r["peak_memory_mib_mean"] is None else f"{r['peak_memory_mib_mean']:.1f}"
        if mem != NA and not one_kind:
            mem += f" ({memory_label(r['peak_memory_kind'])})"
        if r["skipped_steps_total"] is None:
            skipped = NA
        elif r["n_seeds"] > 1 and r["skipped_steps_total"]:
            skipped = f"{r['skipped_steps_total']} ({fmt_count(r['skipped_steps_mean'])}/seed)"
        else:
            skipped = str(r["skipped_steps_total"])
        if r["final_loss_scale_min"] is not None and r["final_loss_scale_min"] != r["final_loss_scale_max"]:
            scale = f"{fmt_scale(r['final_loss_scale_min'])}–{fmt_scale(r['final_loss_scale_max'])}"
        else:
            scale = fmt_scale(r["final_loss_scale"])
        if evaluated:
            speeds = [
                fmt_mean_std(r["eval_time_s_mean"], r["eval_time_s_std"], ".2f"),
                fmt_ratio(r["inference_speedup"]),
                fmt_mean_std(r["inference_samples_per_s_mean"], r["inference_samples_per_s_std"], ".1f"),
            ]
        elif r.get("eval_only"):  # beside trained runs: say why its train cells are empty
            speeds, skipped, scale = [NO_TRAINING] * 3, NO_TRAINING, NO_TRAINING
        else:
            speeds = [
                fmt_mean_std(r["train_time_s_mean"], r["train_time_s_std"], ".2f"),
                fmt_ratio(r["speedup"]),
                fmt_mean_std(r["samples_per_s_mean"], r["samples_per_s_std"], ".1f"),
            ]
        cells = [
            r["precision"],
            *scores,
            *speeds,
            mem,
            *([_mib(r["memory_increase_mib_mean"])] if show_increase else []),
            fmt_ratio(r["memory_ratio"]),
            *([] if evaluated else [skipped, scale]),
        ]
        lines.append("| " + " | ".join(cell(c) for c in cells) + " |")
    return "\n".join(lines)


def only_evaluated(rows: list[dict]) -> bool:
    """Every row only evaluated a saved model (``--eval-only``): nothing trained."""
    return bool(rows) and all(r.get("eval_only") for r in rows)
