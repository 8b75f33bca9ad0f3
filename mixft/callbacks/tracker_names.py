"""``--report-to``'s names and the packages they need, checked before any work (no tracker imported).

Its own module so that ``RunConfig.validate`` checks ``--report-to`` without importing the
trackers themselves (``mixft.callbacks.trackers``: torch, the hardware description...).

Usage: ``check_trackers("tensorboard,mlflow")  # ["tensorboard", "mlflow"], or a UsageError naming the extra``
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable

from mixft.errors import UsageError

#: ``--report-to`` name -> (the module that must be importable, the mixft extra that installs it).
TRACKERS = {
    "tensorboard": ("tensorboard", "tensorboard"),
    "mlflow": ("mlflow", "mlflow"),
    "trackio": ("trackio", "trackio"),
}


def parse_report_to(value: str | Iterable[str] | None) -> list[str]:
    """``"tensorboard,mlflow"`` (or a list) -> ``["tensorboard", "mlflow"]``; ``none``/empty -> ``[]``.

    Usage: ``parse_report_to("TensorBoard, trackio")  # ["tensorboard", "trackio"]``
    """
    if value is None:
        return []
    parts = value.split(",") if isinstance(value, str) else list(value)
    names: list[str] = []
    for part in parts:
        name = str(part).strip().lower()
        if name and name != "none" and name not in names:
            names.append(name)
    unknown = [n for n in names if n not in TRACKERS]
    if unknown:
        raise UsageError(f"--report-to: unknown tracker {unknown[0]!r} (choose from {', '.join(TRACKERS)}, or none)")
    return names


def check_trackers(value: str | Iterable[str] | None) -> list[str]:
    """The tracker names, after checking each one's package is installed (call before training).

    Looks for the packages without importing them (no cost when they are there).

    Usage: ``check_trackers("mlflow")`` -> UsageError ``... pip install "mixft[mlflow]"`` when absent
    """
    names = parse_report_to(value)
    for name in names:
        module, extra = TRACKERS[name]
        if importlib.util.find_spec(module) is None:
            raise UsageError(f'--report-to {name} needs the {module} package: pip install "mixft[{extra}]"')
    return names
