"""What a results document (see :mod:`mixft.results`) says, aggregated: the numbers that
``report.md`` prints and the charts draw, computed in one place.

Usage::

    rows = summarize(json.loads(Path("outputs/cmp/results.json").read_text()))
    rows[1]["speedup"], rows[1]["memory_increase_mib_mean"]

Conventions (kept the same everywhere):

* Runs are grouped by ``precision``; groups keep the order in which a precision first
  appears in ``doc["runs"]``. Within a group each run is one seed.
* ``*_std`` is the *sample* standard deviation (n-1) over the runs that have the value;
  it is ``None`` when fewer than two runs have it (one seed has no spread).
* Means skip runs whose value is null (e.g. ``peak_memory_bytes`` where the device
  could not tell); a mean is ``None`` when no run has the value.
* Task metrics are the numeric keys of a run's ``eval`` other than ``loss``, ``time_s``
  and ``samples_per_s`` (:func:`reported_metric_names`): accuracy, F1, Matthews correlation,
  Pearson/Spearman, whichever the task reported. A run's value of a metric is its
  ``eval[metric]``, else (when ``eval`` lacks the key, not when it holds null) the last
  ``eval_history`` entry that has it.
* Comparisons are against the ``baseline`` precision (default ``fp32``): Δaccuracy is
  ``(mean accuracy - baseline mean accuracy) * 100`` points, and so is the Δ of every
  score in [0, 1] (``POINT_METRICS``); other metrics (correlations, in [-1, 1]) keep
  their own units: ``mean - baseline mean``. Speedup is
  ``baseline mean train time / mean train time`` when every run of both rows trained the
  same number of optimizer steps (``speedup_basis`` ``"train_time"``); otherwise (a run
  stopped early, collapsed, or was cut by ``--max-steps`` differently) a time ratio would
  call the shorter run faster, so it is ``mean samples/s / baseline mean samples/s``
  (``speedup_basis`` ``"samples_per_s"``). Memory ratio is
  ``mean peak memory / baseline mean peak memory``. They are ``None`` when the baseline
  is absent, when either side lacks the value, or (memory) when the two sides measured
  different kinds of memory.
* A run that only evaluated a saved model (``--eval-only``, :func:`is_eval_only`) trained
  nothing: its ``train_time_s`` / ``train_samples_per_s`` (0 in results.json) are not
  measurements and count as absent; what it measured is inference, ``eval.time_s`` and
  ``eval.samples_per_s``, whose means every row carries (``eval_time_s_mean``,
  ``inference_samples_per_s_mean``) with ``inference_speedup`` = baseline mean eval time /
  mean eval time.
* Memory increase is ``peak_memory_bytes - start_memory_bytes`` of each run (what the
  run added over the process's memory when it began; CPU: RSS), averaged over the runs
  that have both; results files written before ``start_memory_bytes`` existed have none.

Nothing here draws or writes files; nothing is measured, only read and combined.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

MIB = 2**20

#: Keys of ``eval`` / ``eval_history`` entries that are not task metrics.
NOT_METRICS = frozenset({"loss", "time_s", "samples_per_s", "epoch", "step"})

#: Scores in [0, 1]: their differences are given in points (x100), as accuracy's are.
POINT_METRICS = frozenset({"accuracy", "f1", "precision", "recall"})

# Known metrics come first, in this order; any others follow in order of first appearance.
_METRIC_ORDER = ("accuracy", "f1", "matthews_correlation", "pearsonr", "spearmanr")

# metric -> (column label, short name for Δ headers and notes).
_METRIC_LABELS = {
    "accuracy": ("accuracy", "acc"),
    "f1": ("F1", "F1"),
    "matthews_correlation": ("Matthews corr.", "MCC"),
    "pearsonr": ("Pearson r", "Pearson"),
    "spearmanr": ("Spearman ρ", "Spearman"),
}

#: Short names for ``peak_memory_kind`` used in table headers, cells and chart titles.
MEMORY_KIND_LABELS = {"cpu_rss": "RSS", "cuda_max_allocated": "allocated"}

#: The charts a results document can have, by file name, in report order, with their titles.
CHART_TITLES = {
    "loss.png": "Training loss per step",
    "loss_scale.png": "GradScaler loss scale",
    "eval_accuracy.png": "Eval accuracy per epoch",
    "time_memory.png": "Train time and peak memory",
    "memory_breakdown.png": "Memory breakdown per precision",
}
# Every other eval metric gets its own chart too, ``eval_<metric>.png`` (see eval_charts).

NA = "n/a"


# ---------------------------------------------------------------------------- numbers


def number(value: Any) -> float | None:
    """``value`` as a finite float, or None (null, NaN, inf, bool or non-numeric)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def mean(values: Iterable[float | None]) -> float | None:
    """Mean of the values that are not None; None when there are none."""
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def sample_std(values: Iterable[float | None]) -> float | None:
    """Sample standard deviation (n-1) of the values that are not None; None with fewer than two."""
    vals = [v for v in values if v is not None]
    if len(vals) < 2:
        return None
    m = sum(vals) / len(vals)
    return math.sqrt(sum((v - m) ** 2 for v in vals) / (len(vals) - 1))


