"""Before any work: can each ``--report-to`` tracker write where it will write?

``check_trackers`` (``mixft.callbacks.tracker_names``) knows the packages are installed; this checks
the places, tracker by tracker from its spec: each folder the tracker will write in
(``Tracker.prepare``: its store under OUTPUT_DIR, ``OUTPUT_DIR/tensorboard`` and each run's
folder in it, trackio's ``TRACKIO_DIR``) is a directory or absent, and what a tracker checks
itself answers (an ``MLFLOW_TRACKING_URI``: one bounded question, no retries, a 5 s timeout).
Each failure is one line (exit 2) before the output directory is touched.

Usage::

    prepare_trackers("tensorboard,mlflow", Path("outputs/run"), ["fp32-seed0", "bf16-seed0"])
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from mixft.callbacks.tracker_names import TRACKERS, parse_report_to
from mixft.callbacks.trackers import tracker_class, tracker_folder
from mixft.errors import UsageError


def _must_be_a_directory(tracker: str, path: Path) -> None:
    if path.exists() and not path.is_dir():
        raise UsageError(
            f"--report-to {tracker}: {path} exists and is not a directory; move it away or choose another --output-dir"
        )


def prepare_trackers(report_to, out: Path, run_names: Iterable[str]) -> list[str]:
    """Check where each tracker of ``report_to`` writes; returns the tracker names (UsageError otherwise)."""
    names = parse_report_to(report_to)
    run_names = list(run_names)
    for spec in TRACKERS.values():  # the table's order, whatever order the option gave
        if spec.name in names:
            for path in tracker_class(spec).prepare(tracker_folder(spec, out), run_names):
                _must_be_a_directory(spec.name, path)
    return names
