"""``--report-to``'s trackers, one spec each in one table, and the checks of a choice (no tracker imported).

``TRACKERS`` is the one table every reader of a tracker reads: the choices and their help
(``RunConfig``), the package check (``check_trackers``), building the callbacks
(``mixft.callbacks.trackers.build_trackers``), checking where they write before any work
(``mixft.callbacks.tracker_prepare``) and setting an earlier run's stores aside
(``mixft.runs.outdir``, ``mixft.runs.set_aside``). Adding a tracker is one ``Tracker``
subclass in ``mixft.callbacks.trackers``, one spec line here, one extra in pyproject.toml.

Its own module, plain data, so that ``RunConfig`` and the output directory read it without
importing the trackers (``mixft.callbacks.trackers``: torch, the tracker libraries' writers).

Usage: ``check_trackers("tensorboard,mlflow")  # ["tensorboard", "mlflow"], or a UsageError naming the extra``
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from dataclasses import dataclass

from mixft.errors import UsageError


@dataclass(frozen=True)
class TrackerSpec:
    """One tracker: what ``--report-to`` calls it, what it needs, where it writes, which class writes."""

    name: str  # the --report-to name (also the class's KIND, for its messages)
    module: str  # the package that must be importable (looked for, never imported here)
    extra: str  # the mixft extra that installs it: pip install "mixft[<extra>]"
    folder: str | None  # its store under OUTPUT_DIR, set aside with the run; None: it writes elsewhere
    callback: str  # its Tracker subclass in mixft.callbacks.trackers (a name: this table imports no tracker)


#: ``--report-to`` name -> its spec, in the order the help lists them and the checks run.
TRACKERS: dict[str, TrackerSpec] = {
    spec.name: spec
    for spec in (
        TrackerSpec("tensorboard", "tensorboard", "tensorboard", folder="tensorboard", callback="TensorBoardTracker"),
        TrackerSpec("mlflow", "mlflow", "mlflow", folder="mlruns", callback="MLflowTracker"),
        TrackerSpec("trackio", "trackio", "trackio", folder=None, callback="TrackioTracker"),
    )
}

#: The folders the trackers keep under OUTPUT_DIR (``tensorboard``, ``mlruns``).
TRACKER_FOLDERS = tuple(spec.folder for spec in TRACKERS.values() if spec.folder)


def parse_report_to(value: str | Iterable[str] | None) -> list[str]:
    """``"tensorboard,mlflow"`` (or a list) -> ``["tensorboard", "mlflow"]``; ``none``/empty -> ``[]``.

    Usage: ``parse_report_to("TensorBoard, trackio")  # ["tensorboard", "trackio"]``
    """
    if value is None:
        return []
    parts = value.split(",") if isinstance(value, str) else list(value)
    names: list[str] = []
    said_none = False
    for part in parts:
        name = str(part).strip().lower()
        said_none = said_none or name == "none"
        if name and name != "none" and name not in names:
            names.append(name)
    if said_none and names:
        raise UsageError(f"--report-to: none means no tracker; it cannot be combined with {', '.join(names)}")
    unknown = [n for n in names if n not in TRACKERS]
    if unknown:
        raise UsageError(unknown_tracker(unknown[0]))
    return names


def unknown_tracker(name: str) -> str:
    """The message for a name that is not in the table."""
    return f"--report-to: unknown tracker {name!r} (choose from {', '.join(TRACKERS)}, or none)"


def check_trackers(value: str | Iterable[str] | None) -> list[str]:
    """The tracker names, after checking each one's package is installed (call before training).

    Looks for the packages without importing them (no cost when they are there).

    Usage: ``check_trackers("mlflow")`` -> UsageError ``... pip install "mixft[mlflow]"`` when absent
    """
    names = parse_report_to(value)
    for name in names:
        spec = TRACKERS[name]
        if importlib.util.find_spec(spec.module) is None:
            raise UsageError(f'--report-to {name} needs the {spec.module} package: pip install "mixft[{spec.extra}]"')
    return names