def ratio(num: float | None, den: float | None) -> float | None:
    """``num / den``, or None when either is missing or ``den`` is 0."""
    if num is None or den is None or den == 0:
        return None
    return num / den


def memory_label(kind: str | None) -> str:
    """``"cpu_rss"`` -> ``"RSS"``; unknown kinds unchanged, None -> ``""``."""
    return MEMORY_KIND_LABELS.get(kind or "", kind or "")


# ---------------------------------------------------------------------------- formatting


def fmt_ratio(value: float | None) -> str:
    return NA if value is None else f"{value:.2f}×"


def fmt_delta(value: float | None) -> str:
    return NA if value is None else f"{value:+.2f}"


def fmt_scale(value: float | None) -> str:
    """Loss scales are usually powers of two: print them as integers when they are."""
    if value is None:
        return "—"
    return f"{value:.0f}" if value >= 1 and value == int(value) else f"{value:g}"


def fmt_mean_std(mean_: float | None, std: float | None, spec: str) -> str:
    """``mean ± std`` (``±`` only when there is a spread, i.e. more than one seed)."""
    if mean_ is None:
        return NA
    return f"{mean_:{spec}}" if std is None else f"{mean_:{spec}} ± {std:{spec}}"


# ---------------------------------------------------------------------------- runs


def entry_metrics(entry: dict | None) -> dict[str, float]:
    """The task metrics of an ``eval`` dict or ``eval_history`` entry: its finite numeric
    values except ``NOT_METRICS``. Usage: ``entry_metrics(run["eval"])`` -> ``{"accuracy": 0.9, "f1": 0.88}``"""
    out = {}
    for key, value in (entry or {}).items():
        value = number(value)
        if key not in NOT_METRICS and value is not None:
            out[str(key)] = value
    return out


def reported_metric_names(doc: dict) -> list[str]:
    """The task metrics any run of ``doc`` reports (final eval or history), known ones first
    (accuracy, f1, matthews_correlation, pearsonr, spearmanr), then the rest as they appear.

    Usage: ``reported_metric_names(doc)`` -> ``["pearsonr", "spearmanr"]`` for a regression task
    """
    seen: list[str] = []
    for run in doc.get("runs") or []:
        for entry in [run.get("eval"), *(run.get("eval_history") or [])]:
            seen += [k for k in entry_metrics(entry) if k not in seen]
    known = [m for m in _METRIC_ORDER if m in seen]
    return known + [m for m in seen if m not in known]


def run_metric(run: dict, name: str) -> float | None:
    """A run's final value of metric ``name``: ``eval[name]``, else (``eval`` lacks it) the last ``eval_history``
    entry's. A final value that is null (a correlation of constant predictions: ``eval.undefined`` says why)
    stays None: an earlier evaluation's figure is not the run's."""
    final = run.get("eval") or {}
    value = number(final.get(name))
    if value is None and name not in final:
        for entry in reversed(run.get("eval_history") or []):
            value = number(entry.get(name))
            if value is not None:
                break
    return value


def run_accuracy(run: dict) -> float | None:
    """A run's final accuracy: ``eval.accuracy``, else the last ``eval_history`` entry's."""
    return run_metric(run, "accuracy")


def is_points(metric: str) -> bool:
    """True for scores in [0, 1], whose differences are given in points (x100)."""
    return metric in POINT_METRICS


