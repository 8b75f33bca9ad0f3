"""Metrics that load offline: `evaluate` modules shipped inside mixft.

Shipped: accuracy, f1 (binary or macro/micro/weighted), matthews_correlation, pearsonr,
spearmanr. ``mixft.metrics.task`` chooses a task's metrics and computes them together.
"""

from __future__ import annotations

from pathlib import Path

from mixft.errors import UsageError

_HERE = Path(__file__).parent
SHIPPED = sorted(p.name for p in _HERE.iterdir() if (p / f"{p.name}.py").is_file())


def load_metric(name: str = "accuracy"):
    """An `evaluate` metric by name, from mixft's own copy (works with no hub).

    Usage: ``metric = load_metric("accuracy"); metric.compute(predictions=[1], references=[1])``
    """
    if name not in SHIPPED:
        raise UsageError(f"unknown metric {name!r}; shipped metrics: {', '.join(SHIPPED)}")
    import evaluate

    return evaluate.load(str(_HERE / name))
