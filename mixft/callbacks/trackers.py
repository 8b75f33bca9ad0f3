"""``--report-to tensorboard,mlflow,trackio``: experiment trackers as callbacks, all local.

Each tracker writes through its library's own writer (``torch.utils.tensorboard``'s
``SummaryWriter``, ``mlflow.MlflowClient`` on a ``file:`` store, ``trackio``):

- per optimizer step: ``train/loss``, ``train/learning_rate``, ``train/loss_scale`` (with a
  GradScaler), ``train/grad_norm``, ``train/skipped`` (1 for a skipped step). The step's
  tensors stay on the device and are read together every ``every`` steps (one host
  sync, not one per step); non-finite values (a skipped step's norm) are left out of the
  curves, ``train/skipped`` says why;
- per evaluation: every numeric metric as ``eval/<name>``;
- once: the run's configuration and the hardware as parameters.

A run continued with ``--resume`` keeps writing its tracker run: each tracker's
``state_dict()`` (the MLflow run id, the trackio run name) is saved with every checkpoint
(``mixft.runs.watch``) and read back before training goes on. The steps between that
checkpoint and the stop are logged again, with the values they had (a resumed run is
bit-identical). TensorBoard's folder is the run's own: it needs nothing.

Each precision/seed run of a comparison is its own tracker run named ``run_name(precision,
seed)`` (``fp32-seed0``, ``bf16-seed0``) under one directory, so TensorBoard overlays them:
``tensorboard --logdir OUTPUT_DIR/tensorboard``; ``mlflow ui --backend-store-uri
OUTPUT_DIR/mlruns``; ``trackio show --project NAME``.

Usage::

    names = check_trackers("tensorboard,mlflow")         # before any training: UsageError if absent
    callbacks = build_trackers(names, "outputs/run", run_name("bf16", 0))
    Trainer(..., callbacks=callbacks).fit()
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from mixft.callbacks.tracker_guard import bounded_mlflow_requests, contained
from mixft.callbacks.tracker_names import (  # noqa: F401 (check_trackers, parse_report_to: re-exported)
    TRACKERS,
    TrackerSpec,
    check_trackers,
    parse_report_to,
    unknown_tracker,
)
from mixft.distributed import is_main_process
from mixft.errors import UsageError
from mixft.log import logger
from mixft.train.hooks import Callback

#: Steps between reads of the device tensors (loss, gradient norm).
DEFAULT_EVERY = 20
#: Seconds the start-up question to an MLflow server may take (``MLflowTracker.prepare``).
PROBE_TIMEOUT_S = 5


def run_name(precision: str, seed: int) -> str:
    """One compared run's tracker name: the precision and the seed, e.g. ``bf16-seed0``."""
    return f"{precision}-seed{seed}"


def directory_project(out: str | os.PathLike) -> str:
    """The MLflow experiment / trackio project of an output directory: its name and 8 hex digits of its
    absolute path, so two directories of one name (``a/run``, ``b/run``) never share one.

    Usage: ``directory_project("outputs/run")  # "run-3f2a9c1e"``
    """
    import hashlib

    path = Path(out).resolve()
    return f"{path.name or 'mixft'}-{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"


def build_trackers(
    names: Iterable[str],
    output_dir: str | os.PathLike,
    name: str,
    *,
    hparams: Mapping[str, Any] | None = None,
    hardware: Mapping[str, Any] | None = None,
    every: int = DEFAULT_EVERY,
    project: str | None = None,
) -> list[Tracker]:
    """The tracker callbacks for ``names`` (from ``check_trackers``), writing under ``output_dir``.

    ``hparams``: the run's options, as the run layer hands them (default: the trainer's precision and
    seed); ``hardware`` defaults to ``mixft.amp.hardware.describe_hardware``. Under data parallelism
    only the main process tracks (the others get ``[]``). ``project`` names the MLflow
    experiment and the trackio project (default: ``directory_project(output_dir)``); their run
    names carry the start time (``fp32-seed0-20261125-054817``).

    Usage: ``build_trackers(["tensorboard"], "outputs/run", run_name("fp32", 0))``
    """
    if not is_main_process():
        return []
    out = Path(output_dir)
    project = project or directory_project(out)
    # MLflow and trackio keep runs in one store for every directory: the start time tells two
    # runs of one directory apart (TensorBoard's folder is the run's own, set aside with it).
    started = f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    made: list[Tracker] = []
    for tracker in names:
        spec = TRACKERS.get(tracker)
        if spec is None:
            raise UsageError(unknown_tracker(tracker))
        made.append(
            tracker_class(spec).for_run(
                tracker_folder(spec, out),
                name,
                started=started,
                project=project,
                hparams=hparams,
                hardware=hardware,
                every=every,
            )
        )
    return made