def delta_key(metric: str) -> str:
    """The ``summarize`` key of a metric's Δ vs the baseline: ``delta_accuracy_pts``, ``delta_pearsonr``."""
    return f"delta_{metric}_pts" if is_points(metric) else f"delta_{metric}"


def task_of(doc: dict) -> dict | None:
    """The ``task`` of the first run that has one (what the model predicts), or None (older
    documents, recipes without labels)."""
    return next((r["task"] for r in doc.get("runs") or [] if isinstance(r.get("task"), dict)), None)


def metric_label(metric: str, task: dict | None = None) -> str:
    """A metric's column label: ``"accuracy"``, ``"macro-F1"`` (F1 of a task with more than
    two label names: mixft macro-averages it), ``"F1 (positive)"`` (two names: the F1 of
    label id 1, which is named, since ids follow the sorted names and ``Positive`` sorts before
    ``negative``), ``"Pearson r"``; unknown metrics as named."""
    names = (task or {}).get("names") or []
    if metric == "f1" and len(names) > 2:
        return "macro-F1"
    if metric == "f1" and len(names) == 2:
        return f"F1 ({str(names[1]).replace('|', '/')})"
    return _METRIC_LABELS.get(metric, (metric, metric))[0]


def metric_short(metric: str) -> str:
    """A metric's short name for Δ headers and notes: ``"acc"``, ``"F1"``, ``"MCC"``."""
    return _METRIC_LABELS.get(metric, (metric, metric))[1]


def _field(run, key: str):
    return run.get(key) if isinstance(run, dict) else getattr(run, key, None)


def is_eval_only(run) -> bool:
    """Whether a run (a results.json run dict or a RunResult) only evaluated a saved model:
    ``--eval-only`` in its config, or, for a run without that record (the Python API's
    ``Trainer.evaluate_only``), no step, no train time and a measured inference speed.

    Usage: ``[r["precision"] for r in doc["runs"] if is_eval_only(r)]``
    """
    config = _field(run, "config")
    if isinstance(config, dict) and "eval_only" in config:
        return bool(config["eval_only"])
    evaluation = _field(run, "eval")
    return (
        _field(run, "steps") == 0
        and number(_field(run, "train_time_s")) in (0.0, None)
        and isinstance(evaluation, dict)
        and number(evaluation.get("samples_per_s")) is not None
    )


def run_memory_increase(run: dict) -> float | None:
    """``peak_memory_bytes - start_memory_bytes`` of a run; None when either is missing."""
    peak, start = number(run.get("peak_memory_bytes")), number(run.get("start_memory_bytes"))
    return None if peak is None or start is None else peak - start


def group_runs(doc: dict) -> dict[str, list[dict]]:
    """``doc["runs"]`` grouped by precision, in order of first appearance."""
    groups: dict[str, list[dict]] = {}
    for run in doc.get("runs") or []:
        groups.setdefault(str(run.get("precision", "?")), []).append(run)
    return groups


def distinct(runs: list[dict], key: str) -> list[str]:
    """The distinct non-null values of ``run[key]`` as strings, in order of first appearance."""
    out: list[str] = []
    for r in runs:
        v = r.get(key)
        if v is not None and str(v) not in out:
            out.append(str(v))
    return out


# ---------------------------------------------------------------------------- summarize


def summarize(doc: dict, baseline: str = "fp32") -> list[dict]:
    """One row per precision, aggregated over its runs (seeds). See the module docstring.

    Keys of each row: ``precision, is_baseline, autocast_dtype, grad_scaler, n_seeds,
    seeds, accuracy_n, accuracy_mean, accuracy_std, delta_accuracy_pts,
    train_time_s_mean, train_time_s_std, speedup, speedup_basis, samples_per_s_mean,
    samples_per_s_std, peak_memory_n, peak_memory_bytes_mean, peak_memory_mib_mean,
    peak_memory_kind, memory_ratio, memory_increase_n, memory_increase_bytes_mean,
    memory_increase_mib_mean, skipped_steps_mean, skipped_steps_total,
    final_loss_scale, final_loss_scale_min, final_loss_scale_max, steps, steps_total,
    eval_only, eval_time_s_mean, eval_time_s_std, inference_samples_per_s_mean,
    inference_samples_per_s_std, inference_speedup``,
    and for every other metric ``m`` of :func:`metric_names` (after the accuracy keys):
    ``m_n, m_mean, m_std`` and ``delta_m_pts`` (scores in [0, 1]) or ``delta_m``
    (correlations: own units). The accuracy keys are there even when no run has accuracy
    (a regression task): None then.

    ``final_loss_scale`` is the mean over the runs that have one (None without a
    GradScaler); ``_min``/``_max`` give the spread across seeds. ``steps`` is the mean
    number of optimizer steps per run. ``eval_only``: every run of the row only evaluated
    (``--eval-only``): its train figures (time, speed, speedup, skipped steps) are None and
    its speed is the inference one (``eval_time_s_*``, ``inference_*``).

    Usage: ``{r["precision"]: r["speedup"] for r in summarize(doc)}``
    """
    metrics = ["accuracy"] + [m for m in reported_metric_names(doc) if m != "accuracy"]
    rows = [_precision_row(precision, runs, metrics, baseline) for precision, runs in group_runs(doc).items()]
    _compare_with_baseline(rows, metrics)
    return rows


