"""The run plan: everything a command decides before any training, made once by ``make_plan``.

``make_plan(cfg)`` checks the options (``mixft.runs.options``), prepares the data once,
gathers the machine's facts (torch's native bf16/fp16, the probe cached for this recipe and
model, or measured now where ``--amp`` needs it: ``measures_first``), chooses and resolves each
run's precision once with the reason it was chosen (``mixft.amp.precision.choose_precision``),
checks the output directory and ``--resume``, and runs every check that needs the model before
any run (the options against the run's shape, the trackers' folders, ``--fp32-modules``' names,
the fp16 preflight, the ``--predict-file``). What it returns is the one object the runner
trains from: a ``RunPlan`` with one ``PlannedRun`` per (precision, seed) run, in the order they train,
each with its resolved ``Precision``, its reason, its files and what ``--resume`` does
with it. ``mixft.runs.outdir`` and ``mixft.runs.identity`` keep the rules (the names, the
options that identify a run); this module holds the answers for one command.

Every refusal is a UsageError (exit 2 from the CLI) raised here, before the output
directory is locked or anything in it moves. The notices (offline fallbacks, what
``--amp`` chose and why) are logged once everything resolved, so an error stays one line
(``--amp``'s first measurement alone says that it measures, before the checks that need the model).

Usage::

    plan = make_plan(RunConfig(recipe="bert-sst2", precisions=["fp32", "bf16"], seeds=[0, 1]))
    plan.run("bf16", 1).checkpoint     # OUTPUT_DIR/checkpoint-bf16-seed1.pt
    plan.run("bf16", 1).precision      # the resolved Precision the Trainer takes as it is
    plan.run("fp32", 0).kept           # the finished run --resume keeps, or None
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from mixft import distributed
from mixft.amp.hardware import describe_hardware
from mixft.amp.precision import Precision, PrecisionChoice, choose_precision, resolve_precision
from mixft.callbacks.tracker_prepare import prepare_trackers
from mixft.callbacks.trackers import run_name
from mixft.config.run_config import RunConfig, with_settled
from mixft.errors import UsageError
from mixft.log import logger
from mixft.results import RunResult
from mixft.rng import keeps_caller_rng
from mixft.runs.checks import check_before_training
from mixft.runs.identity import recorded_config, resume_runs, run_meta
from mixft.runs.options import check_options
from mixft.runs.outdir import check_output_dir, planned_entries, run_names
from mixft.runs.predict import read_predict_file
from mixft.runs.set_aside import check_inputs_stay
from mixft.runs.shape import check_run_shape

__all__ = ["PlannedRun", "RunPlan", "make_plan", "plan_runs", "choose_precisions", "measures_first"]


@dataclass(frozen=True)
class PlannedRun:
    """One (precision, seed) run of the plan: what it trains in and why, where its files go, what --resume does.

    ``meta``: what its checkpoints record and a ``--resume`` must match (``run_meta``).
    ``kept``: the finished run ``--resume`` keeps as results.json holds it (None: this run trains);
    ``continues``: it continues from its (already checked) checkpoint; otherwise it starts.
    """

    precision: Precision  # resolved once: the Trainer takes it as it is
    seed: int
    requested: str  # as asked ("amp", "bf16"): results.json's precision_requested
    reason: str  # why it trains in this precision: results.json's precision_reason
    checkpoint: Path  # a .dcp directory under --fsdp
    step_checkpoints: str  # the kept step checkpoints' name, "{step}" to fill (beside ``checkpoint``)
    saved_model: Path
    predictions: Path | None  # where --predict-file's labels go (None without one)
    meta: Mapping[str, Any]
    kept: RunResult | None = None
    continues: bool = False


@dataclass(frozen=True, eq=False)  # a plan is itself (the runner trains each plan once), not its fields
class RunPlan:
    """What a command trains and how, decided before any work (``make_plan``); the runner only follows it.

    ``cfg``: the options with the recipe's defaults and what the recipe settled once the model
    was known; ``prepared``: the recipe's data, prepared once for every run; ``hardware``:
    results.json's ``hardware`` (``describe_hardware``, the cached probe under ``"probe"``);
    ``recorded_config``: results.json's ``config`` of every run, its data files fingerprinted once;
    ``preflight``: results.json's ``preflight`` (None when it did not run);
    ``predict_source``: ``--predict-file`` read and checked (None without one).
    """

    recipe: Any
    cfg: RunConfig
    device: torch.device
    prepared: Any
    hardware: dict
    out: Path  # OUTPUT_DIR
    precisions: tuple[Precision, ...]  # what each seed trains, in order (the header's, the checks')
    runs: tuple[PlannedRun, ...]  # in the order they train: each seed, its precisions as asked
    recorded_config: Mapping[str, Any]  # what every run records of the options (``identity.recorded_config``)
    preflight: dict | None = None
    predict_source: Any = None

    def run(self, precision: str, seed: int) -> PlannedRun:
        """The planned run of this precision and seed (KeyError when the plan has none)."""
        for planned in self.runs:
            if planned.precision.name == precision and planned.seed == seed:
                return planned
        raise KeyError((precision, seed))


@keeps_caller_rng  # building the model to check it seeds: the caller's random streams come back as they were
def make_plan(cfg: RunConfig) -> RunPlan:
    """Check, prepare and decide everything before any training; returns the ``RunPlan`` the runner follows.

    Raises UsageError (CheckpointError for ``--resume``) with one line before any work: nothing
    is written and the output directory is not locked yet.
    Usage: ``plan = make_plan(RunConfig(recipe="bert-sst2", precisions=["amp"]))``
    """
    recipe, cfg, device, checked = check_options(cfg)
    check_inputs_stay(cfg)  # nothing the run reads may be in what a new run sets aside
    # Data and model errors surface here, still before training.
    prepared = recipe.prepare(cfg)
    # What the recipe could decide only once the model was known (bert-sst2: no packing for a family that does
    # not pack): applied before the runs are planned, so the header, config.yaml, results.json and --resume
    # say what runs.
    cfg = with_settled(cfg, getattr(prepared, "settled", None))
    # The facts the precision policy is handed, gathered once: torch's native bf16/fp16 and
    # the probe cached for this machine, recipe and model, or measured now where a lone --amp
    # would otherwise choose on torch's word alone (results.json's "hardware").
    hardware = describe_hardware(device)
    probe = _cached_probe(cfg, prepared, device, hardware)
    if probe is None and measures_first(cfg, device, hardware):
        probe = _probe_now(cfg, device, hardware)
    probe = _process_0s_probe(cfg, probe, hardware)  # torchrun: one measurement for the whole job
    choices = choose_precisions(cfg, device, hardware, probe)
    _chosen_alike_everywhere(cfg, choices)
    precisions = [_chosen(precision, choice, device) for precision, choice in zip(checked, choices)]
    # Output directory and --resume, for the precisions chosen (an --amp run's checkpoint is its precision's).
    runs = plan_runs(cfg, precisions, choices)
    out, recorded = Path(cfg.output_dir), recorded_config(cfg)  # the data files as they were read
    plan = _checked_against_the_model(
        RunPlan(recipe, cfg, device, prepared, hardware, out, tuple(precisions), runs, recorded)
    )
    _say_notices(prepared, hardware, choices)  # after every check: a refused command prints its one line alone
    return plan


def plan_runs(
    cfg: RunConfig, precisions: Sequence[Precision], choices: Sequence[PrecisionChoice]
) -> tuple[PlannedRun, ...]:
    """Every (precision, seed) run's files, identity and what ``--resume`` does with it, in training order.

    Checks the output directory (writable, nothing in the way) and ``--resume`` (checkpoints
    intact and from these options); nothing is written. ``choices``: why each precision
    (``choose_precisions``), one per entry of ``cfg.precisions``.
    Usage: ``plan_runs(cfg, [resolve_precision("bf16", cpu)], choose_precisions(cfg, cpu, hardware))``
    """
    out = Path(cfg.output_dir)
    names, seeds = [p.name for p in precisions], list(cfg.seeds)
    # --fsdp: every checkpoint is a sharded directory (mixft.train.sharded_checkpoint)
    table = run_names(names, seeds, cfg.predict_file, sharded=cfg.fsdp)  # every run's names, asked once
    files, dirs = planned_entries(table.values(), cfg.save_model)
    if distributed.is_main_process():
        check_output_dir(out, files=files, dirs=dirs)
    metas = {key: run_meta(cfg, *key) for key in table}  # hashes the data files once
    # --resume: checkpoints intact and from these options. Read once, here.
    finished, continued = resume_runs(cfg, {key: out / n.checkpoint for key, n in table.items()}, metas)
    asked = {p.name: (p, requested, choice) for p, requested, choice in zip(precisions, cfg.precisions, choices)}
    runs = []
    for (name, seed), n in table.items():
        precision, requested, choice = asked[name]
        runs.append(
            PlannedRun(
                precision=precision,
                seed=seed,
                requested=requested,
                reason=choice.reason,
                checkpoint=out / n.checkpoint,
                step_checkpoints=n.step_checkpoints,
                saved_model=out / n.saved_model,
                predictions=out / n.predictions if n.predictions else None,
                meta=metas[(name, seed)],
                kept=finished.get((name, seed)),
                continues=(name, seed) in continued,
            )
        )
    return tuple(runs)


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


def measures_first(cfg: RunConfig, device, hardware: dict) -> bool:
    """Whether ``--amp`` measures bf16 against fp32 here (the probe) before it chooses.

    torch's native check says whether bf16 has an instruction-set path, not whether it trains
    faster: oneDNN reports bf16 on every AVX-512 CPU, where it converts to fp32 without bf16
    instructions (a Xeon with neither amx_bf16 nor avx512_bf16 trained bert-sst2 in bf16 at 0.41x
    fp32). So a lone ``--amp`` on a CPU where torch says native, with nothing measured for this
    recipe and model, measures first, once (the probe's cache keeps it). Under torchrun process 0
    measures for the job while the others wait (``_process_0s_probe`` hands its probe to every
    process). Not under ``--compare`` (it measures exactly this), ``--resume`` (the run continues in
    the precision it started in), ``--eval-only`` (nothing trains), or beside a cache file that
    cannot be read (named in a warning; ``--probe`` replaces it).

    Usage: ``measures_first(RunConfig(precisions=["amp"]), cpu, describe_hardware(cpu))``
    """
    return (
        device.type == "cpu"
        and list(cfg.precisions) == ["amp"]
        and (hardware.get("native") or {}).get("bf16") is True
        and "probe_cache_problem" not in hardware
        and not cfg.resume
        and not cfg.eval_only
        and distributed.rank() == 0
    )


def _process_0s_probe(cfg: RunConfig, probe, hardware: dict):
    """Under torchrun with ``--amp``: process 0's probe (cached or measured now), in every process.

    Each process otherwise reads its own node's cache and could choose on another measurement (or on
    none). Every process takes process 0's, or none when process 0 has none (``hardware["probe"]``
    follows). A collective: every process of the job calls it (the command line is the same in each).
    """
    if distributed.world_size() <= 1 or list(cfg.precisions) != ["amp"]:
        return probe
    from mixft.report.probe_result import ProbeResult

    mine = probe.to_dict() if probe is not None and distributed.rank() == 0 else None
    shared = distributed.all_gather_objects(mine)[0]
    if shared is None:
        hardware.pop("probe", None)
        return None
    hardware["probe"] = shared
    return ProbeResult.from_dict(shared)


def _chosen_alike_everywhere(cfg: RunConfig, choices: Sequence[PrecisionChoice]) -> None:
    """Under torchrun with ``--amp``: one job trains one precision. Each process chose from its own machine's
    facts (native bf16), so nodes of different CPU kinds can differ: a UsageError in every process, then."""
    if distributed.world_size() <= 1 or list(cfg.precisions) != ["amp"]:
        return
    every = distributed.all_gather_objects(choices[0].precision)
    if len(set(every)) > 1:
        where = "; ".join(
            f"{name} in process{'es' if every.count(name) > 1 else ''} "
            + ", ".join(str(i) for i, chosen in enumerate(every) if chosen == name)
            for name in dict.fromkeys(every)
        )
        raise UsageError(
            f"--amp chose differently in the processes of this job ({where}): their machines differ in "
            "native bf16; name one precision for all of them with --precision"
        )


def _probe_now(cfg: RunConfig, device, hardware: dict):
    """The probe of fp32 and bf16 on this recipe and model, measured now in a process of its own and cached;
    kept in ``hardware["probe"]``. None (with a warning) when it could not measure: --amp then decides on
    torch's word."""
    from mixft.report.probe_result import check_cache_dir
    from mixft.runs.child_process import ChildFailed
    from mixft.runs.probe import DEFAULT_BUDGET_S, probe_in_fresh_process

    check_output_dir(Path(cfg.output_dir))  # a directory that cannot be written: exit 2 now, not after measuring
    try:
        check_cache_dir()
        save = True
    except UsageError as e:  # measured all the same: the choice needs it; the next --amp run measures again
        logger.warning("warning: %s; --amp measures this run's precision without keeping the result", e)
        save = False
    logger.info(
        "--amp: torch says this CPU runs bf16 natively, which does not say it trains faster; measuring bf16 "
        "against fp32 on this model first (a %g s budget, exceeded only where a warm-up and one timed step each take "
        "longer; once: kept for later runs; --precision bf16 or fp32 skips it)",
        DEFAULT_BUDGET_S,
    )
    try:
        result = probe_in_fresh_process(cfg, device=device, precisions=["bf16"], save=save, hardware=hardware)
    except ChildFailed as e:
        logger.warning("warning: --amp could not measure bf16 here (%s); it decides on torch's word", e)
        return None
    logger.info("--amp's measurement took %.1f s (%s)", result.wall_s, result.reason)
    hardware["probe"] = result.to_dict()
    return result


