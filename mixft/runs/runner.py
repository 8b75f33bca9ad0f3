"""Run a recipe at one or more precisions (and seeds), back to back, and write the results.

The run layer's conductor, in two steps: ``make_plan`` (``mixft.runs.plan``) checks, prepares
and decides everything before any work (each run's resolved precision and why, its files,
what ``--resume`` does with it); ``run`` then takes the output directory (its lock, an
earlier run set aside) and trains what the plan says, run by run: build (``mixft.runs.build``),
train, record (``mixft.runs.record``). The run layer carries the options to results.json;
the loop does not. This is what ``scripts/finetune.py`` calls after parsing; notebooks can
call it too, with the options or with a plan made (and looked at) first::

    results = run(RunConfig(recipe="bert-sst2", precisions=["fp32", "bf16"], max_train_samples=500))
    plan = make_plan(RunConfig(recipe="bert-sst2", precisions=["amp"]))   # print(plan.runs[0].reason)
    results = run(plan)   # trains what it says; the data is not prepared again
"""

from __future__ import annotations

import contextlib
import functools
import time
import weakref

import torch

from mixft import distributed
from mixft.amp.fp32 import keep_in_fp32
from mixft.atomic import WriteFailed
from mixft.config.run_config import RunConfig
from mixft.errors import UsageError
from mixft.log import logger
from mixft.results import RunResult
from mixft.rng import keeps_caller_rng
from mixft.runs.build import build_trainer
from mixft.runs.identity import final_weights
from mixft.runs.memory_figures import measure_before_fit
from mixft.runs.observer import RunObserver
from mixft.runs.outdir import OutputLock
from mixft.runs.plan import PlannedRun, RunPlan, make_plan
from mixft.runs.predict import predict_and_write
from mixft.runs.record import config_text, record_comparison, record_run
from mixft.runs.reliability import RunReliability
from mixft.runs.saved_model import save_kept_model, save_trained_model
from mixft.runs.set_aside import set_aside_earlier_run
from mixft.runs.shared_dir import check_shared_output_dir
from mixft.runs.watch import RunWatch

__all__ = ["run", "RunObserver", "report_kept_run"]


# Plans already trained: a plan read the output directory (and what --resume continues) as it was then.
_TRAINED_PLANS: weakref.WeakSet = weakref.WeakSet()


@keeps_caller_rng  # each run seeds itself; the notebook's own random streams come back as they were
def run(cfg: RunConfig | RunPlan, observer: RunObserver | None = None) -> list[RunResult]:
    """Train every (seed, precision) pair; write results.json (and report.md when comparing).

    ``cfg``: the options, or the ``RunPlan`` ``make_plan`` made of them (trained as it is, its data
    not prepared again). A plan is trained once: it holds the output directory and ``--resume``'s
    checkpoints as they were when it was made (UsageError for a second time: make a new plan).

    Usage: ``results = run(RunConfig(recipe="bert-sst2", precisions=["fp32", "bf16"]))``
    """
    observer = observer or RunObserver()
    if isinstance(cfg, RunPlan):
        plan = cfg
        if plan in _TRAINED_PLANS:
            raise UsageError("this plan was trained already: make_plan(cfg) again to train once more")
    else:
        plan = make_plan(cfg)  # every refusal (exit 2) happens here, before the directory is touched
    # One run per output directory at a time: a second would overwrite the first's
    # checkpoints. Taken once the input is known good, so bad input leaves no lock file.
    with OutputLock.for_this_process(plan.out):
        check_shared_output_dir(plan.out)  # under torchrun: the nodes write into one directory, or exit 2 now
        _TRAINED_PLANS.add(plan)  # from here the directory changes: a plan refused above can still be trained
        aside = None
        if distributed.is_main_process() and not plan.cfg.resume:
            # A new run never mixes with an earlier one: all of the earlier run moves aside, together.
            aside = set_aside_earlier_run(plan.out, time.strftime("%Y%m%d-%H%M%S"), config_text=config_text(plan.cfg))
            if aside:
                logger.warning(aside.notice)
        try:
            return _train_all(plan, observer)
        except UsageError:
            # Refused at its first step (a batch too large for memory): the directory is left as it was found.
            back = aside.undo() if aside else None
            if back:
                logger.warning(back)
            raise
        except WriteFailed as e:  # the line that reports it says where the earlier run went
            e.earlier_run = aside.folder if aside else None
            raise


