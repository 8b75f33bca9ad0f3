"""Run a recipe at one or more precisions (and seeds), back to back, and write the results.

The run layer's conductor: ``plan`` checks everything cheap (recipe, options, device,
output directory, ``--resume``) before any work; ``run`` checks the options, prepares the
data once, chooses each run's precision once (``choose_precisions``: the ``--amp`` policy of
``mixft.amp.precision`` handed this machine's facts), makes the ``RunPlan`` for those
precisions (``mixft.runs.plan``: the output directory and ``--resume`` checked, every run's
files and identity written down once), then builds (``mixft.runs.build``), trains and
records each (precision, seed) run, asking the plan where each file goes.
This is what ``scripts/finetune.py`` calls after parsing; notebooks can call it too::

    results = run(RunConfig(recipe="bert-sst2", precisions=["fp32", "bf16"], max_train_samples=500))
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import torch

from mixft import distributed
from mixft.amp.hardware import describe_hardware
from mixft.amp.precision import (
    Precision,
    PrecisionChoice,
    choose_precision,
    precision_row,
    resolve_device,
    resolve_precision,
)
from mixft.callbacks.checkpointer import Checkpointer
from mixft.callbacks.faults import CollapseDetector, InjectNonFinite
from mixft.callbacks.tracker_prepare import prepare_trackers
from mixft.callbacks.trackers import run_name
from mixft.config.file import config_yaml, write_config
from mixft.config.option_rules import check_extra_options
from mixft.config.run_config import RunConfig, with_settled
from mixft.errors import UsageError
from mixft.log import logger
from mixft.recipe import get_recipe
from mixft.report.agreement import add_agreement
from mixft.results import RunResult, write_results
from mixft.runs.build import build_trainer, recorded_config
from mixft.runs.checks import check_before_training, keep_fp32_modules
from mixft.runs.identity import final_weights
from mixft.runs.memory_figures import measure_before_fit
from mixft.runs.outdir import PROBE_REPORT_NAME, PROBE_RESULTS_NAME, OutputLock
from mixft.runs.plan import RunPlan, make_plan
from mixft.runs.predict import predict_and_write, read_predict_file
from mixft.runs.set_aside import set_aside_earlier_run
from mixft.runs.shape import check_run_shape
from mixft.runs.shared_dir import check_shared_output_dir
from mixft.runs.watch import RunWatch
from mixft.train.checkpoint import resume
from mixft.train.hooks import Callback
from mixft.train.pure_bf16 import check_run_options


class RunObserver:
    """What a front end (the CLI, a notebook) wants to hear about a run. Override freely."""

    def on_plan(
        self, cfg: RunConfig, device, precisions: list[Precision], run_info: dict, steps: int | None, hardware: dict
    ) -> None:
        """Called once, after data and model are resolved and before any training.

        ``steps``: optimizer steps planned for one run (None for a loader without a length).
        ``hardware``: ``mixft.amp.hardware.describe_hardware``, with the cached probe under
        ``"probe"`` when this machine has one for the recipe and model. ``run_info`` is the
        recipe's, plus ``"train_rows"``: the examples one epoch of training reads (None
        when the loader cannot tell), against which the effective batch is capped.
        """

    def callbacks(self, cfg: RunConfig, precision: Precision, seed: int) -> Sequence[Callback]:
        """Trainer callbacks for one (precision, seed) run."""
        return ()

    def on_result(self, result: RunResult) -> None:
        """Called after each (precision, seed) run, once its results are written."""

    def stop_requested(self) -> bool:
        """True to end the whole run after the current (precision, seed) run (e.g. Ctrl-C)."""
        return False


class Plan(NamedTuple):
    """What ``plan`` decided: unpack it as ``recipe, cfg, device, precisions, run_plan = plan(cfg)``."""

    recipe: Any
    cfg: RunConfig  # with the recipe's defaults applied, validated
    device: torch.device
    precisions: list[Precision]
    run_plan: RunPlan  # every run's files and identity; what --resume keeps and continues


def plan(cfg: RunConfig) -> Plan:
    """Validate everything cheap before any work, ``--resume``'s files included; returns the ``Plan``.

    "amp" stands for the device's mixed precision here (what ``--probe`` measures); ``run``
    decides what an ``--amp`` run trains in once the model is known (``choose_precisions``).
    Usage: ``recipe, cfg, device, precisions, run_plan = plan(RunConfig(recipe="bert-sst2"))``
    """
    recipe, cfg, device, precisions = _check_options(cfg)
    return Plan(recipe, cfg, device, precisions, make_plan(cfg, [p.name for p in precisions]))


def _check_options(cfg: RunConfig) -> tuple[Any, RunConfig, torch.device, list[Precision]]:
    """Recipe, options, device and precision names (each valid on the device): no file is read."""
    recipe = get_recipe(cfg.recipe)
    if (cfg.save_model or cfg.eval_only) and not hasattr(recipe, "save_model"):
        raise UsageError(f"recipe {cfg.recipe} has no saved-model format: --save-model and --eval-only need one")
    if cfg.eval_only and cfg.model is None:
        raise UsageError("--eval-only needs --model: the directory a --save-model run wrote")
    cfg.check_recipe_options(cfg.recipe, recipe.USES, recipe.DEFAULTS)
    check_extra_options(cfg, recipe)  # extra: only the keys the recipe reads
    cfg = cfg.with_defaults(recipe.DEFAULTS).validate()
    if cfg.fsdp:
        _check_fsdp(cfg)  # before joining a process group: the launcher is what it checks
    device = resolve_device(cfg.device)
    if distributed.init_from_env(device.type) and device.type == "cuda":
        device = torch.device(distributed.local_device("cuda"))  # one GPU per rank
    # "amp" here is the device's mixed precision (what --probe and --compare measure); what an --amp run
    # trains in is decided in run(), once the model is known (choose_precisions).
    precisions = [resolve_precision(name, device, policy=False) for name in cfg.precisions]
    names = [p.name for p in precisions]
    if len(set(names)) != len(names):
        raise UsageError(f"--compare resolves to the same precision twice: {','.join(names)}")
    check_run_options(precisions, fp32_modules=cfg.fp32_modules, init_loss_scale=cfg.init_loss_scale)  # bf16-pure
    return recipe, cfg, device, precisions


def _check_fsdp(cfg: RunConfig) -> None:
    """``--fsdp``'s launcher and combinations, before any work (its blocks: ``check_before_training``).

    The refusals read the flags of each precision's row in the table (no device work before the group).
    """
    from ..train.fsdp import check_launch

    check_launch()  # --resume's checkpoint (a sharded directory, its world size) is make_plan's to check
    # Each precision's row ("amp": the device's mixed precision), named in the messages as it was asked.
    device_type = resolve_device(cfg.device).type
    asked = [(name, precision_row(name, device_type)) for name in cfg.precisions]
    pure = [name for name, row in asked if row.param_dtype is not None]
    if pure:
        # FSDP2's policy already keeps fp32 shards and gathers bf16: bf16 weights to shard is another design.
        raise UsageError(
            f"--fsdp with {', '.join(pure)}: the sharded run keeps fp32 shards and gathers them in "
            "bf16 (FSDP2's mixed-precision policy); use --precision bf16 with --fsdp"
        )
    half = [name for name, row in asked if row.autocast_dtype is not None]  # the pure ones refused above
    if cfg.fp32_modules and half:
        # FSDP gathers every block's weights in the half dtype: an fp32 island would compute in
        # fp32 on rounded weights, which is not what --fp32-modules promises.
        raise UsageError(
            f"--fp32-modules with --fsdp at {', '.join(half)}: the sharded blocks gather their weights "
            "in that dtype, so those modules would not run on fp32 weights; drop one of the two"
        )


def run(cfg: RunConfig, observer: RunObserver | None = None) -> list[RunResult]:
    """Train every (seed, precision) pair; write results.json (and report.md when comparing).

    Usage: ``results = run(RunConfig(recipe="bert-sst2", precisions=["fp32", "bf16"]))``
    """
    observer = observer or RunObserver()
    recipe, cfg, device, checked = _check_options(cfg)
    # Data and model errors surface here, still before training. Notices (offline
    # fallbacks, precisions) are shown only once everything resolved, so an error stays one line.
    prepared = recipe.prepare(cfg)
    # What the recipe could decide only once the model was known (bert-sst2: no packing for a family that does
    # not pack): applied before the plan, so the header, config.yaml, results.json and --resume say what runs.
    cfg = with_settled(cfg, getattr(prepared, "settled", None))
    # The facts the precision policy is handed, gathered once: torch's native bf16/fp16 and
    # the probe cached for this machine, recipe and model (results.json's "hardware").
    hardware = describe_hardware(device)
    probe = _cached_probe(cfg, prepared, device, hardware)
    choices = choose_precisions(cfg, device, hardware, probe)
    precisions = [_chosen(precision, choice, device) for precision, choice in zip(checked, choices)]
    # Output directory and --resume, for the precisions chosen (an --amp run's checkpoint is its precision's):
    # the one plan every later step asks where its files go.
    run_plan = make_plan(cfg, [p.name for p in precisions])
    for notice in getattr(prepared, "notices", ()):
        logger.warning(notice)
    if hardware.get("probe_cache_problem"):  # a cache file there but unreadable: named, not silence
        from mixft.report.probe_result import CacheProblem

        logger.warning(CacheProblem.from_dict(hardware["probe_cache_problem"]).warning())
    for notice in dict.fromkeys(choice.notice for choice in choices if choice.notice):
        logger.warning(notice)
    # Options against the run's shape (warm-up, patience, --load-best, --metric-for-best): exit 2 before any run.
    check_run_shape(recipe, cfg, prepared, device, precisions)
    if cfg.report_to and distributed.is_main_process():  # where each tracker writes, and an MLflow server: exit 2 now
        prepare_trackers(
            cfg.report_to, Path(cfg.output_dir), [run_name(p.name, seed) for seed in cfg.seeds for p in precisions]
        )
    # --fp32-modules' names (exit 2), then the fp16 preflight when due: once, before any run.
    checked = check_before_training(recipe, cfg, prepared, device, precisions, run_plan)
    if cfg.predict_file and distributed.world_size() > 1:
        raise UsageError(
            "--predict-file is not supported under torchrun or accelerate launch: each process would "
            "label only its shard of the file; label it in one process afterwards with --eval-only "
            "--model DIR --predict-file FILE"
        )
    predict_source = read_predict_file(cfg, prepared) if cfg.predict_file else None  # checked before training
    # One run per output directory at a time: a second would overwrite the first's
    # checkpoints. Taken once the input is known good, so bad input leaves no lock file.
    lock = OutputLock(run_plan.out) if distributed.is_main_process() else contextlib.nullcontext()
    with lock:
        check_shared_output_dir(run_plan.out)  # under torchrun: the nodes write into one directory, or exit 2 now
        aside = None
        if distributed.is_main_process() and not cfg.resume:
            # A new run never mixes with an earlier one: all of the earlier run moves aside, together.
            aside = set_aside_earlier_run(
                run_plan.out,
                time.strftime("%Y%m%d-%H%M%S"),
                config_text=config_yaml(dataclasses.replace(cfg, resume=False)),
            )
            if aside:
                logger.warning(aside.notice)
        try:
            return _train_all(
                recipe,
                cfg,
                prepared,
                device,
                list(zip(precisions, choices)),
                run_plan,
                observer,
                hardware,
                predict_source,
                preflight=checked,
            )
        except UsageError:
            # Refused at its first step (a batch too large for memory): the directory is left as it was found.
            back = aside.undo() if aside else None
            if back:
                logger.warning(back)
            raise


def _chosen(checked: Precision, choice: PrecisionChoice, device) -> Precision:
    """What a run trains in: the precision checked at start-up (``_check_options``), resolved once, unless
    ``--amp``'s policy chose another one (fp32 on a CPU without native bf16), resolved here."""
    return checked if choice.precision == checked.name else resolve_precision(choice.precision, device)


