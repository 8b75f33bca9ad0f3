"""The fixed names of what OUTPUT_DIR holds, spelled once, at the ground so that every layer may read them.

``mixft.runs.outdir`` is where a reader finds the whole directory: it lists these names,
adds the trackers' folders (each tracker's spec, ``mixft.callbacks.tracker_names``) and
composes the per-run names (``checkpoint-bf16-seed0.pt``). The names live down here only
because layers below the run layer write or read them too: the report (``report.md``,
its ``*.png`` charts) and the run layer's own modules. No other module spells them.

Usage: ``Path(out) / RESULTS_NAME``
"""

from __future__ import annotations

RESULTS_NAME = "results.json"  # every run's measurements (mixft.results)
REPORT_NAME = "report.md"  # the comparison report (mixft.report.markdown)
CHART_PATTERN = "*.png"  # the report's charts beside it (mixft.report.plots: loss.png, ...)
CONFIG_NAME = "config.yaml"  # the run's effective options (--config reproduces the run)
CHECKPOINT_STEM, CHECKPOINT_SUFFIX = "checkpoint", ".pt"
CHECKPOINT_NAME = CHECKPOINT_STEM + CHECKPOINT_SUFFIX  # a single run's checkpoint (mixft.train.checkpoint)
CHECKPOINT_PATTERN = CHECKPOINT_STEM + "*" + CHECKPOINT_SUFFIX  # every checkpoint name, single or one of a comparison
# A sharded (--fsdp) run's checkpoints: directories, the same names ending .dcp (mixft.train.sharded_checkpoint).
SHARDED_SUFFIX = ".dcp"
SHARDED_CHECKPOINT_PATTERN = CHECKPOINT_STEM + "*" + SHARDED_SUFFIX
# A sharded save killed between its two renames leaves the previous checkpoint here (mixft.train.sharded_checkpoint).
SHARDED_ASIDE_PATTERN = "." + CHECKPOINT_STEM + "*" + SHARDED_SUFFIX + ".old"
PREDICTIONS_STEM = "predictions"  # --predict-file's output: predictions[-<prec>-seed<k>].csv|jsonl
PREDICTIONS_SUFFIXES = (".csv", ".jsonl")
SAVED_MODEL_NAME = "model"  # --save-model's directory: model[-<prec>-seed<k>]/
LOCK_NAME = ".mixft.lock"  # held while a run uses the directory
PROBE_RESULTS_NAME = "probe.json"  # --probe writes its own files: it never replaces a run's results
PROBE_REPORT_NAME = "probe.md"
PREVIOUS_PREFIX = "previous-"  # where a new run sets an earlier run aside (mixft.runs.set_aside)
# For a moment at the start of a run under torchrun: the file every process must see (mixft.runs.shared_dir).
SHARED_CHECK_PREFIX = ".mixft-shared-check-"