def tracker_class(spec: TrackerSpec) -> type[Tracker]:
    """The ``Tracker`` subclass a spec names (``TRACKERS["mlflow"]`` -> ``MLflowTracker``).

    The table names its class rather than holding it, so that reading the table imports no
    tracker; the class is this module's, found here.

    Usage: ``tracker_class(TRACKERS["tensorboard"])  # TensorBoardTracker``
    """
    found = globals().get(spec.callback)
    if not (isinstance(found, type) and issubclass(found, Tracker)):
        raise TypeError(f"tracker {spec.name!r}: {spec.callback!r} is not a Tracker in {__name__}")
    return found


def tracker_folder(spec: TrackerSpec, out: str | os.PathLike) -> Path | None:
    """Where the tracker of ``spec`` keeps its store under ``out``; None when it writes elsewhere."""
    return Path(out) / spec.folder if spec.folder else None


def flat_params(values: Mapping[str, Any], prefix: str = "") -> dict[str, str | int | float | bool]:
    """Nested config/hardware -> ``{"a.b": scalar}``: what trackers take as parameters.

    Lists become their text (``["fp32", "bf16"]`` -> ``"fp32,bf16"``), None ``"None"``.
    """
    flat: dict[str, str | int | float | bool] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flat_params(value, name + "."))
        elif isinstance(value, (list, tuple)):
            flat[name] = ",".join(str(v) for v in value)
        elif isinstance(value, (bool, int, float, str)):
            flat[name] = value
        else:
            flat[name] = str(value)
    return flat