def choose_precisions(cfg: RunConfig, device, hardware: dict, probe=None) -> list[PrecisionChoice]:
    """What each precision of ``cfg`` trains in and why: ``mixft.amp.precision.choose_precision`` handed
    this machine's facts (``hardware["native"]``, the cached ``probe`` or None).

    Usage: ``choose_precisions(RunConfig(recipe="bert-sst2", precisions=["amp"]), device, describe_hardware(device))``
    """
    comparing = len(cfg.precisions) > 1
    ratios = probe.step_ratios() if probe else None
    date = probe.measured_at[:10] if probe else None
    problem = hardware.get("probe_cache_problem")  # a cached probe there that could not be read
    choices = []
    for name in cfg.precisions:
        option = f"--compare {','.join(cfg.precisions)}" if comparing else ("--amp" if name == "amp" else None)
        choice = choose_precision(
            name,
            device.type,
            hardware.get("native"),
            probe_ratios=ratios,
            probe_date=date,
            option=option,
            comparing=comparing,
        )
        if problem and name == "amp" and not comparing:  # --amp decided without the probe it would have followed
            from mixft.report.probe_result import CacheProblem

            reason = f"{choice.reason}; {CacheProblem.from_dict(problem).amp_clause()}"
            choice = choice._replace(reason=reason, notice=f"notice: {reason}")
        choices.append(choice)
    return choices


