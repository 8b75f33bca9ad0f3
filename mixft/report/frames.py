"""Results as pandas frames: one row per run, or one row per precision against fp32.

The report's numbers (``mixft.report.summary``) as DataFrames for a notebook. Lives in the
report layer, not beside ``RunResult``: the trainer that writes results never needs pandas.

Usage::

    results_frame(results).set_index("precision")
    compare_frame(results)[["accuracy_mean", "speedup", "memory_ratio"]]
"""

from __future__ import annotations

from mixft.report.summary import reported_metric_names, run_accuracy, run_metric, summarize
from mixft.results import RunResult, results_document

__all__ = ["RESULTS_FRAME_COLUMNS", "compare_frame", "results_frame"]


#: Columns of :func:`results_frame`, in order (each other task metric follows ``accuracy``).
RESULTS_FRAME_COLUMNS = (
    "precision",
    "seed",
    "accuracy",
    "eval_loss",
    "train_time_s",
    "train_samples_per_s",
    "peak_memory_mib",
    "peak_memory_kind",
    "steps",
    "skipped_steps",
    "final_loss_scale",
    "device",
    "model",
    "dataset",
)


def results_frame(results) -> pandas.DataFrame:  # noqa: F821 (pandas is imported lazily)
    """Several runs as a pandas DataFrame, one row per run (columns: ``RESULTS_FRAME_COLUMNS``,
    with a column per other task metric the runs report right after ``accuracy``: ``f1``,
    ``matthews_correlation``, ``pearsonr``, ``spearmanr``...; ``accuracy`` is NaN for regression).

    ``results``: RunResults, ``results.json`` run dicts, or a whole results document
    (``{"runs": [...]}``). Values are the runs' own; nothing is aggregated (see
    :func:`compare_frame` for one row per precision with speedups).

    Usage: ``results_frame([fp32_result, bf16_result]).set_index("precision")``
    """
    import pandas as pd

    if isinstance(results, dict):
        results = results.get("runs") or []
    runs = [run.to_dict() if isinstance(run, RunResult) else dict(run) for run in results]
    others = [m for m in reported_metric_names({"runs": runs}) if m != "accuracy" and m not in RESULTS_FRAME_COLUMNS]
    columns = list(RESULTS_FRAME_COLUMNS)
    columns[columns.index("accuracy") + 1 : columns.index("accuracy") + 1] = others
    rows = []
    for run in runs:
        mem = run.get("peak_memory_bytes")
        rows.append(
            {
                "precision": run.get("precision"),
                "seed": run.get("seed"),
                "accuracy": run_accuracy(run),
                **{m: run_metric(run, m) for m in others},
                "eval_loss": (run.get("eval") or {}).get("loss"),
                "train_time_s": run.get("train_time_s"),
                "train_samples_per_s": run.get("train_samples_per_s"),
                "peak_memory_mib": mem / 2**20 if mem is not None else None,
                "peak_memory_kind": run.get("peak_memory_kind"),
                "steps": run.get("steps"),
                "skipped_steps": run.get("skipped_steps"),
                "final_loss_scale": run.get("final_loss_scale"),
                "device": run.get("device_name") or run.get("device"),
                "model": run.get("model"),
                "dataset": run.get("dataset"),
            }
        )
    return pd.DataFrame(rows, columns=columns)


def compare_frame(results, baseline: str = "fp32") -> pandas.DataFrame:  # noqa: F821
    """One row per precision, aggregated over seeds, with Δaccuracy, speedup and memory ratio
    against ``baseline`` (the rows of :func:`mixft.report.summary.summarize`), indexed by precision.
    Every task metric ``m`` has ``m_mean``, ``m_std`` and its Δ (``delta_m_pts`` for scores
    in [0, 1], ``delta_m`` for correlations).

    Usage: ``compare_frame(results)[["accuracy_mean", "speedup", "memory_ratio"]]``
    """
    import pandas as pd

    doc = results if isinstance(results, dict) else results_document(list(results))
    rows = summarize(doc, baseline)
    if not rows:
        return pd.DataFrame(index=pd.Index([], name="precision"))
    return pd.DataFrame(rows).set_index("precision")
