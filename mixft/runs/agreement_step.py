"""After a ``--compare``: each precision's eval predictions against fp32's of the same seed.

Every run keeps its final evaluation's predictions and references (``eval_predictions``,
``eval_labels`` in results.json, so a ``--resume``'d compare still has those of the runs it
kept); this step puts ``mixft.agreement.agreement_vs_fp32`` under each non-fp32 run's
``agreement_vs_fp32``. Runs without an fp32 run of their seed, or without predictions
(stopped before evaluating, a task without ``predict_fn``), get none.

Usage: ``if add_agreement(results): write_results(path, results)``
"""

from __future__ import annotations

from ..agreement import agreement_vs_fp32
from ..log import logger

__all__ = ["BASELINE", "add_agreement"]

BASELINE = "fp32"


def _is_regression(result) -> bool:
    task = result.task or {}
    if task.get("kind"):
        return task["kind"] == "regression"
    return any(isinstance(v, float) for v in result.eval_predictions or [])


def add_agreement(results: list) -> bool:
    """Set ``agreement_vs_fp32`` on every non-fp32 RunResult that has an fp32 run of its seed.
    Returns whether any was set.

    Usage: ``add_agreement(results)``
    """
    baseline = {r.seed: r for r in results if r.precision == BASELINE}
    changed = False
    for r in results:
        ref = baseline.get(r.seed)
        if r.precision == BASELINE or ref is None or not r.eval_predictions or not ref.eval_predictions:
            continue
        if len(r.eval_predictions) != len(ref.eval_predictions):
            logger.warning("no agreement with fp32 for %s seed %s: %d eval predictions against fp32's %d",
                           r.precision, r.seed, len(r.eval_predictions), len(ref.eval_predictions))
            continue
        # The references are the eval set's labels: the same for both runs unless the data changed.
        labels = r.eval_labels if r.eval_labels and r.eval_labels == ref.eval_labels else None
        r.agreement_vs_fp32 = agreement_vs_fp32(r.precision, r.eval_predictions, ref.eval_predictions, labels,
                                                regression=_is_regression(r))
        changed = True
    return changed