def _precision_row(precision: str, runs: list[dict], metrics: list[str], baseline: str) -> dict:
    """One row of ``summarize``: a precision's runs (seeds) aggregated; the comparisons with the baseline left None."""
    scores: dict[str, Any] = {}
    for m in metrics:
        vals = [run_metric(r, m) for r in runs]
        scores.update(
            {
                f"{m}_n": sum(v is not None for v in vals),
                f"{m}_mean": mean(vals),
                f"{m}_std": sample_std(vals),
                delta_key(m): None,
            }
        )
    trained = [r for r in runs if not is_eval_only(r)]  # an --eval-only run has no train figures
    times = [number(r.get("train_time_s")) for r in trained]
    sps = [number(r.get("train_samples_per_s")) for r in trained]
    eval_times = [number((r.get("eval") or {}).get("time_s")) for r in runs]
    inference = [number((r.get("eval") or {}).get("samples_per_s")) for r in runs]
    mems = [number(r.get("peak_memory_bytes")) for r in runs]
    increases = [run_memory_increase(r) for r in runs]
    kinds = {r.get("peak_memory_kind") for r, m in zip(runs, mems) if m is not None}
    skipped = [number(r.get("skipped_steps")) for r in trained]
    scales = [number(r.get("final_loss_scale")) for r in runs]
    steps = [number(r.get("steps")) for r in runs]
    present_scales = [s for s in scales if s is not None]
    present_skipped = [s for s in skipped if s is not None]
    present_steps = [s for s in steps if s is not None]
    mem_mean = mean(mems)
    increase_mean = mean(increases)
    return {
        "precision": precision,
        "is_baseline": precision == baseline,
        "autocast_dtype": runs[0].get("autocast_dtype"),
        "grad_scaler": any(bool(r.get("grad_scaler")) for r in runs),
        "n_seeds": len(runs),
        "seeds": [r.get("seed") for r in runs],
        **scores,
        "train_time_s_mean": mean(times),
        "train_time_s_std": sample_std(times),
        "speedup": None,
        "speedup_basis": None,
        "step_counts": sorted({int(s) for s, r in zip(steps, runs) if s is not None and not is_eval_only(r)}),
        "samples_per_s_mean": mean(sps),
        "samples_per_s_std": sample_std(sps),
        "peak_memory_n": sum(m is not None for m in mems),
        "peak_memory_bytes_mean": mem_mean,
        "peak_memory_mib_mean": mem_mean / MIB if mem_mean is not None else None,
        # None when unknown, or when seeds disagree on what was measured.
        "peak_memory_kind": kinds.pop() if len(kinds) == 1 else None,
        "memory_ratio": None,
        "memory_increase_n": sum(i is not None for i in increases),
        "memory_increase_bytes_mean": increase_mean,
        "memory_increase_mib_mean": increase_mean / MIB if increase_mean is not None else None,
        "skipped_steps_mean": mean(skipped),
        "skipped_steps_total": int(sum(present_skipped)) if present_skipped else None,
        "final_loss_scale": mean(scales),
        "final_loss_scale_min": min(present_scales) if present_scales else None,
        "final_loss_scale_max": max(present_scales) if present_scales else None,
        "steps": mean(steps),
        "steps_total": int(sum(present_steps)) if present_steps else None,
        "eval_only": not trained,
        "eval_time_s_mean": mean(eval_times),
        "eval_time_s_std": sample_std(eval_times),
        "inference_samples_per_s_mean": mean(inference),
        "inference_samples_per_s_std": sample_std(inference),
        "inference_speedup": None,
    }