def _train_all(plan: RunPlan, observer: RunObserver) -> list[RunResult]:
    """Each planned run in order: kept as it finished (``--resume``), or trained; results written after each."""
    results: list[RunResult] = []
    announced = False
    for planned in plan.runs:
        if planned.kept is not None:  # --resume: a run that already ended keeps its results
            kept = _keep(plan, planned)
            results.append(kept)
            if kept.predict is not None and plan.predict_source is not None and distributed.is_main_process():
                record_run(plan, results)  # its new predictions' record, as a trained run's
            observer.on_kept(kept)
            continue
        # The header is printed once, when the first run's model and step count exist.
        announce = None if announced else functools.partial(_announce, observer, plan)
        result = _train_one(plan, planned, observer, on_built=announce)
        announced = True
        _described_as_the_kept_runs(result, [r for r, p in zip(results, plan.runs) if p.kept is not None])
        results.append(result)
        # Rewritten after every run: a crash later still leaves the finished runs.
        if distributed.is_main_process():
            record_run(plan, results)
        observer.on_result(result)  # after the write: a closed terminal cannot lose it
        logger.debug("run %d/%d done: %r", len(results), len(plan.runs), result)
        if observer.stop_requested():
            return results  # results.json holds the runs so far; --resume goes on from there
    if len(plan.runs) > 1 and distributed.is_main_process():
        record_comparison(plan, results)
    return results


def _described_as_the_kept_runs(result: RunResult, kept: list[RunResult]) -> None:
    """A ``--resume`` that spells the model or data path another way (``m`` for ``/abs/m``) uses the same files:
    make_plan's identity check compared them resolved. The runs of one command then describe them alike, as the
    kept runs do (was: report.md's header ``**model** `m, /abs/m``` read as a comparison across two models)."""
    if kept:
        result.model, result.dataset = kept[0].model, kept[0].dataset


def _announce(observer: RunObserver, plan: RunPlan, parts, trainer) -> None:
    """The run header (``observer.on_plan``), with this machine's cached probe."""
    info = {**parts.run_info, "train_rows": _train_rows(parts.train_loader)}
    observer.on_plan(plan.cfg, plan.device, list(plan.precisions), info, trainer.total_steps, plan.hardware)


def _train_rows(loader) -> int | None:
    """Examples one epoch of ``loader`` reads, in all processes (a DataLoader's dataset); None if unknown."""
    try:
        return len(loader.dataset)
    except (AttributeError, TypeError):  # a plain iterable of batches: not counted (it may be a one-shot generator)
        return None


def _train_one(plan: RunPlan, planned: PlannedRun, observer: RunObserver, on_built=None) -> RunResult:
    """One (precision, seed) run: build its parts and trainer, train (or only evaluate), save what was asked.

    Training keeps the best evaluation (``mixft.runs.watch``: ``--load-best`` ends with its
    weights, so the saved model and the predictions are the best one) and stops early on
    ``--early-stopping-patience``. ``on_built(parts, trainer)`` runs after building, before
    any training (the run header).
    """
    cfg, precision, seed = plan.cfg, planned.precision, planned.seed
    parts = _built(plan, planned)
    # The run's options go to results.json and its trackers from here, never through the loop.
    config = dict(plan.recorded_config)  # each result its own copy
    hparams = {**config, "precision": precision.name, "seed": seed}  # the lists' entries this run is
    watch = (
        None if cfg.eval_only else RunWatch.for_run(cfg, parts, precision=precision.name, seed=seed, hparams=hparams)
    )
    states = watch.states() if watch else None
    reliability = RunReliability.for_run(cfg, planned, states=states)
    callbacks = [
        *observer.callbacks(cfg, precision, seed),
        *(watch.callbacks if watch else ()),
        *reliability.callbacks,
        *observer.stop_callbacks(cfg, precision, seed),  # last: the others see the step a Ctrl-C stops at
    ]
    trainer = build_trainer(parts, cfg, precision=precision, device=plan.device, seed=seed, callbacks=callbacks)
    if on_built is not None:
        on_built(parts, trainer)
    if cfg.eval_only:
        result = trainer.evaluate_only()
    else:
        if planned.continues:  # make_plan() has checked its CRCs and metadata; the best-model state comes back too
            reliability.continue_from_checkpoint(trainer, states=states)
        memory = measure_before_fit(cfg, plan.prepared, trainer, precision, seed, fresh=len(plan.runs) > 1)
        with _memory_errors_explained(cfg, plan.device):
            result = watch.finish(trainer, trainer.fit())
        result.checkpoint_time_s = reliability.write_time_s
        best = result.best or {}
        best_reloaded = best.get("loaded") and (result.last or {}).get("step") != best.get("step")
        # Resumed from its final checkpoint (killed, or exit 4, before results.json held it): this process
        # trained and evaluated nothing, and the checkpoint keeps no predictions.
        unpredicted = getattr(trainer, "last_eval_predictions", None) is None and _ended_a_finished_model(result)
        if best_reloaded or (unpredicted and trainer.eval_loader is not None):
            with trainer.untimed():  # the kept predictions must be the final weights', like its "eval"
                trainer.evaluate()
        memory.finish(result, trainer)  # memory breakdown, parameters
    # The final evaluation's predictions (mixft.train.evaluation), trained or --eval-only: fp32's agreement reads them.
    kept = getattr(trainer, "last_eval_predictions", None)
    if kept is not None:
        result.eval_predictions, result.eval_labels = list(kept[0]), list(kept[1])
    result.config = config
    result.precision_requested, result.precision_reason = planned.requested, planned.reason
    finished = _ended_a_finished_model(result)
    if cfg.save_model and not cfg.eval_only and finished:
        save_trained_model(plan, planned, trainer)
    if plan.predict_source is not None and distributed.is_main_process() and finished:
        result.predict = _predict(plan, planned, trainer)
    return result