def _train_all(
    recipe,
    cfg: RunConfig,
    prepared,
    device,
    runs: list[tuple[Precision, PrecisionChoice]],
    run_plan: RunPlan,
    observer: RunObserver,
    hardware: dict,
    predict_source=None,
    preflight: dict | None = None,
) -> list[RunResult]:
    precisions = [precision for precision, _ in runs]
    results: list[RunResult] = []
    total = run_plan.total
    planned = False
    for seed in cfg.seeds:
        for (precision, choice), requested in zip(runs, cfg.precisions):
            # --resume: runs that already ended keep their results; the others continue from
            # their checkpoint (or start, if they never got one), as plan() decided.
            kept = run_plan.kept(precision.name, seed)
            if kept is not None:
                report_kept_run(kept, save_model=cfg.save_model)  # a collapse shows its diagnosis again
                if (
                    cfg.save_model
                    and distributed.is_main_process()
                    and (not kept.stopped_early or kept.stop_kind == "early_stopping")
                ):
                    # Finished earlier without --save-model: its final checkpoint holds the weights.
                    model = recipe.build(cfg, prepared, precision, device, seed).model
                    files = run_plan.runs[(precision.name, seed)]
                    model.load_state_dict(final_weights(files.checkpoint))
                    target = files.saved_model
                    recipe.save_model(model, prepared, target)
                    logger.info(
                        "saved the fine-tuned model of the finished %s run to %s (from its final checkpoint)",
                        precision.name,
                        target,
                    )
                results.append(kept)
                continue
            # The header is printed once, when the first run's model and step count exist.
            announce = None if planned else functools.partial(_announce, observer, hardware, cfg, device, precisions)
            result = _train_one(
                recipe,
                cfg,
                prepared,
                device,
                precision,
                seed,
                run_plan,
                observer,
                on_built=announce,
                predict_source=predict_source,
            )
            result.precision_requested, result.precision_reason = requested, choice.reason
            planned = True
            results.append(result)
            # Rewritten after every run: a crash later still leaves the finished runs.
            if distributed.is_main_process():
                write_results(run_plan.results_path, results, hardware=hardware, preflight=preflight)
                # Beside the results it produced (a run that fails at its first step leaves neither):
                # --config this file reproduces the run, from the start (not resuming it).
                write_config(dataclasses.replace(cfg, resume=False), run_plan.config_path)
            observer.on_result(result)  # after the write: a closed terminal cannot lose it
            logger.debug("run %d/%d done: %r", len(results), total, result)
            if observer.stop_requested():
                return results  # results.json holds the runs so far; --resume goes on from there
    if total > 1 and distributed.is_main_process():
        if add_agreement(results):  # every run of the compare is in: fp32's predictions too
            write_results(run_plan.results_path, results, hardware=hardware, preflight=preflight)
        from mixft.report.markdown import write_report
        from mixft.report.plots import write_plots
        from mixft.results import results_document

        write_report(
            results_document(results, hardware=hardware, preflight=preflight), run_plan.out, charts=write_plots
        )
    return results