def _chosen(checked: Precision, choice: PrecisionChoice, device) -> Precision:
    """What a run trains in: the precision checked at start-up (``check_options``), resolved once, unless
    ``--amp``'s policy chose another one (fp32 on a CPU without native bf16), resolved here."""
    return checked if choice.precision == checked.name else resolve_precision(choice.precision, device)


def _cached_probe(cfg: RunConfig, prepared, device, hardware: dict):
    """This machine's cached probe of the recipe and model, or None; kept in ``hardware["probe"]``
    (results.json, the header's speed line). A cache file there that cannot be used goes to
    ``hardware["probe_cache_problem"]``: said before the run, in the header and in --amp's reason."""
    from mixft.report.probe_result import read_cached_probe

    model = getattr(prepared, "model_description", None) or str(cfg.model)
    result, problem = read_cached_probe(cfg.recipe, model, device=device, hardware=hardware)
    probed = (result.batch or {}).get("batch_size") if result is not None else None  # None: a probe from before
    if probed is not None and probed != cfg.batch_size:
        # A ratio measured on batches of another size is not this run's (bf16 / fp32 moved from 0.69x to 0.55x
        # between 4 and 64 sentences on one CPU): --amp measures again rather than quote it.
        logger.info("the cached probe timed batches of %s, this run %s: not used", probed, cfg.batch_size)
        result = None
    if result is not None:
        hardware["probe"] = result.to_dict()
    if problem is not None:
        hardware["probe_cache_problem"] = problem.to_dict()
    return result


