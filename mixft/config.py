"""The run configuration: typed, strict, validated before any work starts.

Fields left as ``None`` take the recipe's default (each recipe has a ``DEFAULTS`` dict).
``validate`` raises ``UsageError`` naming the option and what would be accepted.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from .errors import UsageError


@dataclass
class RunConfig:
    """Options of one ``mixft.run`` (what the CLI flags fill in).

    Usage: ``mixft.run(RunConfig(recipe="bert-sst2", precisions=["fp32", "bf16"], max_train_samples=500))``
    """

    recipe: str = "bert-sst2"  # registry name, see mixft.registry
    precisions: list[str] = field(default_factory=lambda: ["fp32"])  # names or "amp"; several = a comparison
    seeds: list[int] = field(default_factory=lambda: [0])  # each precision is trained once per seed
    model: str | None = None  # name or path; resolution is offline-first (mixft.hub)
    data_dir: str | None = None  # GLUE layout: train.tsv + dev.tsv
    max_train_samples: int | None = None  # cap on training examples (first N)
    max_eval_samples: int | None = None  # cap on evaluation examples (first N)
    epochs: int | None = None
    max_steps: int | None = None  # optimizer steps; ends the run early when reached
    batch_size: int | None = None  # per micro-batch; effective batch = batch_size * grad_accum
    lr: float | None = None
    max_grad_norm: float | None = None  # clip the unscaled gradient norm; 0 disables clipping
    grad_accum: int = 1
    max_length: int | None = None  # tokens per sentence; longer ones are truncated
    device: str = "auto"
    output_dir: str = "outputs/run"
    resume: bool = False
    eval_only: bool = False  # evaluate --model at each precision, no training (inference speed)
    save_model: bool = False  # save each fine-tuned model under OUTPUT_DIR (see recipe.save_model)
    num_workers: int = 0  # DataLoader workers; 0 keeps tokenised data in this process
    # Speed (mixft.speed.SpeedOptions): torch.compile, and the loop's default speed switches.
    compile: bool = False  # torch.compile the model for training (measured slower on the 2-core CPU)
    speedups: bool = True  # False: torch's kernels and the textbook clip (to check against a plain loop)
    extra: dict[str, Any] = field(default_factory=dict)  # recipe-specific options
    # Reliability (docs/reliability.md): checkpoints, fault injection, collapse detection.
    checkpoint_every: int = 20  # optimizer steps between checkpoints; 0: only at epoch ends
    inject_nonfinite: float = 0.0  # diagnostic: probability an optimizer step gets an inf gradient
    detect_collapse: bool = True  # stop (with a diagnosis) a run that can no longer learn
    min_loss_scale: float = 1.0  # collapsed when the GradScaler's scale falls below this
    max_consecutive_skips: int = 10  # collapsed after this many skipped optimizer steps in a row

    def with_defaults(self, defaults: dict[str, Any]) -> "RunConfig":
        """A copy where every None field takes the recipe's default; unknown keys are a bug."""
        known = {f.name for f in fields(self)}
        unknown = set(defaults) - known
        if unknown:
            raise ValueError(f"recipe defaults name unknown options: {sorted(unknown)}")
        values = asdict(self)
        for key, value in defaults.items():
            if values[key] is None:
                values[key] = value
        return RunConfig(**values)

    def validate(self) -> "RunConfig":
        _positive_int("--epochs", self.epochs)
        _positive_int("--batch-size", self.batch_size)
        _positive_int("--grad-accum", self.grad_accum)
        for name, value in (("--max-steps", self.max_steps), ("--max-train-samples", self.max_train_samples),
                            ("--max-eval-samples", self.max_eval_samples), ("--max-length", self.max_length)):
            if value is not None:
                _positive_int(name, value)
        if self.max_length is not None and self.max_length < 8:
            raise UsageError(f"--max-length must be at least 8 tokens, got {self.max_length}")
        if self.lr is not None and not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            raise UsageError(f"--lr must be a positive finite number, got {self.lr!r}")
        if self.max_grad_norm is not None and not (math.isfinite(self.max_grad_norm) and self.max_grad_norm >= 0):
            raise UsageError(f"--max-grad-norm must be >= 0 (0 disables clipping), got {self.max_grad_norm!r}")
        if not self.precisions:
            raise UsageError("--compare needs at least one precision, e.g. --compare fp32,bf16")
        if len(set(self.precisions)) != len(self.precisions):
            raise UsageError(f"--compare lists a precision twice: {','.join(self.precisions)}")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise UsageError(f"--seeds must list distinct integers, got {self.seeds}")
        if isinstance(self.checkpoint_every, bool) or not isinstance(self.checkpoint_every, int) or self.checkpoint_every < 0:
            raise UsageError(f"--checkpoint-every must be an integer >= 0 (0: epoch ends only), got {self.checkpoint_every!r}")
        if not (isinstance(self.inject_nonfinite, (int, float)) and 0 <= self.inject_nonfinite <= 1):
            raise UsageError(f"--inject-nonfinite must be a probability between 0 and 1, got {self.inject_nonfinite!r}")
        if not (isinstance(self.min_loss_scale, (int, float)) and math.isfinite(self.min_loss_scale) and self.min_loss_scale >= 0):
            raise UsageError(f"--min-loss-scale must be a finite number >= 0, got {self.min_loss_scale!r}")
        _positive_int("--max-consecutive-skips", self.max_consecutive_skips)
        for flag in ("compile", "speedups"):
            if not isinstance(getattr(self, flag), bool):
                raise UsageError(f"RunConfig.{flag} must be True or False, got {getattr(self, flag)!r}")
        if self.num_workers < 0:
            raise UsageError(f"--num-workers must be >= 0, got {self.num_workers}")
        if self.eval_only and (self.resume or self.save_model):
            raise UsageError("--eval-only trains nothing: it cannot be combined with --resume or --save-model")
        out = Path(self.output_dir)
        if out.exists() and not out.is_dir():
            raise UsageError(f"--output-dir {self.output_dir}: exists and is not a directory")
        return self

    @property
    def clip_norm(self) -> float | None:
        """The trainer's max_grad_norm: None when clipping is disabled."""
        return self.max_grad_norm or None

    def speed_options(self):
        """The trainer's SpeedOptions for these flags."""
        from .speed import SpeedOptions

        base = SpeedOptions() if self.speedups else SpeedOptions.reference()
        return replace(base, compile=bool(self.compile))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _positive_int(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"{name} must be a positive integer, got {value!r}")