def _announce(
    observer: RunObserver, hardware: dict, cfg: RunConfig, device, precisions: list[Precision], parts, trainer
) -> None:
    """The run header (``observer.on_plan``), with this machine's cached probe."""
    info = {**parts.run_info, "train_rows": _train_rows(parts.train_loader)}
    observer.on_plan(cfg, device, precisions, info, trainer.total_steps, hardware)


def _train_rows(loader) -> int | None:
    """Examples one epoch of ``loader`` reads, in all processes (a DataLoader's dataset); None if unknown."""
    try:
        return len(loader.dataset)
    except (AttributeError, TypeError):  # a plain iterable of batches: not counted (it may be a one-shot generator)
        return None


def _train_one(
    recipe,
    cfg: RunConfig,
    prepared,
    device,
    precision: Precision,
    seed: int,
    run_plan: RunPlan,
    observer: RunObserver,
    on_built=None,
    predict_source=None,
) -> RunResult:
    """One (precision, seed) run: build its parts and trainer, train (or only evaluate), save what was asked.

    Training keeps the best evaluation (``mixft.runs.watch``: ``--load-best`` ends with its
    weights, so the saved model and the predictions are the best one) and stops early on
    ``--early-stopping-patience``. ``on_built(parts, trainer)`` runs after building, before
    any training (the run header).
    """
    files = run_plan.runs[(precision.name, seed)]  # where this run's files go, what its checkpoints record
    parts = recipe.build(cfg, prepared, precision, device, seed)
    keep_fp32_modules(parts.model, cfg)  # --fp32-modules: before the trainer wraps the model
    # The run's options go to results.json and its trackers from here, never through the loop.
    config = recorded_config(cfg)
    hparams = {**config, "precision": precision.name, "seed": seed}  # the lists' entries this run is
    watch = (
        None if cfg.eval_only else RunWatch.for_run(cfg, parts, precision=precision.name, seed=seed, hparams=hparams)
    )
    reliability = reliability_callbacks(
        cfg,
        seed,
        files.checkpoint,
        dict(files.meta),
        states=watch.states() if watch else None,
        step_name=files.step_checkpoints,
    )
    callbacks = [*observer.callbacks(cfg, precision, seed), *(watch.callbacks if watch else ()), *reliability]
    checkpointer = next((cb for cb in reliability if isinstance(cb, Checkpointer)), None)
    trainer = build_trainer(parts, cfg, precision=precision, device=device, seed=seed, callbacks=callbacks)
    if on_built is not None:
        on_built(parts, trainer)
    if cfg.eval_only:
        result = trainer.evaluate_only()
    else:
        if run_plan.continues(precision.name, seed):
            # make_plan() has checked its CRCs and metadata; the best-model state comes back with it.
            saved = _resume(trainer, files.checkpoint, states=watch.states())
            if checkpointer is not None:
                checkpointer.write_time_s = float(saved.get("checkpoint_time_s") or 0.0)
        memory = measure_before_fit(cfg, prepared, trainer, precision, seed, fresh=run_plan.total > 1)
        with _memory_errors_explained(cfg, device):
            result = watch.finish(trainer, trainer.fit())
        result.checkpoint_time_s = checkpointer.write_time_s if checkpointer is not None else None
        best = result.best or {}
        if best.get("loaded") and (result.last or {}).get("step") != best.get("step"):
            with trainer.untimed():  # the kept predictions must be the best weights', like its "eval"
                trainer.evaluate()
        memory.finish(result, trainer)  # memory breakdown, parameters, eval predictions
    result.config = config
    finished = not result.stopped_early or result.stop_kind == "early_stopping"  # early stopping ends a good model
    if cfg.save_model and not cfg.eval_only and finished:
        target = files.saved_model
        model = _whole_model(recipe, cfg, prepared, precision, seed, trainer) if trainer.fsdp else trainer.module
        if distributed.is_main_process():
            recipe.save_model(model, prepared, target)
            logger.info(
                "saved the fine-tuned model to %s (evaluate it alone with --eval-only --model %s)", target, target
            )
    if predict_source is not None and distributed.is_main_process() and finished:
        target = files.predictions
        result.predict = predict_and_write(trainer, predict_source, target, batch_size=cfg.batch_size * 2)
        logger.info("predictions for %s written to %s", predict_source.path, target)
    return result


