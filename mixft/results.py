"""What a run measured, and the ``results.json`` file that carries it.

Schema (DESIGN.md's keys are a contract; everything else is an extension)::

    {"mixft_version": "0.1.0", "created": "2026-11-21T10:00:00+00:00",
     "hardware": {...},                    # mixft.amp.hardware.describe_hardware (+ "probe" when one was made)
     "preflight": {...},                   # the fp16 risk check before training (mixft.amp.preflight, to_dict());
                                           # only when one ran (--preflight, or before an fp16 run)
     "runs": [run, ...]}

    run = {
      "precision": "bf16",                 # policy name: fp32 | tf32 | fp16 | bf16 (the one used)
      "precision_requested": "amp",        # as asked: "amp" | a name; null in runs made before it existed
      "precision_reason": "--amp chose bf16: this CPU runs bf16 natively (...)",  # one sentence: why the
                                           # precision used is this one (mixft.amp.precision.choose_precision)
      "autocast_dtype": "bfloat16",        # null for fp32/tf32
      "grad_scaler": false,
      "param_dtype": null,                 # "bfloat16" for bf16-pure/bf16-true (weights, gradients, optimizer
                                           # state held in it); null: the model's own fp32
      "optimizer": "torch.optim.AdamW",    # the first optimizer's class (optimi's with its kahan_sum)
      "seed": 0,
      "model": "...", "dataset": "...", "device": "cpu", "device_name": "...",
      "eval": {"accuracy": 0.91, "f1": 0.9, "loss": 0.25},  # final evaluation: every task metric (may be {});
                                           # a metric the data leaves undefined (Pearson of constant predictions)
                                           # is null, with why under "undefined": {"pearsonr": "the predictions
                                           # are constant (all 0.5)"} (mixft.metrics.task.undefined_reasons)
      "task": {"kind": "classification", "names": [...], ...},  # labels in id order; null without labels
      "eval_history": [{"epoch": 1, "step": 63, "accuracy": 0.88, "loss": 0.3}, ...],
      "train_time_s": 41.2,                # wall time of the training loop, device synced; evaluations and
                                           # checkpoint writes excluded (those: checkpoint_time_s)
      "train_samples_per_s": 97.1,         # over train_time_s: checkpoint writes excluded; both 0 for an
                                           # --eval-only run (nothing trained: its speed is eval.samples_per_s,
                                           # mixft.report.summary.is_eval_only tells it apart)
      "train_tokens_per_s": 1630.0,        # null when batches have no attention_mask
      "batch_shapes": "exact",             # "ladder": rows and row length rounded up mixft.data.shape_ladder's
                                           # steps (--batch-shapes); null for recipes without token batches
      "peak_memory_bytes": 123456789,      # null where the device cannot tell
      "peak_memory_kind": "cpu_rss" | "cuda_max_allocated",
      "start_memory_bytes": 56789012,      # the same gauge at the run's start (the report shows the increase)
      "skipped_steps": 0,                  # optimizer steps skipped for inf/NaN gradients
      "steps": 63,                         # optimizer steps attempted
      "final_loss_scale": null,            # null without a GradScaler
      "history": {                         # one entry per optimizer step
        "step": [1, 2, ...], "loss": [...], "lr": [...], "grad_norm": [...],
        "loss_scale": [...],               # null entries without a scaler
        "skipped": [false, ...]},
      "config": {...},                     # the run's options, for reproduction
      "stopped_early": null,               # why the run ended before its budget, for people
      "stop_kind": null,                   # the same for code: "collapse" | "interrupt" | "callback" | "early_stopping"
      "best": {"step": 40, "epoch": 1,     # the best evaluation by "metric" (--metric-for-best); null before one
               "metric": "accuracy", "metrics": {...},
               "loaded": true,             # --load-best: the final model, "eval", --save-model and predictions are it
               "evaluations": 6},          # evaluations judged
      "last": {"step": 63, "epoch": 2, "metrics": {...}},  # the last evaluation; null before one
      "checkpoint_time_s": 1.2,            # seconds spent writing checkpoints (not in train_time_s); null: none written here
      "predict": {"file": "new.csv", "output": "OUT/predictions.csv", "rows": 100,
                  "metrics": {...}}        # --predict-file; metrics null when the file has no labels
      "memory": {                          # where a training step's memory goes (mixft.amp.memory.MEMORY_KEYS)
        "parameters": 90000000, "gradients": 90000000, "optimizer_state": 180000000,
        "saved_activations_peak": 170000000, "saved_by_dtype": {"bfloat16": ..., "float32": ...},
        "saved_by_op": [["linear", 120000000], ...],
        "device_figure": 812000000, "device_figure_kind": "cpu_rss" | "cuda_max_allocated",
        "device_figure_scope": "run" | "fresh_process",  # see mixft.runs.memory_figures
        "device_figure_steps": 3,          # steps the fresh process trained; null for "run"
        "measured_batch": "first training batch (epoch 0 order)", "measured_batch_shape": [32, 41]},
      "parameters": {"trainable": 22700000, "total": 22700000},
      "lora": null,                        # the recipe's LoRA description (mixft.models.lora.describe_lora)
      "eval_predictions": [1, 0, 2, ...],  # the final evaluation's predictions, in the eval set's row order
                                           # (label ids; values for regression); null without one
      "eval_labels": [1, 0, 1, ...],       # the references of those predictions, same order
      "agreement_vs_fp32": {...}           # non-fp32 runs of a --compare: mixft.report.agreement.agreement_vs_fp32
                                           # against the fp32 run of the same seed
    }
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mixft import __version__
from mixft.atomic import write_json


@dataclass
class RunResult:
    """One training run's measurements. ``to_dict()`` gives the results.json ``run``.

    Usage: ``result = trainer.fit(); print(result.eval["accuracy"], result.train_samples_per_s)``
    """

    precision: str
    autocast_dtype: str | None
    grad_scaler: bool
    device: str
    device_name: str
    steps: int = 0
    skipped_steps: int = 0
    final_loss_scale: float | None = None
    train_time_s: float = 0.0
    train_samples_per_s: float = 0.0
    train_tokens_per_s: float | None = None
    peak_memory_bytes: int | None = None
    peak_memory_kind: str | None = None
    eval: dict[str, float] = field(default_factory=dict)
    eval_history: list[dict[str, Any]] = field(default_factory=list)
    history: dict[str, list] = field(default_factory=dict)
    seed: int | None = None
    model: str | None = None
    dataset: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    stopped_early: str | None = None  # why the run ended before its budget, if it did
    stop_kind: str | None = None  # "collapse" | "interrupt" | "callback"; None: it ran its budget
    start_memory_bytes: int | None = None  # same gauge as peak_memory_kind, at the run's start; null where unknown
    # What the model learned to predict: {"kind", "names" (label names in id order), "text_columns",
    # "label_column", "glue_task"}; null for recipes without labels (mlp-synthetic).
    task: dict[str, Any] | None = None
    best: dict[str, Any] | None = (
        None  # the best evaluation: {"step", "epoch", "metric", "metrics", "loaded", "evaluations"}
    )
    last: dict[str, Any] | None = None  # the last evaluation: {"step", "epoch", "metrics"}
    checkpoint_time_s: float | None = None  # time spent writing checkpoints, outside train_time_s
    predict: dict[str, Any] | None = None  # --predict-file: {"file", "output", "rows", "metrics"}
    # Memory breakdown, model size and per-example predictions (mixft.runs.memory_figures and
    # mixft.report.agreement fill them; null in runs made before they existed).
    memory: dict[str, Any] | None = None
    parameters: dict[str, int] | None = None
    lora: dict[str, Any] | None = None
    eval_predictions: list | None = None
    eval_labels: list | None = None
    agreement_vs_fp32: dict[str, Any] | None = None
    # What the user asked ("amp" or a name) and why the run used ``precision`` (mixft.amp.precision.choose_precision).
    precision_requested: str | None = None
    precision_reason: str | None = None
    # Pure low precision (mixft.train.pure_bf16): the dtype the weights are held in (null: fp32) and the optimizer.
    param_dtype: str | None = None
    optimizer: str | None = None
    # "ladder" | "exact": the batches' shapes (--batch-shapes, mixft.data.shape_ladder); null without token batches.
    batch_shapes: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_frame(self):
        """The per-step history as a pandas DataFrame (one row per optimizer step)."""
        import pandas as pd

        return pd.DataFrame(self.history)

    def __repr__(self) -> str:
        acc = self.eval.get("accuracy")
        acc_s = f"{acc:.4f}" if acc is not None else "n/a"
        mem = f"{self.peak_memory_bytes / 2**20:.0f} MiB" if self.peak_memory_bytes else "n/a"
        scale = f", loss_scale={self.final_loss_scale:g}" if self.final_loss_scale is not None else ""
        return (
            f"RunResult({self.precision} on {self.device}: accuracy={acc_s}, steps={self.steps}, "
            f"skipped={self.skipped_steps}{scale}, {self.train_samples_per_s:.1f} samples/s, "
            f"{self.train_time_s:.1f} s, peak {self.peak_memory_kind or 'memory'}={mem})"
        )


def results_document(
    runs: list[RunResult | dict], hardware: dict[str, Any] | None = None, preflight: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The whole results.json document for ``runs``.

    ``hardware``: the machine that measured them (``mixft.amp.hardware.describe_hardware``,
    optionally with ``"probe"``: ``ProbeResult.to_dict()``), stored at the top level;
    left out when None, as in documents written before it existed. ``preflight``: the fp16
    risk check made before the runs (``PreflightResult.to_dict()``), top level, left out when None.

    Usage: ``render_markdown(results_document(results, hardware=describe_hardware("cpu")))``
    """
    doc: dict[str, Any] = {
        "mixft_version": __version__,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    if hardware is not None:
        doc["hardware"] = hardware
    if preflight is not None:
        doc["preflight"] = preflight
    doc["runs"] = [r.to_dict() if isinstance(r, RunResult) else r for r in runs]
    return doc


def write_results(
    path: str | Path, runs: list[RunResult | dict], hardware: dict | None = None, preflight: dict | None = None
) -> Path:
    """Atomically write results.json: a kill at any moment leaves the old file or the new one.

    ``hardware``: the machine that measured the runs (``mixft.amp.hardware.describe_hardware``,
    with a ``probe`` when one was made), stored at the top level; ``preflight`` likewise.

    Usage: ``write_results("outputs/run/results.json", [result])``
    """
    path = Path(path)
    write_json(path, results_document(runs, hardware=hardware, preflight=preflight))
    return path
