"""Before any work: can each ``--report-to`` tracker write where it will write?

``check_trackers`` (``mixft.callbacks.tracker_names``) knows the packages are installed; this checks
the places: ``OUTPUT_DIR/tensorboard`` (and each run's folder in it) and
``OUTPUT_DIR/mlruns`` are directories or absent, an ``MLFLOW_TRACKING_URI`` answers one
bounded question (no retries, a 5 s timeout: a closed port answers in about 2 s instead of
MLflow's four minutes of retries), trackio's store (``TRACKIO_DIR``) is a directory or
absent. Each failure is one line (exit 2) before the output directory is touched.

Usage::

    prepare_trackers("tensorboard,mlflow", Path("outputs/run"), ["fp32-seed0", "bf16-seed0"])
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from mixft.callbacks.tracker_guard import bounded_mlflow_requests
from mixft.callbacks.tracker_names import parse_report_to
from mixft.errors import UsageError

#: The folders the trackers write under OUTPUT_DIR (mixft.callbacks.trackers.build_trackers).
TENSORBOARD_DIR, MLFLOW_DIR = "tensorboard", "mlruns"
PROBE_TIMEOUT_S = 5


def _must_be_a_directory(tracker: str, path: Path) -> None:
    if path.exists() and not path.is_dir():
        raise UsageError(
            f"--report-to {tracker}: {path} exists and is not a directory; move it away or choose another --output-dir"
        )


def prepare_trackers(report_to, out: Path, run_names: Iterable[str]) -> list[str]:
    """Check where each tracker of ``report_to`` writes; returns the tracker names (UsageError otherwise)."""
    names = parse_report_to(report_to)
    out = Path(out)
    if "tensorboard" in names:
        _must_be_a_directory("tensorboard", out / TENSORBOARD_DIR)
        for name in run_names:
            _must_be_a_directory("tensorboard", out / TENSORBOARD_DIR / name)
    if "mlflow" in names:
        uri = os.environ.get("MLFLOW_TRACKING_URI")
        if uri:
            _probe_mlflow(uri)
        else:
            _must_be_a_directory("mlflow", out / MLFLOW_DIR)
    if "trackio" in names:
        store = os.environ.get("TRACKIO_DIR")
        if store:
            _must_be_a_directory("trackio", Path(store).expanduser())
    return names


def _probe_mlflow(uri: str) -> None:
    """One bounded question to the tracking store; UsageError naming the URI and why it does not answer."""
    from mlflow import MlflowClient

    try:
        with bounded_mlflow_requests(retries=0, timeout_s=PROBE_TIMEOUT_S), _allow_file_store():
            MlflowClient(tracking_uri=uri).search_experiments(max_results=1)
    except Exception as e:  # noqa: BLE001 - any failure is the answer
        text = (str(e).strip().splitlines() or [type(e).__name__])[0]
        why = "connection refused" if "refused" in text.lower() else f"{type(e).__name__}: {text[:160]}"
        raise UsageError(
            f"--report-to mlflow: MLFLOW_TRACKING_URI {uri} does not answer ({why}); start the server, or "
            "unset MLFLOW_TRACKING_URI to log into OUTPUT_DIR/mlruns"
        ) from None


class _allow_file_store:
    """MLflow 3 refuses a file store unless told (as ``MLflowTracker`` tells it, for the moment it builds one)."""

    def __enter__(self):
        self.old = os.environ.get("MLFLOW_ALLOW_FILE_STORE")
        os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"

    def __exit__(self, *exc):
        if self.old is None:
            os.environ.pop("MLFLOW_ALLOW_FILE_STORE", None)
        else:
            os.environ["MLFLOW_ALLOW_FILE_STORE"] = self.old