class Tracker(Callback):
    """What every tracker shares: buffer the steps, read them every ``every`` steps, log evaluations.

    A subclass writes: ``_open(trainer)``, ``_log_params(params)``,
    ``_log_metrics(step, {name: float})``, ``_close()``; it says how one run's tracker is made
    (``for_run``) and, when its folder is not all, what to check before any work (``prepare``).
    Its spec (``mixft.callbacks.tracker_names.TRACKERS``) names it; ``KIND`` is the spec's name.

    A tracker's failure never costs the run (a full disk, a server gone mid-run, a bug in
    the tracker's library): the first exception in a hook is said in one warning, the
    writer is closed quietly, and the tracker is off for the rest of the run; training
    and results.json go on (``mixft.callbacks.tracker_guard``).
    """

    KIND = "tracker"  # the --report-to name, for messages

    def __init__(
        self,
        name: str,
        *,
        hparams: Mapping[str, Any] | None = None,
        hardware: Mapping[str, Any] | None = None,
        every: int = DEFAULT_EVERY,
    ):
        if not (isinstance(every, int) and every >= 1):
            raise ValueError(f"every must be a positive integer, got {every!r}")
        self.name = name
        self.hparams, self.hardware, self.every = hparams, hardware, every
        self._pending: list[tuple[int, torch.Tensor, torch.Tensor, float, float | None, bool]] = []
        self._open_now = False
        #: Set by ``_open`` when it reopened the run a checkpoint named (its parameters are logged already).
        self.continued = False

    # ------------------------------------------------------------ from the spec
    @classmethod
    def for_run(cls, folder: Path | None, name: str, *, started: str, project: str, **kwargs) -> Tracker:
        """One run's tracker (``build_trackers``): ``folder`` is the spec's store under OUTPUT_DIR
        (None for a tracker that writes elsewhere), ``name`` the run's name (``bf16-seed0``),
        ``started`` the name with the start time, ``project`` the directory's project; ``kwargs``
        are ``Tracker``'s (hparams, hardware, every)."""
        raise NotImplementedError

    @classmethod
    def prepare(cls, folder: Path | None, run_names: Sequence[str]) -> list[Path]:
        """Before any work: the folders this tracker will write in, each of which must be a directory
        or absent (``mixft.callbacks.tracker_prepare`` checks them); a subclass checks here whatever
        else it needs (a UsageError). Default: its store under OUTPUT_DIR."""
        return [folder] if folder is not None else []

    # -------------------------------------------------------------- the hooks
    @contained
    def on_train_begin(self, trainer) -> None:
        if self._open_now:  # a second fit() with the same callback keeps writing the same run
            return
        self._open_now = True  # set first: a failure below still closes what _open made
        self._open(trainer)
        if not self.continued:
            self._log_params(self._params(trainer))

    @contained
    def on_step_end(self, trainer, info) -> None:
        self._pending.append(
            (info.step, info.loss.detach(), info.grad_norm.detach(), info.lr, info.loss_scale, info.skipped)
        )
        if len(self._pending) >= self.every:
            self.flush()

    @contained
    def on_evaluate(self, trainer, metrics: dict[str, Any]) -> None:
        self.flush()  # the steps before this evaluation first: each writer sees steps in order
        values = {
            f"eval/{k}": float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        self._write(trainer.state.step, values)

    @contained
    def on_train_end(self, trainer, result) -> None:
        self.close()

    # ---------------------------------------------------------- checkpoints
    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps so that ``--resume`` writes on in the same tracker run (default: nothing)."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Read back before ``fit`` opens the tracker (``mixft.train.checkpoint.resume``)."""

    # ------------------------------------------------------------ the buffer
    def flush(self) -> None:
        """Write the buffered steps: their device tensors are read here, in one transfer."""
        if not self._pending or not self._open_now:
            return
        pending, self._pending = self._pending, []
        read = torch.stack(
            [torch.stack([loss.float().reshape(()), norm.float().reshape(())]) for _, loss, norm, *_ in pending]
        ).tolist()
        for (step, _, _, lr, scale, skipped), (loss, norm) in zip(pending, read):
            values = {
                "train/loss": loss,
                "train/learning_rate": lr,
                "train/grad_norm": norm,
                "train/skipped": float(skipped),
            }
            if scale is not None:
                values["train/loss_scale"] = scale
            self._write(step, values)

    def close(self) -> None:
        """Flush and close the writer (idempotent: call it also when training ends in an error)."""
        if not self._open_now:
            return
        try:
            self.flush()
        finally:
            self._open_now = False
            self._close()

    def _write(self, step: int, values: dict[str, float]) -> None:
        finite = {k: float(v) for k, v in values.items() if v is not None and math.isfinite(v)}
        if finite:
            self._log_metrics(step, finite)

    def _params(self, trainer) -> dict[str, Any]:
        # The run layer hands a run's options (and its precision and seed) at construction; without them, the
        # trainer's precision and seed are what a tracker knows of the run.
        if self.hparams is not None:
            config = dict(self.hparams)
        else:
            config = {"precision": trainer.precision.name, "seed": trainer.seed}
        hardware = self.hardware
        if hardware is None:
            from mixft.amp.hardware import describe_hardware

            hardware = describe_hardware(trainer.device.type)
        return flat_params({"config": config, "hardware": hardware})

    # ------------------------------------------------------- for subclasses
    def _open(self, trainer) -> None:
        raise NotImplementedError

    def _log_params(self, params: dict[str, Any]) -> None:
        raise NotImplementedError

    def _log_metrics(self, step: int, values: dict[str, float]) -> None:
        raise NotImplementedError

    def _close(self) -> None:
        raise NotImplementedError


class TensorBoardTracker(Tracker):
    """Event files under ``log_dir/<name>``: one TensorBoard run per precision/seed.

    Usage: ``TensorBoardTracker("outputs/run/tensorboard", "bf16-seed0")``
    """

    KIND = "tensorboard"

    def __init__(self, log_dir: str | os.PathLike, name: str, **kwargs):
        super().__init__(name, **kwargs)
        self.log_dir = Path(log_dir) / name
        self.writer = None

    @classmethod
    def for_run(cls, folder, name, *, started, project, **kwargs) -> TensorBoardTracker:
        return cls(folder, name, **kwargs)  # the run's own folder: no start time needed

    @classmethod
    def prepare(cls, folder, run_names) -> list[Path]:
        return [folder, *(folder / name for name in run_names)]

    def _open(self, trainer) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(self.log_dir))

    def _log_params(self, params: dict[str, Any]) -> None:
        from torch.utils.tensorboard.summary import hparams

        # The HParams tab's summaries, in this run's own event file (add_hparams would
        # start another run in a sub-directory).
        for summary in hparams(params, {}):
            self.writer.file_writer.add_summary(summary)
        self.writer.add_text("config", "\n".join(f"    {k}: {v}" for k, v in params.items()))

    def _log_metrics(self, step: int, values: dict[str, float]) -> None:
        for key, value in values.items():
            self.writer.add_scalar(key, value, global_step=step)

    def _close(self) -> None:
        if self.writer is not None:
            self.writer.close()


