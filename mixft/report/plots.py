"""PNG charts of a results document (see :mod:`mixft.results`), for ``report.md``.

Usage: ``write_plots(doc, "runs/cmp")`` -> ``[Path("runs/cmp/loss.png"), ...]``

Charts (a chart whose data is entirely absent is skipped, not drawn empty; which ones a
document has data for is :func:`mixft.report.summary.planned_charts`):

* ``loss.png``          training loss per optimizer step, one line per precision
                        (mean over seeds with a shaded min-max band when there are several);
                        below it, with a baseline run, (precision loss - baseline loss) per
                        step, smoothed: identical curves read as a flat line at 0
* ``loss_scale.png``    GradScaler loss scale per step (log axis), one line per run that
                        had a scaler, skipped steps marked with red ``x``
* ``eval_<metric>.png`` one chart per task metric (``eval_accuracy.png``, ``eval_f1.png``,
                        ``eval_pearsonr.png``...): the metric per epoch per precision
                        (mean, min-max band); :func:`mixft.report.summary.eval_charts` names them
* ``time_memory.png``   train time (``--eval-only`` runs: eval time) and peak memory per
                        precision, speedup / memory ratio vs the baseline on the bars
* ``memory_breakdown.png`` per precision, stacked: parameters, gradients, optimizer
                        state and the peak of saved activations (runs' ``memory``), the
                        device figure as a marker, saved bytes vs the baseline on the bars

Notebook-safe: matplotlib is imported only inside the functions that draw, and they use
its object API (``matplotlib.figure.Figure`` rendered by ``fig.savefig``), never pyplot
and never ``matplotlib.use``: no backend is chosen, no window opens, a notebook's inline
plots keep working, and headless machines need no display. Every file is written
atomically (:func:`mixft.atomic.atomic_path`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from mixft.atomic import atomic_path
from mixft.log import logger
from mixft.report.summary import (
    MEMORY_PARTS,
    MIB,
    eval_axis,
    eval_charts,
    eval_series,
    group_runs,
    loss_difference_series,
    loss_series,
    memory_label,
    memory_rows,
    metric_label,
    planned_charts,
    scale_points,
    summarize,
    task_of,
)

_DPI = 100
_SKIP_COLOR = "red"


def _figure(width: float, height: float, ncols: int = 1):
    """A figure detached from pyplot (no global figure registry, no backend switch)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    axes = fig.subplots(1, ncols)
    return fig, axes


def _colors(doc: dict) -> dict[str, str]:
    """One colour per precision, the same in every chart."""
    return {p: f"C{i % 10}" for i, p in enumerate(group_runs(doc))}


def _aggregate(series: list[dict[float, float]]) -> tuple[list[float], list[float], list[float], list[float]]:
    """x, mean, min, max over the series that have each x."""
    xs = sorted({x for s in series for x in s})
    mean, lo, hi = [], [], []
    for x in xs:
        vals = [s[x] for s in series if x in s]
        mean.append(sum(vals) / len(vals))
        lo.append(min(vals))
        hi.append(max(vals))
    return xs, mean, lo, hi


# ---------------------------------------------------------------------------- charts


def _plot_lines(ax, doc: dict, series_of: Callable[[dict], dict[float, float]]) -> None:
    colors = _colors(doc)
    for precision, runs in group_runs(doc).items():
        series = [s for s in (series_of(r) for r in runs) if s]
        if not series:
            continue
        xs, mean, lo, hi = _aggregate(series)
        label = precision if len(series) == 1 else f"{precision} (mean of {len(series)} seeds)"
        marker = "o" if len(xs) <= 20 else None
        ax.plot(xs, mean, color=colors[precision], label=label, marker=marker, markersize=3, linewidth=1.5)
        if len(series) > 1:
            ax.fill_between(xs, lo, hi, color=colors[precision], alpha=0.2, linewidth=0)
    ax.grid(True, alpha=0.3)
    ax.legend()


def _loss_figure(doc: dict, baseline: str = "fp32"):
    diffs = loss_difference_series(doc, baseline)
    if not diffs:
        fig, ax = _figure(8, 4.5)
    else:
        from matplotlib.figure import Figure

        fig = Figure(figsize=(8, 6.5))
        ax, ax_d = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [2, 1]})
        _loss_difference_panel(ax_d, doc, diffs, baseline)
    _plot_lines(ax, doc, loss_series)
    ax.set_title("Training loss per step")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("training loss")
    ax.xaxis.get_major_locator().set_params(integer=True)
    if any(len(group_runs(doc)[p]) > 1 for p in group_runs(doc)):
        ax.text(
            0.99,
            0.98,
            "band: min–max over seeds",
            transform=ax.transAxes,
            ha="right",
            va="top",
            fontsize=8,
            color="0.4",
        )
    if diffs:
        ax.set_xlabel("")
        fig.tight_layout()
    return fig


