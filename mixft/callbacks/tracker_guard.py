"""A tracker's failure never costs the run its results.

A tracker writes somewhere mixft does not own (a disk that fills, an MLflow server that
goes away mid-run, a library with its own bugs). ``contained`` wraps each hook of a
tracker (``mixft.callbacks.trackers.Tracker``): the first exception is said in one warning, the
writer is closed quietly and the tracker is off for the rest of the run; training,
checkpoints and results.json go on. ``StopTraining`` and ``KeyboardInterrupt`` pass.

``bounded_mlflow_requests``: MLflow retries an HTTP request 7 times with a growing
back-off and a 120 s timeout (minutes against a closed port, per call); inside the
block a request is retried twice with a 10 s timeout, unless the user set those
variables (``MLFLOW_HTTP_REQUEST_MAX_RETRIES``, ``MLFLOW_HTTP_REQUEST_TIMEOUT``, read by
MLflow per request).

Usage::

    class MyTracker(Tracker):
        @contained
        def on_evaluate(self, trainer, metrics): ...
"""

from __future__ import annotations

import contextlib
import functools
import os

from mixft.log import logger
from mixft.train.hooks import StopTraining

#: During a run: a lost server costs seconds per call, not minutes.
RUN_RETRIES, RUN_TIMEOUT_S = 2, 10


def contained(hook):
    """Decorate a tracker hook ``(self, trainer, *args)``: an exception turns the tracker off, with one warning."""

    @functools.wraps(hook)
    def guarded(self, trainer, *args):
        if getattr(self, "failed", None):
            return None
        try:
            return hook(self, trainer, *args)
        except StopTraining:
            raise
        except Exception as e:  # noqa: BLE001 - whatever the tracker's library raises, the run goes on
            step = getattr(getattr(trainer, "state", None), "step", None)
            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
            self.failed = f"{type(e).__name__}: {first}"
            logger.warning(
                "--report-to %s stopped at step %s: %s; training goes on, results.json is not affected",
                getattr(self, "KIND", type(self).__name__),
                step,
                self.failed,
            )
            _close_quietly(self)
            return None

    return guarded


def _close_quietly(tracker) -> None:
    tracker._pending = []  # nothing more is written
    if not getattr(tracker, "_open_now", False):
        return
    tracker._open_now = False
    try:
        tracker._close()
    except Exception as e:  # noqa: BLE001 - the writer is already broken: closing it may fail too
        logger.debug("closing the failed tracker %s: %s", getattr(tracker, "KIND", "?"), e)


@contextlib.contextmanager
def bounded_mlflow_requests(retries: int = RUN_RETRIES, timeout_s: int = RUN_TIMEOUT_S):
    """Within the block, MLflow's HTTP requests retry ``retries`` times with ``timeout_s``; values the user set are kept.

    Usage: ``with bounded_mlflow_requests(retries=0, timeout_s=5): client.search_experiments(max_results=1)``
    """
    values = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": str(retries), "MLFLOW_HTTP_REQUEST_TIMEOUT": str(timeout_s)}
    added = [key for key in values if key not in os.environ]
    for key in added:
        os.environ[key] = values[key]
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)