def _say_notices(prepared, hardware: dict, choices: Sequence[PrecisionChoice]) -> None:
    """The data's fallbacks, an unreadable probe cache and what --amp chose: once, when everything resolved."""
    for notice in getattr(prepared, "notices", ()):
        logger.warning(notice)
    if hardware.get("probe_cache_problem"):  # a cache file there but unreadable: named, not silence
        from mixft.report.probe_result import CacheProblem

        logger.warning(CacheProblem.from_dict(hardware["probe_cache_problem"]).warning())
    for notice in dict.fromkeys(choice.notice for choice in choices if choice.notice):
        logger.warning(notice)


def _checked_against_the_model(plan: RunPlan) -> RunPlan:
    """The checks that build the model or read more files, once, before any run: exit 2 here, not at a run's start.

    Returns the plan with the preflight's record and the ``--predict-file`` read.
    """
    recipe, cfg, prepared, device, precisions = plan.recipe, plan.cfg, plan.prepared, plan.device, list(plan.precisions)
    # Options against the run's shape (warm-up, patience, --load-best, --metric-for-best).
    check_run_shape(recipe, cfg, prepared, device, precisions)
    if cfg.report_to and distributed.is_main_process():  # where each tracker writes, and an MLflow server
        prepare_trackers(cfg.report_to, plan.out, [run_name(r.precision.name, r.seed) for r in plan.runs])
    # --fp32-modules' names, then the fp16 preflight when due (not when --resume trains nothing).
    trains = any(r.kept is None for r in plan.runs)
    preflight = check_before_training(recipe, cfg, prepared, device, precisions, trains=trains)
    if cfg.predict_file and distributed.world_size() > 1:
        raise UsageError(
            "--predict-file is not supported under torchrun or accelerate launch: each process would "
            "label only its shard of the file; label it in one process afterwards with --eval-only "
            "--model DIR --predict-file FILE"
        )
    predict_source = read_predict_file(cfg, prepared) if cfg.predict_file else None  # checked before training
    return replace(plan, preflight=preflight, predict_source=predict_source)
