"""The run plan: every answer about the output directory and the runs' identities, made once before any work.

``make_plan`` checks the output directory (writable, nothing in the way) and ``--resume``
(checkpoints intact and from these options), then writes down, for each (precision, seed)
run, the files it writes and what its checkpoint records. The runner asks this one object
from then on (``plan.runs[("bf16", 0)].checkpoint``, ``plan.kept("fp32", 0)``) instead of
going back to ``mixft.runs.outdir`` and ``mixft.runs.identity`` piece by piece; those two keep
the rules (the names, the options that identify a run), this module the answers for one run.

Usage::

    plan = make_plan(cfg, ["fp32", "bf16"])     # UsageError/CheckpointError before any work
    plan.runs[("bf16", 0)].checkpoint            # OUTPUT_DIR/checkpoint-bf16-seed0.pt
    plan.kept("fp32", 0)                         # the finished run --resume keeps, or None
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mixft import distributed
from mixft.config.run_config import RunConfig
from mixft.results import RunResult
from mixft.runs.identity import RunKey, plan_identities
from mixft.runs.outdir import CONFIG_NAME, RESULTS_NAME, check_output_dir, planned_entries, run_names

__all__ = ["RunFiles", "RunPlan", "make_plan"]


@dataclass(frozen=True)
class RunFiles:
    """One (precision, seed) run's place in the output directory and its identity.

    ``meta``: what its checkpoints record and a ``--resume`` must match (``run_meta``).
    ``predictions``: where ``--predict-file``'s labels go (None without one).
    """

    checkpoint: Path  # a .dcp directory under --fsdp
    step_checkpoints: str  # the kept step checkpoints' name, "{step}" to fill (beside ``checkpoint``)
    saved_model: Path
    predictions: Path | None
    meta: Mapping[str, Any]


@dataclass(frozen=True)
class RunPlan:
    """What a run writes where, and what ``--resume`` keeps and continues: made once by ``make_plan``.

    ``finished``: the runs ``--resume`` keeps as results.json holds them; ``continued``: the
    runs that continue from their (already checked) checkpoint; every other run starts.
    (An earlier run in the directory is set aside whole: ``mixft.runs.set_aside``.)
    """

    out: Path
    precisions: tuple[str, ...]
    seeds: tuple[int, ...]
    runs: Mapping[RunKey, RunFiles]
    finished: Mapping[RunKey, RunResult] = field(default_factory=dict)
    continued: frozenset[RunKey] = frozenset()

    @property
    def total(self) -> int:
        return len(self.precisions) * len(self.seeds)

    @property
    def results_path(self) -> Path:
        return self.out / RESULTS_NAME

    @property
    def config_path(self) -> Path:
        return self.out / CONFIG_NAME

    def kept(self, precision: str, seed: int) -> RunResult | None:
        """The finished run ``--resume`` keeps as it is, or None when this run trains."""
        return self.finished.get((precision, seed))

    def continues(self, precision: str, seed: int) -> bool:
        """Whether this run continues from its (already checked) checkpoint."""
        return (precision, seed) in self.continued


def make_plan(cfg: RunConfig, precisions: Sequence[str]) -> RunPlan:
    """Check the output directory and ``--resume`` for these precisions; every run's files and identity.

    Nothing is written. Raises UsageError (a directory that cannot take the files) or
    CheckpointError (``--resume`` with nothing to continue, or from other options).
    Usage: ``make_plan(cfg.with_defaults(recipe.DEFAULTS).validate(), ["fp32", "bf16"])``
    """
    out = Path(cfg.output_dir)
    names, seeds = tuple(precisions), tuple(cfg.seeds)
    # --fsdp: every checkpoint is a sharded directory (mixft.train.sharded_checkpoint)
    table = run_names(names, seeds, cfg.predict_file, sharded=cfg.fsdp)  # every run's names, asked once
    files, dirs = planned_entries(names, seeds, cfg.save_model, cfg.predict_file, sharded=cfg.fsdp)
    if distributed.is_main_process():
        check_output_dir(out, files=files, dirs=dirs)
    # --resume: checkpoints intact and from these options. Read once, here, with each run's identity.
    resume, metas = plan_identities(cfg, {key: out / n.checkpoint for key, n in table.items()})
    runs = {
        key: RunFiles(
            checkpoint=out / n.checkpoint,
            step_checkpoints=n.step_checkpoints,
            saved_model=out / n.saved_model,
            predictions=out / n.predictions if n.predictions else None,
            meta=metas[key],
        )
        for key, n in table.items()
    }
    return RunPlan(out, names, seeds, runs, dict(resume.finished), frozenset(resume.continued))