def _loss_difference_panel(ax, doc: dict, diffs: dict, baseline: str) -> None:
    """(precision loss - baseline loss) per step: where the curves above coincide, this is 0."""
    colors = _colors(doc)
    ax.axhline(0.0, color=colors.get(baseline, "0.3"), linewidth=1, linestyle="--", label=f"{baseline} (0)")
    for precision, (steps, diff) in diffs.items():
        ax.plot(steps, diff, color=colors[precision], linewidth=1.5, label=f"{precision} − {baseline}")
    ax.set_ylabel(f"loss − {baseline} loss\n(smoothed)")
    ax.set_xlabel("optimizer step")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)


def _loss_scale_figure(doc: dict):
    colors = _colors(doc)
    fig, ax = _figure(8, 4.5)
    marked = False
    for precision, runs in group_runs(doc).items():
        with_scaler = [r for r in runs if scale_points(r)[0]]
        for i, run in enumerate(with_scaler):
            xs, ys, sx, sy = scale_points(run)
            label = precision if len(with_scaler) == 1 else f"{precision} seed {run.get('seed')}"
            ax.plot(
                xs,
                ys,
                drawstyle="steps-post",
                color=colors[precision],
                label=label,
                linestyle=["-", "--", ":", "-."][i % 4],
                linewidth=1.5,
            )
            if sx:
                ax.scatter(
                    sx,
                    sy,
                    marker="x",
                    color=_SKIP_COLOR,
                    s=50,
                    zorder=3,
                    label=None if marked else "skipped step (inf/NaN grads)",
                )
                marked = True
    ax.set_yscale("log", base=2)
    ax.set_title("GradScaler loss scale (x = skipped step)")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss scale (log₂)")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(True, alpha=0.3, which="both")
    handles, labels = ax.get_legend_handles_labels()  # runs first, the skip marker last
    order = sorted(range(len(labels)), key=lambda i: labels[i].startswith("skipped step"))
    ax.legend([handles[i] for i in order], [labels[i] for i in order])
    return fig


def _eval_figure(doc: dict, metric: str):
    label = metric_label(metric, task_of(doc))
    fig, ax = _figure(7, 4.5)
    axis = eval_axis(doc)
    _plot_lines(ax, doc, lambda run: eval_series(run, metric, axis))
    ax.set_title(f"Eval {label} " + ("per epoch" if axis == "epoch" else "per evaluation"))
    ax.set_xlabel("epoch" if axis == "epoch" else "optimizer step")
    ax.set_ylabel(label)
    ax.xaxis.get_major_locator().set_params(integer=True)
    return fig


def _bars(
    ax,
    rows: list[dict],
    colors: dict[str, str],
    value_key: str,
    std_key: str | None,
    ratio_key: str,
    scale: float = 1.0,
) -> bool:
    """Bars of ``row[value_key] * scale`` with the ratio written on top; False if no values."""
    names = [r["precision"] for r in rows]
    values = [r[value_key] * scale if r[value_key] is not None else 0.0 for r in rows]
    errs = [r[std_key] * scale if std_key and r.get(std_key) is not None else 0.0 for r in rows]
    bars = ax.bar(names, values, yerr=errs if any(errs) else None, capsize=4, color=[colors[n] for n in names])
    top = max((v + e for v, e in zip(values, errs)), default=0.0)
    for bar, row, v, e in zip(bars, rows, values, errs):
        if row[value_key] is None:
            text = "n/a"
        elif row["is_baseline"]:
            text = "baseline"
        elif row[ratio_key] is not None:
            text = f"{row[ratio_key]:.2f}×"
        else:
            text = ""
        ax.text(bar.get_x() + bar.get_width() / 2, v + e + top * 0.01, text, ha="center", va="bottom", fontsize=9)
    ax.set_ylim(0, top * 1.15 if top > 0 else 1)
    ax.grid(True, axis="y", alpha=0.3)
    return any(r[value_key] is not None for r in rows)