def _compare_with_baseline(rows: list[dict], metrics: list[str]) -> None:
    """Fill each row's Δmetrics, speedups and memory ratio against the baseline row (left None without one)."""
    base = next((r for r in rows if r["is_baseline"]), None)
    if base is not None:
        for row in rows:
            for m in metrics:
                if row[f"{m}_mean"] is not None and base[f"{m}_mean"] is not None:
                    diff = row[f"{m}_mean"] - base[f"{m}_mean"]
                    row[delta_key(m)] = diff * 100 if is_points(m) else diff
            if row["step_counts"] == base["step_counts"] and len(base["step_counts"]) == 1:  # the same work
                row["speedup"] = ratio(base["train_time_s_mean"], row["train_time_s_mean"])
                row["speedup_basis"] = "train_time" if row["speedup"] is not None else None
            else:  # other amounts of training: per sample
                row["speedup"] = ratio(row["samples_per_s_mean"], base["samples_per_s_mean"])
                row["speedup_basis"] = "samples_per_s" if row["speedup"] is not None else None
            row["inference_speedup"] = ratio(base["eval_time_s_mean"], row["eval_time_s_mean"])
            if row["peak_memory_kind"] is not None and row["peak_memory_kind"] == base["peak_memory_kind"]:
                row["memory_ratio"] = ratio(row["peak_memory_bytes_mean"], base["peak_memory_bytes_mean"])


# ---------------------------------------------------------------------------- chart data


def _series(pairs) -> dict[float, float]:
    out = {}
    for x, y in pairs:
        x, y = number(x), number(y)
        if x is not None and y is not None:
            out[x] = y
    return out


def loss_series(run: dict) -> dict[float, float]:
    """``{step: training loss}`` of a run (finite values only)."""
    hist = run.get("history") or {}
    loss = hist.get("loss") or []
    steps = hist.get("step") or list(range(1, len(loss) + 1))
    return _series(zip(steps, loss))