def _resume(trainer, checkpoint: Path, states) -> dict:
    """Load the run's checkpoint (already checked by ``make_plan``) into ``trainer``: one file, or under
    ``--fsdp`` every process its shards of the sharded directory (a collective)."""
    if not trainer.fsdp:
        return resume(trainer, checkpoint, verify=False, states=states)
    from mixft.train.sharded_checkpoint import load_sharded_checkpoint

    meta = load_sharded_checkpoint(trainer, checkpoint, verify=False, states=states)
    logger.info("resuming from %s (step %s, epoch %s)", checkpoint, meta.get("step"), meta.get("epoch"))
    return meta


def _whole_model(recipe, cfg: RunConfig, prepared, precision: Precision, seed: int, trainer):
    """A sharded run's model, consolidated into a fresh one-process model of the recipe in process 0 (None
    elsewhere): what ``--save-model`` writes, loadable by one process. A collective: every process calls it."""
    from ..train.fsdp import full_state_dict

    weights = full_state_dict(trainer.module)  # the whole tensors on process 0's CPU, nothing elsewhere
    if not distributed.is_main_process():
        return None
    model = recipe.build(cfg, prepared, precision, torch.device("cpu"), seed).model
    model.load_state_dict(weights)
    return model


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


def _cached_probe(cfg: RunConfig, prepared, device, hardware: dict):
    """This machine's cached probe of the recipe and model, or None; kept in ``hardware["probe"]``
    (results.json, the header's speed line). A cache file there that cannot be used goes to
    ``hardware["probe_cache_problem"]``: said before the run, in the header and in --amp's reason."""
    from mixft.report.probe_result import read_cached_probe

    model = getattr(prepared, "model_description", None) or str(cfg.model)
    result, problem = read_cached_probe(cfg.recipe, model, device=device, hardware=hardware)
    if result is not None:
        hardware["probe"] = result.to_dict()
    if problem is not None:
        hardware["probe_cache_problem"] = problem.to_dict()
    return result


