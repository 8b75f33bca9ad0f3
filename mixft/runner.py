"""Run a recipe at one or more precisions (and seeds), back to back, and write the results.

This is what ``scripts/finetune.py`` calls after parsing; notebooks can call it too::

    results = run(RunConfig(recipe="bert-sst2", precisions=["fp32", "bf16"], max_train_samples=500))
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch

from . import distributed
from .checkpoint import Checkpointer, checkpoint_name, finished_runs, resume, resume_plan, run_meta
from .config import RunConfig
from .errors import UsageError
from .faults import CollapseDetector, InjectNonFinite
from .log import logger
from .precision import Precision, precision_notice, resolve_device, resolve_precision
from .registry import get_recipe
from .results import RunResult, write_results
from .trainer import Callback, Trainer



class RunObserver:
    """What a front end (the CLI, a notebook) wants to hear about a run. Override freely."""

    def on_plan(self, cfg: RunConfig, device, precisions: list[Precision], run_info: dict) -> None:
        """Called once, after data and model are resolved and before any training."""

    def callbacks(self, precision: Precision, seed: int) -> Sequence[Callback]:
        """Trainer callbacks for one (precision, seed) run."""
        return ()

    def stop_requested(self) -> bool:
        """True to end the whole run after the current (precision, seed) run (e.g. Ctrl-C)."""
        return False


def plan(cfg: RunConfig):
    """Validate everything cheap before any work: (recipe, cfg with defaults, device, precisions)."""
    recipe = get_recipe(cfg.recipe)
    if (cfg.save_model or cfg.eval_only) and not hasattr(recipe, "save_model"):
        raise UsageError(f"recipe {cfg.recipe} has no saved-model format: --save-model and --eval-only need one")
    if cfg.eval_only and cfg.model is None:
        raise UsageError("--eval-only needs --model: the directory a --save-model run wrote")
    cfg = cfg.with_defaults(recipe.DEFAULTS).validate()
    device = resolve_device(cfg.device)
    if distributed.init_from_env() and device.type == "cuda":
        device = torch.device(distributed.local_device("cuda"))  # one GPU per rank
    precisions = [resolve_precision(name, device) for name in cfg.precisions]
    names = [p.name for p in precisions]
    if len(set(names)) != len(names):
        raise UsageError(f"--compare resolves to the same precision twice: {','.join(names)}")
    if distributed.is_main_process():
        check_writable(Path(cfg.output_dir))
    if cfg.resume:
        resume_plan(cfg, names)  # checkpoints intact and from these options, or UsageError
    return recipe, cfg, device, precisions


def run(cfg: RunConfig, observer: RunObserver | None = None) -> list[RunResult]:
    """Train every (seed, precision) pair; write results.json (and report.md when comparing).

    Usage: ``results = run(RunConfig(recipe="bert-sst2", precisions=["fp32", "bf16"]))``
    """
    observer = observer or RunObserver()
    recipe, cfg, device, precisions = plan(cfg)
    for precision in precisions:
        notice = precision_notice(precision, device)
        if notice:
            logger.warning(notice)
    # Data and model errors surface here, still before training. Notices (offline
    # fallbacks) are shown only once everything resolved, so an error stays one line.
    prepared = recipe.prepare(cfg)
    for notice in getattr(prepared, "notices", ()):
        logger.warning(notice)

    out = Path(cfg.output_dir)
    results: list[RunResult] = []
    total = len(precisions) * len(cfg.seeds)
    # --resume: runs that already ended keep their results; the others continue from
    # their checkpoint (or start, if they never got one).
    finished = finished_runs(cfg, [p.name for p in precisions]) if cfg.resume else {}
    planned = False
    for seed in cfg.seeds:
        for precision in precisions:
            if (precision.name, seed) in finished:
                results.append(finished[(precision.name, seed)])
                continue
            parts = recipe.build(cfg, prepared, precision, device, seed)
            if not planned:
                observer.on_plan(cfg, device, precisions, parts.run_info)
                planned = True
            checkpoint = out / checkpoint_name(precision.name, seed, single=total == 1)
            meta = run_meta(cfg, precision.name, seed)
            trainer = Trainer(
                parts.model,
                parts.optimizer,
                parts.loss_fn,
                parts.train_loader,
                eval_loader=parts.eval_loader,
                precision=precision,
                device=device,
                lr_scheduler=parts.lr_scheduler,
                grad_accum=cfg.grad_accum,
                max_grad_norm=cfg.clip_norm,
                epochs=cfg.epochs,
                max_steps=cfg.max_steps,
                predict_fn=parts.predict_fn,
                metric=parts.metric,
                seed=seed,
                callbacks=[*observer.callbacks(precision, seed), *reliability_callbacks(cfg, seed, checkpoint, meta)],
                run_info={**parts.run_info, "config": {**cfg.to_dict(), "precisions": None, "seeds": None}},
                speed=cfg.speed_options(),
            )
            if cfg.eval_only:
                result = trainer.evaluate_only()
            else:
                if cfg.resume and checkpoint.exists():
                    resume(trainer, checkpoint, meta, verify=False)  # plan() has verified it
                result = trainer.fit()
                if cfg.save_model and distributed.is_main_process() and not result.stopped_early:
                    target = out / saved_model_name(precision.name, seed, single=total == 1)
                    recipe.save_model(trainer.module, prepared, target)
                    logger.info("saved the fine-tuned model to %s (evaluate it alone with --eval-only --model %s)", target, target)
            results.append(result)
            # Rewritten after every run: a crash later still leaves the finished runs.
            if distributed.is_main_process():
                write_results(out / "results.json", results)
            logger.debug("run %d/%d done: %r", len(results), total, result)
            if observer.stop_requested():
                return results  # results.json holds the runs so far; --resume goes on from there
    if total > 1 and distributed.is_main_process():
        from .report import write_report
        from .results import results_document

        write_report(results_document(results), out)
    return results


def saved_model_name(precision: str, seed: int, single: bool) -> str:
    return "model" if single else f"model-{precision}-seed{seed}"


def reliability_callbacks(cfg: RunConfig, seed: int, checkpoint: Path, meta: dict) -> list[Callback]:
    """Fault injection, collapse detection and checkpoints for one run (docs/reliability.md).

    The detector comes before the checkpointer: a collapsed state is never saved over
    the last good checkpoint.
    """
    callbacks: list[Callback] = []
    if cfg.inject_nonfinite > 0:
        callbacks.append(InjectNonFinite(cfg.inject_nonfinite, seed=seed))
    if cfg.detect_collapse:
        callbacks.append(CollapseDetector(cfg.min_loss_scale, cfg.max_consecutive_skips))
    if distributed.is_main_process():  # one writer per file
        callbacks.append(Checkpointer(checkpoint, every=cfg.checkpoint_every, meta=meta))
    return callbacks


def check_writable(out: Path) -> None:
    """Fail now, not after an hour of training, if results cannot be written."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"--output-dir {out}: exists and is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".mixft-write-check-", dir=out)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise UsageError(f"--output-dir {out}: not writable ({e.strerror or e})") from None