def smooth(values: list[float], window: int | None = None) -> list[float]:
    """Centred moving average (``window`` points, default about a twentieth of the series,
    odd, at least 1); the ends average over the points they have.

    Usage: ``smooth([0, 3, 0, 3, 0], 3)`` -> ``[1.5, 1.0, 2.0, 1.0, 1.5]``
    """
    n = len(values)
    if window is None:
        window = max(1, n // 20)
    half = max(0, window) // 2
    out = []
    for i in range(n):
        part = values[max(0, i - half) : i + half + 1]
        out.append(sum(part) / len(part))
    return out


def loss_difference_series(doc: dict, baseline: str = "fp32") -> dict[str, tuple[list[float], list[float]]]:
    """``{precision: (steps, smoothed mean of (precision loss - baseline loss))}`` at the steps
    both have, each run paired with the baseline run of the same seed (in order where seeds
    do not match), mean over the pairs, then :func:`smooth`. Identical curves give 0.

    Usage: ``steps, diff = loss_difference_series(doc)["bf16"]``
    """
    groups = group_runs(doc)
    base_runs = groups.get(baseline) or []
    base_by_seed = {r.get("seed"): loss_series(r) for r in base_runs}
    out: dict[str, tuple[list[float], list[float]]] = {}
    for precision, runs in groups.items():
        if precision == baseline or not base_runs:
            continue
        diffs = []
        for i, run in enumerate(runs):
            base = base_by_seed.get(run.get("seed"))
            if base is None:
                base = loss_series(base_runs[min(i, len(base_runs) - 1)])
            mine = loss_series(run)
            common = {x: mine[x] - base[x] for x in mine if x in base}
            if common:
                diffs.append(common)
        if diffs:
            steps = sorted({x for d in diffs for x in d})
            means = [mean(d[x] for d in diffs if x in d) for x in steps]
            out[precision] = (steps, smooth(means))
    return out


#: The byte figures of a run's ``memory`` (results.json), in stacking order, with labels.
MEMORY_PARTS = (
    ("parameters", "parameters"),
    ("gradients", "gradients"),
    ("optimizer_state", "optimizer state"),
    ("saved_activations_peak", "saved activations (peak)"),
)


def memory_rows(doc: dict) -> list[dict[str, Any]]:
    """One row per precision with a ``memory`` record in some run: the mean over those runs of
    each byte figure (``MEMORY_PARTS``, ``device_figure``), ``device_figure_kind`` (None
    when runs differ), ``saved_by_dtype`` (mean bytes per dtype), ``saved_by_op`` (the
    first such run's) and ``n`` (runs with a record). [] for documents without any.

    Usage: ``{r["precision"]: r["saved_activations_peak"] for r in memory_rows(doc)}``
    """
    rows = []
    for precision, runs in group_runs(doc).items():
        recs = [r["memory"] for r in runs if isinstance(r.get("memory"), dict)]
        if not recs:
            continue
        row: dict[str, Any] = {"precision": precision, "n": len(recs)}
        for key, _ in MEMORY_PARTS:
            row[key] = mean(number(m.get(key)) for m in recs)
        row["device_figure"] = mean(number(m.get("device_figure")) for m in recs)
        kinds = {m.get("device_figure_kind") for m in recs}
        row["device_figure_kind"] = kinds.pop() if len(kinds) == 1 else None
        dtypes: dict[str, list[float]] = {}
        for m in recs:
            for dt, b in (m.get("saved_by_dtype") or {}).items():
                if number(b) is not None:
                    dtypes.setdefault(str(dt), []).append(number(b))
        row["saved_by_dtype"] = dict(
            sorted(((dt, sum(v) / len(recs)) for dt, v in dtypes.items()), key=lambda kv: -kv[1])
        )
        row["saved_by_op"] = [list(x) for x in recs[0].get("saved_by_op") or [] if isinstance(x, (list, tuple))]
        rows.append(row)
    return rows


def eval_axis(doc: dict) -> str:
    """``"epoch"`` when each run evaluates at most once per epoch, else ``"step"`` (``--eval-steps`` evaluates
    inside epochs): what tells one evaluation from another, so that none is averaged with another of its run."""
    for run in doc.get("runs") or []:
        epochs = [number(e.get("epoch")) for e in run.get("eval_history") or []]
        if None in epochs or len(set(epochs)) < len(epochs):
            return "step"
    return "epoch"


def eval_series(run: dict, metric: str = "accuracy", axis: str = "epoch") -> dict[float, float]:
    """``{epoch (or step, with axis="step"): eval metric}`` of a run (accuracy unless ``metric`` says otherwise)."""
    return _series((e.get(axis), e.get(metric)) for e in run.get("eval_history") or [])


def _history_key(entry: dict, axis: str) -> tuple[str, float] | None:
    """Where an eval_history entry sits on ``axis`` (``eval_axis``), else on the other one."""
    for kind in (axis, "step" if axis == "epoch" else "epoch"):
        value = number(entry.get(kind))
        if value is not None:
            return kind, value
    return None


def eval_history_rows(doc: dict) -> list[dict]:
    """The eval history, one row per (epoch, precision), aggregated over seeds; one row per (step, precision)
    where a run evaluates more than once in an epoch (``eval_axis``): only seeds are averaged, never two
    evaluations of one run.

    Rows are ordered by epoch (step), then precision (in ``group_runs`` order), so one epoch's
    precisions sit together. Keys: ``at`` (``"epoch"`` or ``"step"``: what the entries
    recorded), ``epoch`` (its value), ``precision``, ``n`` (runs with an entry there),
    ``step`` (the mean optimizer step), ``loss_mean``/``loss_std`` (eval loss) and, for
    each metric of :func:`metric_names`, ``<metric>_mean``/``<metric>_std``.

    Usage: ``[(r["epoch"], r["precision"], r["accuracy_mean"]) for r in eval_history_rows(doc)]``
    """
    metrics = reported_metric_names(doc)
    order = list(group_runs(doc))
    cells: dict[tuple[tuple[str, float], str], list[dict]] = {}
    axis = eval_axis(doc)
    for precision, runs in group_runs(doc).items():
        for run in runs:
            for entry in run.get("eval_history") or []:
                key = _history_key(entry, axis)
                if key is not None:
                    cells.setdefault((key, precision), []).append(entry)
    rows = []
    for (key, precision), entries in sorted(cells.items(), key=lambda kv: (kv[0][0], order.index(kv[0][1]))):
        row = {
            "at": key[0],
            "epoch": key[1],
            "precision": precision,
            "n": len(entries),
            "step": mean(number(e.get("step")) for e in entries),
            "epoch_mean": mean(number(e.get("epoch")) for e in entries),  # the epoch of a step-keyed row
        }
        for m in ["loss", *metrics]:
            vals = [number(e.get(m)) for e in entries]
            row[f"{m}_mean"], row[f"{m}_std"] = mean(vals), sample_std(vals)
        rows.append(row)
    return rows


def scale_points(run: dict) -> tuple[list[float], list[float], list[float], list[float]]:
    """(steps, scales, skipped steps, scales at skipped steps) of a run with a GradScaler."""
    if not run.get("grad_scaler"):
        return [], [], [], []
    hist = run.get("history") or {}
    scales = hist.get("loss_scale") or []
    steps = hist.get("step") or list(range(1, len(scales) + 1))
    skipped = hist.get("skipped") or [False] * len(scales)
    xs, ys, sx, sy = [], [], [], []
    for x, y, k in zip(steps, scales, skipped):
        x, y = number(x), number(y)
        if x is None or y is None or y <= 0:
            continue
        xs.append(x)
        ys.append(y)
        if k:
            sx.append(x)
            sy.append(y)
    return xs, ys, sx, sy


def _has_time_memory(doc: dict) -> bool:
    return any(
        number(r.get("train_time_s")) is not None or number(r.get("peak_memory_bytes")) is not None
        for r in doc.get("runs") or []
    )


def eval_charts(doc: dict) -> dict[str, str]:
    """``{chart file name: metric}``: one eval chart per metric with an eval history,
    ``eval_accuracy.png``, ``eval_f1.png``, ``eval_pearsonr.png``... in metric order."""
    out = {}
    axis = eval_axis(doc)
    for m in reported_metric_names(doc):
        if any(eval_series(r, m, axis) for r in doc.get("runs") or []):
            out[f"eval_{re.sub(r'[^A-Za-z0-9_.-]', '_', m)}.png"] = m
    return out


def only_evaluated(doc: dict) -> bool:
    """True when ``doc`` has runs and every one only evaluated a saved model (``--eval-only``)."""
    runs = doc.get("runs") or []
    return bool(runs) and all(is_eval_only(r) for r in runs)


def chart_titles(doc: dict) -> dict[str, str]:
    """Every chart ``doc`` can have, file name -> title (the eval ones named by metric)."""
    titles = dict(CHART_TITLES)
    if only_evaluated(doc):  # nothing trained: the time chart shows the evaluation's
        titles["time_memory.png"] = "Eval time and peak memory"
    task = task_of(doc)
    per = "per epoch" if eval_axis(doc) == "epoch" else "per evaluation"
    for name, m in eval_charts(doc).items():
        titles[name] = f"Eval {metric_label(m, task)} {per}"
    return titles


# name -> does the document hold data for it? A chart without data is not drawn at all.
# No run with a GradScaler (fp32/bf16 only) -> no loss_scale.png, rather than an empty
# chart: the report's notes already say no GradScaler was used.
_CHART_DATA = {
    "loss.png": lambda doc: any(loss_series(r) for r in doc.get("runs") or []),
    "loss_scale.png": lambda doc: any(scale_points(r)[0] for r in doc.get("runs") or []),
    "time_memory.png": _has_time_memory,
    "memory_breakdown.png": lambda doc: bool(memory_rows(doc)),
}


def planned_charts(doc: dict) -> list[str]:
    """File names of the charts ``doc`` has data for, in report order (``mixft.report.plots`` draws them):
    loss, loss scale, one eval chart per metric (:func:`eval_charts`), time and memory, the
    memory breakdown (runs with a ``memory`` record).

    Usage: ``planned_charts(doc)`` -> ``["loss.png", "eval_accuracy.png", "eval_f1.png", "time_memory.png"]``
    """
    names = [n for n in ("loss.png", "loss_scale.png") if _CHART_DATA[n](doc)]
    names += list(eval_charts(doc))
    return names + [n for n in ("time_memory.png", "memory_breakdown.png") if _CHART_DATA[n](doc)]