def _built(plan: RunPlan, planned: PlannedRun):
    """The recipe's parts for one run, its ``--fp32-modules`` kept in fp32 (checked against the first built
    model by make_plan: the names exist), before a trainer wraps the model."""
    parts = plan.recipe.build(plan.cfg, plan.prepared, planned.precision, plan.device, planned.seed)
    if plan.cfg.fp32_modules:
        keep_in_fp32(parts.model, plan.cfg.fp32_modules)  # lasts as long as the model
    return parts


def _keep(plan: RunPlan, planned: PlannedRun) -> RunResult:
    """A run ``--resume`` keeps as it ended. Its final checkpoint's weights (the best evaluation's under
    ``--load-best``; ``make_plan`` checked the file) are what ``--save-model`` saves and what labels a
    ``--predict-file`` given now, as the run itself would have at its end."""
    cfg, kept = plan.cfg, planned.kept
    labels = plan.predict_source is not None
    report_kept_run(kept, save_model=cfg.save_model, predict=labels)  # a collapse shows its diagnosis again
    if not _ended_a_finished_model(kept):
        return kept
    if cfg.save_model:
        save_kept_model(plan, planned)  # finished earlier without --save-model: from its final checkpoint
    if labels and distributed.is_main_process():
        parts = _built(plan, planned)
        parts.model.load_state_dict(final_weights(planned.checkpoint))
        trainer = build_trainer(parts, cfg, precision=planned.precision, device=plan.device, seed=planned.seed)
        kept.predict = _predict(plan, planned, trainer, weights=" (the finished run's final checkpoint)")
    return kept


def _predict(plan: RunPlan, planned: PlannedRun, trainer, weights: str = "") -> dict:
    """``--predict-file`` labelled by ``trainer``'s model: results.json's ``predict``."""
    source, target = plan.predict_source, planned.predictions
    record = predict_and_write(trainer, source, target, batch_size=plan.cfg.batch_size * 2)
    logger.info("predictions for %s written to %s%s", source.path, target, weights)
    return record


@contextlib.contextmanager
def _memory_errors_explained(cfg: RunConfig, device):
    """A batch too large for the device's memory fails at its first step: say so in one line.

    (A CPU allocation larger than the machine fails at once with this error; one that
    only adds up past the memory may instead be ended by the kernel's OOM killer.)
    """
    try:
        yield
    except RuntimeError as e:  # torch.OutOfMemoryError is a RuntimeError too
        text = str(e)
        if not (
            isinstance(e, getattr(torch, "OutOfMemoryError", ()))
            or "can't allocate memory" in text
            or "out of memory" in text.lower()
        ):
            raise
        raise UsageError(
            f"--batch-size {cfg.batch_size} does not fit in {device.type} memory at the first step "
            f"({text.splitlines()[0][:120]}); lower --batch-size and raise --grad-accum to keep the "
            "effective batch"
        ) from None


def report_kept_run(result: RunResult, save_model: bool = False, predict: bool = False) -> None:
    """Log what ``--resume`` keeps of a finished run that ended early: the collapse and its diagnosis again.

    Usage: ``report_kept_run(plan.run("fp16", 0).kept, save_model=cfg.save_model, predict=bool(cfg.predict_file))``
    """
    if _ended_a_finished_model(result):
        return
    label = f"{result.precision} seed {result.seed}"
    logger.warning("training stopped early: %s", result.stopped_early)  # the line the run itself logged
    logger.warning(
        "--resume keeps the %s run as it ended (resuming it would stop the same way); rerun without "
        "--resume to train it again%s",
        label,
        " with the suggested fix" if "diagnosis" in result.stopped_early else "",
    )
    if save_model:
        logger.warning(
            "not saving the model of the %s run: it stopped early, its weights are not a finished model", label
        )
    if predict:
        logger.warning("no predictions from the %s run: it stopped early, its weights are not a finished model", label)


def _ended_a_finished_model(result: RunResult) -> bool:
    """Whether a run ended with a model worth saving and labelling: its budget run, or early stopping
    (which ends a good model); not a collapse, an interruption or a callback's stop."""
    return not result.stopped_early or result.stop_kind == "early_stopping"