class MLflowTracker(Tracker):
    """An MLflow run per precision/seed in a local ``file:`` store (``mlflow ui --backend-store-uri DIR``).

    ``tracking_uri`` replaces the local store (e.g. ``sqlite:///mlflow.db``); the
    ``MLFLOW_TRACKING_URI`` environment variable does too.

    Usage: ``MLflowTracker("outputs/run/mlruns", "fp32-seed0", experiment="run")``
    """

    KIND = "mlflow"
    MAX_METRICS, MAX_PARAMS, MAX_VALUE = 1000, 100, 6000  # MLflow's log_batch limits

    def __init__(
        self,
        store_dir: str | os.PathLike,
        name: str,
        *,
        experiment: str = "mixft",
        tracking_uri: str | None = None,
        **kwargs,
    ):
        super().__init__(name, **kwargs)
        self.tracking_uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or Path(store_dir).resolve().as_uri()
        self.experiment = experiment
        self.client = None
        self.run_id: str | None = None
        self._resume_id: str | None = None  # the run a checkpoint names (load_state_dict)

    @classmethod
    def for_run(cls, folder, name, *, started, project, **kwargs) -> MLflowTracker:
        return cls(folder, started, experiment=project, **kwargs)

    @classmethod
    def prepare(cls, folder, run_names) -> list[Path]:
        uri = os.environ.get("MLFLOW_TRACKING_URI")
        if uri:  # a server (or another store) instead of OUTPUT_DIR/mlruns: it must answer now
            _probe_mlflow(uri)
            return []
        return [folder]

    def _open(self, trainer) -> None:
        from mlflow import MlflowClient

        # MLflow 3 keeps the file store working but refuses it unless told: the opt-out is
        # read when the store is built, so it is set only for that moment.
        with _env(MLFLOW_ALLOW_FILE_STORE="true"), bounded_mlflow_requests():
            self.client = MlflowClient(tracking_uri=self.tracking_uri)
            found = self.client.get_experiment_by_name(self.experiment)
            experiment_id = found.experiment_id if found else self.client.create_experiment(self.experiment)
            if self._resume_id is not None and self._reopen(self._resume_id, experiment_id):
                return
            self.run_id = self.client.create_run(experiment_id, run_name=self.name).info.run_id

    def _reopen(self, run_id: str, experiment_id: str) -> bool:
        """Continue the checkpoint's run when the store still holds it, live and in this experiment."""
        try:
            run = self.client.get_run(run_id)
        except Exception as e:  # noqa: BLE001 - a run deleted for good, or a store that lost it
            logger.warning(
                "--report-to mlflow: run %s is not in %s (%s); logging into a new run",
                run_id,
                self.tracking_uri,
                type(e).__name__,
            )
            return False
        if run.info.experiment_id != experiment_id or run.info.lifecycle_stage != "active":
            logger.warning("--report-to mlflow: run %s was deleted or moved; logging into a new run", run_id)
            return False
        self.client.update_run(run_id, status="RUNNING")
        self.run_id, self.name, self.continued = run_id, run.info.run_name, True
        return True

    def state_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "tracking_uri": self.tracking_uri} if self.run_id else {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        # A run in another store (MLFLOW_TRACKING_URI changed since) cannot be continued: a new run, as before.
        if state.get("run_id") and state.get("tracking_uri") == self.tracking_uri:
            self._resume_id = str(state["run_id"])

    def _log_params(self, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(k, str(v)[: self.MAX_VALUE]) for k, v in params.items()]
        with bounded_mlflow_requests():
            for i in range(0, len(items), self.MAX_PARAMS):
                self.client.log_batch(self.run_id, params=items[i : i + self.MAX_PARAMS])

    def _log_metrics(self, step: int, values: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(k, v, now, step) for k, v in values.items()]
        with bounded_mlflow_requests():
            for i in range(0, len(items), self.MAX_METRICS):
                self.client.log_batch(self.run_id, metrics=items[i : i + self.MAX_METRICS])

    def _close(self) -> None:
        if self.client is None or self.run_id is None:
            return  # _open failed before the run existed
        with bounded_mlflow_requests():
            self.client.set_terminated(self.run_id)


def _probe_mlflow(uri: str) -> None:
    """One bounded question to the tracking store (no retries, a 5 s timeout: a closed port answers in
    about 2 s instead of MLflow's four minutes of retries); UsageError naming the URI and why it does not answer."""
    from mlflow import MlflowClient

    try:
        with bounded_mlflow_requests(retries=0, timeout_s=PROBE_TIMEOUT_S), _env(MLFLOW_ALLOW_FILE_STORE="true"):
            MlflowClient(tracking_uri=uri).search_experiments(max_results=1)
    except Exception as e:  # noqa: BLE001 - any failure is the answer
        text = (str(e).strip().splitlines() or [type(e).__name__])[0]
        why = "connection refused" if "refused" in text.lower() else f"{type(e).__name__}: {text[:160]}"
        raise UsageError(
            f"--report-to mlflow: MLFLOW_TRACKING_URI {uri} does not answer ({why}); start the server, or "
            f"unset MLFLOW_TRACKING_URI to log into OUTPUT_DIR/{TRACKERS[MLflowTracker.KIND].folder}"
        ) from None


class TrackioTracker(Tracker):
    """A trackio run per precision/seed in a local project (``trackio show --project NAME``).

    trackio keeps its local database where ``TRACKIO_DIR`` says (read when trackio is
    first imported; default ``~/.cache/huggingface/trackio``).

    Usage: ``TrackioTracker("my-experiment", "bf16-seed1")``
    """

    KIND = "trackio"

    def __init__(self, project: str, name: str, **kwargs):
        super().__init__(name, **kwargs)
        self.project = project
        self.run = None
        self._resume = "never"  # "allow" once a checkpoint named this run (load_state_dict)

    @classmethod
    def for_run(cls, folder, name, *, started, project, **kwargs) -> TrackioTracker:
        return cls(project, started, **kwargs)

    @classmethod
    def prepare(cls, folder, run_names) -> list[Path]:
        store = os.environ.get("TRACKIO_DIR")  # trackio's own store, outside OUTPUT_DIR
        return [Path(store).expanduser()] if store else []

    def _open(self, trainer) -> None:
        pass  # trackio takes the parameters when the run starts: _log_params starts it

    def _log_params(self, params: dict[str, Any]) -> None:
        import trackio

        with _quiet():  # trackio prints its own notices; the CLI owns the terminal
            self.run = trackio.init(
                project=self.project,
                name=self.name,
                config=params,
                resume=self._resume,
                embed=False,
                auto_log_gpu=False,
                auto_log_cpu=False,
            )

    def _log_metrics(self, step: int, values: dict[str, float]) -> None:
        with _quiet():
            self.run.log(values, step=step)

    def state_dict(self) -> dict[str, Any]:
        return {"project": self.project, "name": self.name}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        # trackio finds a run by project and name: the checkpoint's name (with its start time) goes on.
        if state.get("project") == self.project and state.get("name"):
            self.name, self._resume = str(state["name"]), "allow"

    def _close(self) -> None:
        import trackio

        if self.run is None:
            return  # trackio.init failed: nothing to finish
        with _quiet():
            # trackio.finish() also forgets the run; run.finish() alone leaves it "current",
            # and trackio's exit handler finishes it again (printing as it does).
            current = getattr(getattr(trackio, "context_vars", None), "current_run", None)
            if current is not None and current.get() is self.run:
                trackio.finish()
            else:
                self.run.finish()


@contextlib.contextmanager
def _env(**values: str):
    """Set environment variables for the block only."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


@contextlib.contextmanager
def _quiet():
    """Route a library's prints to mixft's logger (debug) instead of the terminal."""
    captured = io.StringIO()
    try:
        with contextlib.redirect_stdout(captured):
            yield
    finally:
        for line in captured.getvalue().splitlines():
            if line.strip():
                logger.debug("%s", line)
