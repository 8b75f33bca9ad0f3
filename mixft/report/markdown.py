"""Turn a results document (see :mod:`mixft.results`) into a comparison table and ``report.md``.

The larger sections have their own modules (``comparison_table``, ``table_notes``,
``hardware_section``, ``memory_section``); this one renders the smaller ones (evaluation
history, agreement, probe, preflight), puts the report together and writes it. It only
*reads* results: every number it prints is taken from, or computed from, the document it is
given by :mod:`mixft.report.summary` (means, sample standard deviations, differences and
ratios; its docstring states the conventions). Nothing is
measured here and nothing is invented. The charts are drawn by :mod:`mixft.report.plots`,
which this module does not import: ``write_report`` takes the chart writer as an argument.

Usage::

    doc = json.loads(Path("runs/cmp/results.json").read_text())
    print(render_markdown(doc))
    write_report(doc, "runs/cmp", charts=write_plots)   # report.md + PNG charts beside results.json
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from mixft.atomic import write_text
from mixft.log import logger
from mixft.output_names import REPORT_NAME
from mixft.report.comparison_table import cell, fmt_count, only_evaluated, render_table
from mixft.report.hardware_section import measured_speed_sentence, render_hardware
from mixft.report.memory_section import lighter_sentence, render_memory
from mixft.report.summary import (
    NA,
    chart_titles,
    distinct,
    eval_axis,
    eval_history_rows,
    fmt_mean_std,
    fmt_scale,
    metric_label,
    number,
    planned_charts,
    reported_metric_names,
    summarize,
    task_of,
)
from mixft.report.table_notes import table_notes

__all__ = [
    "lighter_sentence",
    "measured_speed_sentence",
    "render_agreement",
    "render_eval_history",
    "render_hardware",
    "render_markdown",
    "render_memory",
    "render_preflight",
    "render_probe",
    "render_table",
    "summarize",
    "task_line",
    "write_report",
]

#: ``write_report``'s chart writer: ``charts(doc, out_dir, baseline) -> [png paths]`` (``mixft.report.plots.write_plots``).
ChartWriter = Callable[[dict, Path, str], list[Path]]


def _seed_list(seeds: Sequence[Any]) -> str:
    return ", ".join(str(s) for s in seeds) if seeds else NA


def task_line(task: dict | None) -> str | None:
    """What the model predicts, in one line: kind, label names in id order, text columns.

    Usage: ``task_line(run["task"])`` -> ``"multi-class classification, 3 labels in id order:
    negative, neutral, positive · text columns: `text` · label column: `label`"``
    """
    if not isinstance(task, dict):
        return None
    kind = str(task.get("kind") or "unknown task")
    names = [str(n) for n in task.get("names") or []]
    if kind == "classification" and names:
        kind = "binary classification" if len(names) == 2 else "multi-class classification"
        parts = [f"{kind}, {len(names)} labels in id order: {', '.join(names)}"]
    else:
        parts = [kind]
    if task.get("glue_task"):
        parts.append(f"GLUE task `{task['glue_task']}`")
    columns = [str(c) for c in task.get("text_columns") or []]
    if columns:
        parts.append(f"text column{'s' if len(columns) > 1 else ''}: {', '.join(f'`{c}`' for c in columns)}")
    if task.get("label_column"):
        parts.append(f"label column: `{task['label_column']}`")
    return " · ".join(parts)


def _task_lines(runs: list[dict]) -> list[str]:
    """One ``**task**`` line per distinct task in the runs (normally one); none for older documents."""
    lines: list[str] = []
    for r in runs:
        line = task_line(r.get("task"))
        if line is not None and f"**task** {line}" not in lines:
            lines.append(f"**task** {line}")
    return lines


def render_eval_history(doc: dict) -> str | None:
    """The per-epoch eval table: every metric (and the eval loss) per precision per epoch,
    mean ± std over seeds. None when no run recorded an eval history.

    Usage: ``print(render_eval_history(doc))``
    """
    rows = eval_history_rows(doc)
    if not rows:
        return None
    task = task_of(doc)
    metrics = [m for m in reported_metric_names(doc) if any(r.get(f"{m}_mean") is not None for r in rows)]
    by_step = all(r["at"] == "step" for r in rows)  # --eval-steps: evaluations inside epochs, one row each
    at = "step" if by_step else "epoch" if all(r["at"] == "epoch" for r in rows) else "epoch / step"
    header = [at, "precision", "epoch" if by_step else "step", *(metric_label(m, task) for m in metrics), "eval loss"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---", "---"] + ["---:"] * (len(header) - 2)) + "|"]
    for r in rows:
        where = fmt_count(r["epoch"]) if r["at"] == "epoch" or by_step else f"step {fmt_count(r['epoch'])}"
        other = r["epoch_mean"] if by_step else r["step"]
        cells = [
            where,
            r["precision"],
            NA if other is None else fmt_count(other),
            *(fmt_mean_std(r[f"{m}_mean"], r[f"{m}_std"], ".4f") for m in metrics),
            fmt_mean_std(r["loss_mean"], r["loss_std"], ".4f"),
        ]
        lines.append("| " + " | ".join(cell(c) for c in cells) + " |")
    return "\n".join(lines)


def render_agreement(doc: dict) -> str | None:
    """The "Agreement with fp32" section from each run's ``agreement_vs_fp32`` (see
    ``mixft.report.agreement``): per run, the flip rate, the paired accuracy difference with its
    95% interval, McNemar's p and the verdict; for regression the mean |difference|.
    None when no run has one.

    Usage: ``render_agreement(doc)``
    """
    found = [r for r in doc.get("runs") or [] if isinstance(r.get("agreement_vs_fp32"), dict)]
    if not found:
        return None
    cls = [r for r in found if r["agreement_vs_fp32"].get("kind") != "regression"]
    reg = [r for r in found if r["agreement_vs_fp32"].get("kind") == "regression"]
    lines = [
        "## Agreement with fp32",
        "",
        "Each precision's predictions on the eval set, example by example, against fp32's of the same seed.",
        "",
    ]
    if cls:
        lines += [
            "| precision | seed | examples | flipped labels | Δaccuracy vs fp32 (pts) | 95% interval (pts) "
            "| only this right / only fp32 right | McNemar p |",
            "|---|---|---:|---:|---:|---:|---:|---:|",
        ]
        for r in cls:
            a = r["agreement_vs_fp32"]
            diff, ci = number(a.get("accuracy_diff")), a.get("accuracy_diff_ci95")
            flips, rate = a.get("flips"), number(a.get("flip_rate"))
            cells = [
                str(r.get("precision")),
                str(r.get("seed")),
                str(a.get("n", NA)),
                NA if rate is None else f"{flips} ({rate:.1%})",
                NA if diff is None else f"{100 * diff:+.2f}",
                NA if not ci else f"{100 * ci[0]:+.2f} to {100 * ci[1]:+.2f}",
                NA
                if a.get("precision_only_right") is None
                else f"{a['precision_only_right']} / {a['fp32_only_right']}",
                NA if number(a.get("mcnemar_p")) is None else f"{a['mcnemar_p']:.3g}",
            ]
            lines.append("| " + " | ".join(cell(c) for c in cells) + " |")
        lines.append("")
    if reg:
        lines += [
            "| precision | seed | examples | mean abs. difference | largest abs. difference |",
            "|---|---|---:|---:|---:|",
        ]
        for r in reg:
            a = r["agreement_vs_fp32"]
            cells = [
                str(r.get("precision")),
                str(r.get("seed")),
                str(a.get("n", NA)),
                NA if number(a.get("mean_abs_diff")) is None else f"{a['mean_abs_diff']:.4g}",
                NA if number(a.get("max_abs_diff")) is None else f"{a['max_abs_diff']:.4g}",
            ]
            lines.append("| " + " | ".join(cell(c) for c in cells) + " |")
        lines.append("")
    lines += [
        f"- seed {r.get('seed')}: {r['agreement_vs_fp32']['verdict']}"
        for r in found
        if r["agreement_vs_fp32"].get("verdict")
    ]
    if cls:
        interval = cls[0]["agreement_vs_fp32"].get("interval")
        lines.append(
            "- The interval is a " + (interval or "paired normal 95% interval") + "; McNemar's exact test "
            "counts only the examples one precision got right and the other wrong."
        )
    return "\n".join(lines).rstrip("\n")


def render_probe(probe: dict | None) -> str | None:
    """The probe's report section (``mixft.report.probe_result.probe_markdown``) from results.json's
    ``hardware.probe``; None without one. A record this version cannot read gets one line.

    Usage: ``render_probe(doc.get("hardware", {}).get("probe"))``
    """
    if not isinstance(probe, dict) or not probe:
        return None
    from mixft.report.probe_result import ProbeResult, probe_markdown

    try:
        return probe_markdown(ProbeResult.from_dict(probe)).rstrip("\n")
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        logger.debug("unreadable probe record: %s", exc)
        return (
            "## Is mixed precision faster here? (probe)\n\n"
            "This document holds a probe result this version of mixft cannot read "
            f"(format {probe.get('format', NA)}); run `--probe` again to measure."
        )


def render_preflight(pre: dict | None, top: int = 8) -> str | None:
    """The "Before the fp16 run" section from results.json's ``preflight`` (``mixft.amp.preflight``);
    None without one. Modules at risk most severe first, then the preflight's recommendations.

    Usage: ``render_preflight(doc.get("preflight"))``
    """
    if not isinstance(pre, dict) or not pre:
        return None
    seconds = number(pre.get("seconds"))
    how = (
        f"{pre.get('batches', NA)} training batch(es) forward and backward in fp32, "
        f"{pre.get('modules_checked', NA)} modules, initial loss scale {fmt_scale(number(pre.get('init_scale')))}"
        + (f", {seconds:.1f} s" if seconds is not None else "")
    )
    lines = ["## Before the fp16 run", ""]
    risks = [r for r in pre.get("modules_at_risk") or [] if isinstance(r, dict)]
    if not risks:
        big = pre.get("largest_activation") or {}
        value = number(big.get("value"))
        largest = f"; largest |activation| {value:.3g} in `{big.get('module')}`" if value is not None else ""
        lines.append(f"The preflight found no module at fp16 risk ({how}{largest}).")
        return "\n".join(lines)
    lines += [
        f"The preflight found {len(risks)} module(s) at fp16 risk ({how}), most severe first:",
        "",
        "| module | type | risk | value | × limit |",
        "|---|---|---|---:|---:|",
    ]
    for r in risks[:top]:
        label = "near overflow" if r.get("level") == "close" else r.get("kind", NA)
        risk = f"{label} ({r.get('tensor', NA)})" + (", starts here" if r.get("origin") else "")
        value, ratio = number(r.get("value")), number(r.get("ratio"))
        shown = NA if value is None else (f"{value:.1%}" if r.get("kind") == "underflow" else f"{value:.4g}")
        lines.append(
            f"| `{cell(str(r.get('name')))}` | {cell(str(r.get('module_type', NA)))} | {risk} | {shown} | "
            f"{'inf' if ratio is None else f'{ratio:.3g}'} |"
        )
    if len(risks) > top:
        lines += ["", f"{len(risks) - top} more in results.json (`preflight.modules_at_risk`)."]
    lines += [""] + [f"- {cell(str(text))}" for text in pre.get("recommendations") or []]
    handled = pre.get("handled_by_fp32_modules") or []
    if handled:
        lines.append(
            f"- these runs kept `{','.join(pre.get('kept_in_fp32') or [])}` in fp32 (`--fp32-modules`): "
            f"{len(handled)} of the modules above run there"
        )
    return "\n".join(lines)


def render_markdown(doc: dict, baseline: str = "fp32", *, plots: Iterable[str | Path] | None = None) -> str:
    """``report.md``'s text for ``doc``.

    ``plots``: the chart files to link (names or paths; linked by file name, i.e. relative
    to report.md). Default: the charts ``doc`` has data for (:func:`mixft.report.summary.planned_charts`,
    what :func:`mixft.report.plots.write_plots` writes).

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
    # Each run's own count: the rows' are means over seeds (6, 6 and 4 steps are not "5").
    steps = sorted({int(r["steps"]) for r in runs if number(r.get("steps")) is not None})
    meta = [
        f"**model** `{', '.join(distinct(runs, 'model')) or NA}`",
        f"**dataset** `{', '.join(distinct(runs, 'dataset')) or NA}`",
        f"**device** {', '.join(distinct(runs, 'device_name')) or ', '.join(distinct(runs, 'device')) or NA}",
        f"**seeds** {_seed_list([s for s in seeds if s is not None])}",
        f"**steps/run** {', '.join(map(str, steps)) or NA}"
        + (" (`--eval-only`: no training)" if only_evaluated(rows) else ""),
        f"**created** {doc.get('created') or NA}",
    ]
    out += [" · ".join(meta), ""]
    out += [line for task in _task_lines(runs) for line in (task, "")]

    hw = doc.get("hardware") if isinstance(doc.get("hardware"), dict) else None
    machine = [sec for sec in (render_hardware(hw, rows, baseline), render_probe((hw or {}).get("probe"))) if sec]
    if not rows:
        probed = isinstance((hw or {}).get("probe"), dict)
        out += ["No training runs in this results document" + (": it holds the probe below." if probed else "."), ""]
        out += [line for sec in machine for line in (sec, "")]
        return "\n".join(out).rstrip("\n") + "\n"

    out += [render_table(rows, baseline, task=task_of(doc)), ""]
    out += ["Scores and times are mean ± sample std over seeds (± only with more than one seed).", ""]

    notes = table_notes(doc, rows, baseline)
    if notes:
        out += ["## How to read this", ""] + [f"- {n}" for n in notes] + [""]
    preflight = render_preflight(doc.get("preflight"))
    out += [preflight, ""] if preflight else []

    history = render_eval_history(doc)
    if history:
        if eval_axis(doc) == "epoch":
            out += ["## Eval per epoch", "", history, ""]
            out += ["Each row: the evaluation recorded at that epoch (step), mean ± sample std over seeds.", ""]
        else:
            out += ["## Eval per evaluation", "", history, ""]
            out += ["Each row: the evaluation recorded at that optimizer step, mean ± sample std over seeds.", ""]

    out += [line for sec in (render_memory(doc, baseline), render_agreement(doc)) if sec for line in (sec, "")]
    out += [line for sec in machine for line in (sec, "")]

    titles = chart_titles(doc)
    names = planned_charts(doc) if plots is None else [Path(p).name for p in plots]
    if names:
        out += ["## Charts", ""]
        for name in names:
            out += [f"![{titles.get(name, name)}]({name})", ""]
    return "\n".join(out).rstrip("\n") + "\n"


def write_report(
    doc: dict,
    out_dir: str | Path,
    baseline: str = "fp32",
    *,
    charts: ChartWriter | None = None,
    name: str = REPORT_NAME,
) -> list[Path]:
    """Write ``report.md`` (or ``name``; and, with ``charts``, the charts it links) into ``out_dir``.

    Returns the files written, report.md first. ``charts`` is the chart writer,
    normally :func:`mixft.report.plots.write_plots`; it runs first so the report links only the
    charts that exist. Without it the report has no charts section. Each file is
    written atomically.

    Usage: ``write_report(results_document(results), "outputs/compare", charts=mixft.write_plots)``
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    pngs = list(charts(doc, out_dir, baseline)) if charts is not None else []
    report = out_dir / name
    write_text(report, render_markdown(doc, baseline, plots=pngs))
    if charts is not None:  # a comparison: its last lines name report.md, not the charts beside it
        logger.info("wrote %s and %d chart(s)", report, len(pngs))
    # Without charts (--probe's probe.md) the caller's last line names the report: not said twice.
    return [report, *pngs]