def _time_memory_figure(doc: dict, baseline: str):
    rows = summarize(doc, baseline)
    colors = _colors(doc)
    fig, (ax_t, ax_m) = _figure(10, 4.5, ncols=2)
    if rows and all(r["eval_only"] for r in rows):  # --eval-only: the time measured is the evaluation's
        if not _bars(ax_t, rows, colors, "eval_time_s_mean", "eval_time_s_std", "inference_speedup"):
            ax_t.text(0.5, 0.5, "eval time not recorded", transform=ax_t.transAxes, ha="center")
        ax_t.set_title(f"Eval time (s), no training: inference speedup vs {baseline}")
    else:
        if not _bars(ax_t, rows, colors, "train_time_s_mean", "train_time_s_std", "speedup"):
            ax_t.text(0.5, 0.5, "train time not recorded", transform=ax_t.transAxes, ha="center")
        ax_t.set_title(f"Train time (s): speedup vs {baseline}")
    ax_t.set_ylabel("seconds (mean over seeds)")
    if not _bars(ax_m, rows, colors, "peak_memory_bytes_mean", None, "memory_ratio", scale=1 / 2**20):
        ax_m.text(0.5, 0.5, "peak memory not measured", transform=ax_m.transAxes, ha="center")
    kinds = {r["peak_memory_kind"] for r in rows if r["peak_memory_kind"]}
    kind = memory_label(next(iter(kinds))) if len(kinds) == 1 else None
    ax_m.set_title(f"Peak memory (MiB{', ' + kind if kind else ''}): ratio vs {baseline}")
    ax_m.set_ylabel("MiB (mean over seeds)")
    fig.tight_layout()
    return fig


def _memory_breakdown_figure(doc: dict, baseline: str):
    rows = memory_rows(doc)
    fig, ax = _figure(8, 4.5)
    names = [r["precision"] for r in rows]
    bottoms = [0.0] * len(rows)
    for i, (key, label) in enumerate(MEMORY_PARTS):
        heights = [(r[key] or 0.0) / MIB for r in rows]
        ax.bar(names, heights, bottom=bottoms, label=label, color=f"C{i}", edgecolor="white", linewidth=0.5)
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    base = next((r for r in rows if r["precision"] == baseline), None)
    top = max(bottoms, default=0.0)
    for x, (row, total) in enumerate(zip(rows, bottoms)):
        saved = row["saved_activations_peak"]
        if base is not None and row is not base and saved and base["saved_activations_peak"]:
            ax.text(
                x,
                total + top * 0.01,
                f"saved {saved / base['saved_activations_peak']:.2f}× {baseline}",
                ha="center",
                va="bottom",
                fontsize=9,
            )
    devices = [(x, r["device_figure"] / MIB) for x, r in enumerate(rows) if r["device_figure"] is not None]
    kinds = {r["device_figure_kind"] for r in rows if r["device_figure"] is not None}
    if devices:
        kind = memory_label(next(iter(kinds))) if len(kinds) == 1 and None not in kinds else "device"
        ax.scatter(
            [x for x, _ in devices],
            [y for _, y in devices],
            marker="_",
            s=900,
            color="black",
            zorder=3,
            label=f"device figure ({kind})",
        )
        top = max(top, *(y for _, y in devices))
    ax.set_ylim(0, top * 1.15 if top > 0 else 1)
    ax.set_title("Memory breakdown of one training step (MiB)")
    ax.set_ylabel("MiB (mean over seeds)")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the bars, never on them
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------- writing

# name -> figure builder, for the names mixft.report.summary.planned_charts gives (the eval
# charts, one per metric, are looked up in mixft.report.summary.eval_charts).
_CHARTS: dict[str, Callable[[dict, str], Any]] = {
    "loss.png": _loss_figure,
    "loss_scale.png": lambda doc, base: _loss_scale_figure(doc),
    "time_memory.png": _time_memory_figure,
    "memory_breakdown.png": _memory_breakdown_figure,
}


def _build(name: str, doc: dict, baseline: str):
    if name in _CHARTS:
        return _CHARTS[name](doc, baseline)
    return _eval_figure(doc, eval_charts(doc)[name])


def planned_plots(doc: dict) -> list[str]:
    """File names :func:`write_plots` would write for ``doc`` (charts with some data).

    Usage: ``planned_plots(json.load(open("results.json")))``
    """
    return planned_charts(doc)


def _save(fig, path: Path) -> None:
    # A Figure outside pyplot is freed with its last reference: nothing to close.
    with atomic_path(path) as tmp:  # tmp ends in .tmp: name the format explicitly
        fig.savefig(tmp, format="png", dpi=_DPI, bbox_inches="tight")


def write_plots(doc: dict, out_dir: str | Path, baseline: str = "fp32") -> list[Path]:
    """Write the charts that have data into ``out_dir``; return their paths.

    Usage: ``write_plots(json.load(open("results.json")), "outputs/run")``
    """
    out_dir = Path(out_dir)
    written: list[Path] = []
    for name in planned_plots(doc):
        path = out_dir / name
        _save(_build(name, doc, baseline), path)
        written.append(path)
    logger.debug("wrote charts: %s", ", ".join(p.name for p in written) or "none")
    return written
