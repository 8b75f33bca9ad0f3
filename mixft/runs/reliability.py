"""One run's reliability (docs/reliability.md): fault injection, collapse detection, checkpoints, continuing.

``RunReliability.for_run`` makes the callbacks a run's options ask for, in the order that
matters (the collapse detector before the checkpointer: a collapsed state is never saved over
the last good checkpoint); ``continue_from_checkpoint`` loads the run's checkpoint, already
checked by ``make_plan``, into its trainer (``--resume``: one file, or under ``--fsdp`` each
process's shards); ``write_time_s`` is results.json's ``checkpoint_time_s``.

Usage::

    reliability = RunReliability.for_run(cfg, planned_run, states=watch.states())
    trainer = build_trainer(parts, cfg, ..., callbacks=[*others, *reliability.callbacks])
    if planned_run.continues:
        reliability.continue_from_checkpoint(trainer, states=watch.states())
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mixft import distributed
from mixft.callbacks.checkpointer import Checkpointer
from mixft.callbacks.faults import CollapseDetector, InjectNonFinite
from mixft.config.run_config import RunConfig
from mixft.log import logger
from mixft.train.hooks import Callback


@dataclass
class RunReliability:
    """The reliability callbacks of one run, and the checkpoint it continues from."""

    callbacks: list[Callback]
    checkpoint: Path
    sharded: bool = False

    @classmethod
    def for_run(cls, cfg: RunConfig, run, states=None) -> RunReliability:
        """``run``: the plan's ``PlannedRun`` (its seed, checkpoint, step checkpoints' name and identity)."""
        callbacks = reliability_callbacks(
            cfg, run.seed, run.checkpoint, dict(run.meta), run.step_checkpoints, states=states
        )
        return cls(callbacks, run.checkpoint, sharded=cfg.fsdp)

    @property
    def checkpointer(self) -> Checkpointer | None:
        return next((cb for cb in self.callbacks if isinstance(cb, Checkpointer)), None)

    @property
    def write_time_s(self) -> float | None:
        """Seconds this run spent writing checkpoints, resumed runs' earlier writes included (None: none written)."""
        return self.checkpointer.write_time_s if self.checkpointer is not None else None

    def continue_from_checkpoint(self, trainer, states=None) -> dict:
        """Load the run's checkpoint into ``trainer`` (checked by ``make_plan``: not verified again); returns its meta.

        Under ``--fsdp`` every process loads its shards of the sharded directory (a collective).
        """
        if not self.sharded:
            from mixft.train.checkpoint import resume

            saved = resume(trainer, self.checkpoint, verify=False, states=states)
        else:
            from mixft.train.sharded_checkpoint import load_sharded_checkpoint

            saved = load_sharded_checkpoint(trainer, self.checkpoint, verify=False, states=states)
            logger.info("resuming from %s (step %s, epoch %s)", self.checkpoint, saved.get("step"), saved.get("epoch"))
        if self.checkpointer is not None:  # the seconds spent before the interruption count too
            self.checkpointer.write_time_s = float(saved.get("checkpoint_time_s") or 0.0)
        return saved


def reliability_callbacks(
    cfg: RunConfig, seed: int, checkpoint: Path, meta: dict, step_name: str, states=None
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