def run_probe(cfg: RunConfig):
    """``--probe``: measure how fast each precision trains the recipe here; write probe.json and probe.md.

    Trains nothing, and leaves a run's results.json and report.md in the same directory alone. The result is cached for this machine, where later runs' headers and
    ``--amp`` notices find it: the cache folder is checked before measuring (UsageError), and a
    cache write that still fails once probe.json is written only warns. Returns the
    ``mixft.report.probe_result.ProbeResult``.

    Usage: ``print(render_probe_table(run_probe(RunConfig(recipe="bert-sst2", probe=True))))``
    """
    from mixft.report.markdown import write_report
    from mixft.report.probe_result import check_cache_dir, keep_probe
    from mixft.results import results_document
    from mixft.runs.probe import probe

    recipe, cfg, device, precisions, _ = plan(cfg)
    check_cache_dir()  # MIXFT_CACHE a file, unwritable: exit 2 now, not after the measurement
    asked = [p.name for p in precisions] if cfg.precisions != ["fp32"] else None  # None: fp32 + the device's AMP
    out = Path(cfg.output_dir)
    with OutputLock(out) if distributed.is_main_process() else contextlib.nullcontext():
        result = probe(cfg, device=device, precisions=asked, save=False)
        if distributed.is_main_process():
            hardware = {**result.hardware, "probe": result.to_dict()}
            write_results(out / PROBE_RESULTS_NAME, [], hardware=hardware)
            write_report(results_document([], hardware=hardware), out, name=PROBE_REPORT_NAME)  # no runs: no charts
            keep_probe(result, kept_in=str(out / PROBE_RESULTS_NAME))  # after OUTPUT_DIR has it: a failure warns
    return result


def report_kept_run(result: RunResult, save_model: bool = False) -> None:
    """Log what ``--resume`` keeps of a finished run that ended early: the collapse and its diagnosis again.

    Usage: ``report_kept_run(run_plan.kept("fp16", 0), save_model=cfg.save_model)``
    """
    if not result.stopped_early or result.stop_kind == "early_stopping":
        return  # early stopping ended a finished model
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


def reliability_callbacks(
    cfg: RunConfig, seed: int, checkpoint: Path, meta: dict, states=None, step_name: str = "checkpoint-step{step}.pt"
) -> list[Callback]:
    """Fault injection, collapse detection and checkpoints for one run (docs/reliability.md).

    The detector comes before the checkpointer: a collapsed state is never saved over
    the last good checkpoint. ``states``: saved with each checkpoint (the best model's).
    """
    callbacks: list[Callback] = []
    if cfg.inject_nonfinite > 0:
        callbacks.append(InjectNonFinite(cfg.inject_nonfinite, seed=seed))
    if cfg.detect_collapse:
        callbacks.append(CollapseDetector(cfg.min_loss_scale, cfg.max_consecutive_skips))
    # One writer per file; --fsdp: every process writes its shards of the sharded directory (a collective).
    if distributed.is_main_process() or cfg.fsdp:
        callbacks.append(
            Checkpointer(
                checkpoint,
                every=cfg.checkpoint_every,
                meta=meta,
                minutes=cfg.checkpoint_minutes,
                keep=cfg.save_total_limit,
                step_name=step_name,
                states=states,
                sharded=cfg.fsdp,
            )
        )
    return callbacks
