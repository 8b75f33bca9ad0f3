"""The report's sentences about the best model and checkpoint writes (``mixft.report`` places them in its notes).

Usage: ``notes += best_model_notes(doc["runs"])``
"""

from __future__ import annotations

from collections.abc import Sequence


def _label(run: dict, seeds: set) -> str:
    return f"{run.get('precision')}" + (f" seed {run.get('seed')}" if len(seeds) > 1 else "")


def best_model_notes(runs: Sequence[dict]) -> list[str]:
    """Say which evaluation each run's figures come from (``--load-best``) and what checkpoints cost.

    Usage: ``best_model_notes([{"precision": "bf16", "best": {...}, "steps": 63}])``
    """
    notes: list[str] = []
    seeds = {r.get("seed") for r in runs}
    loaded = [r for r in runs if (r.get("best") or {}).get("loaded")]
    if loaded:
        metric = loaded[0]["best"].get("metric")
        where = ", ".join(f"{_label(r, seeds)} at step {r['best'].get('step')} of {r.get('steps')}" for r in loaded)
        notes.append(f"Each precision is compared at its best evaluation by {metric} (`--load-best`): {where}; "
                     "its eval figures are that evaluation's, and so are the saved model and predictions.")
    stopped = [_label(r, seeds) for r in runs if r.get("stop_kind") == "early_stopping"]
    if stopped:
        notes.append(f"Early stopping ended {', '.join(stopped)} before the budget (see below).")
    writes = [(r, r.get("checkpoint_time_s")) for r in runs if isinstance(r.get("checkpoint_time_s"), (int, float))]
    if writes:
        figures = ", ".join(f"{_label(r, seeds)} {t:.1f} s" for r, t in writes)
        notes.append(f"Writing checkpoints took {figures}: not part of the training time, nor of samples/s.")
    return notes
