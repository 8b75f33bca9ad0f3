"""The run configuration: typed, strict, validated before any work starts.

Each field is declared once, with its rule, help and command-line spelling
(``mixft.options.option``): ``scripts/finetune.py``'s parser is generated from these
declarations, and ``validate`` applies the same rules to values set from Python.
Fields left as ``None`` take the recipe's default (each recipe has a ``DEFAULTS`` dict).
Fields marked ``per_recipe`` mean something only to recipes that list them in ``USES``;
setting one for another recipe is refused (``check_recipe_options``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from mixft.amp.hardware import DEVICE_CHOICES
from mixft.callbacks.tracker_names import TRACKERS
from mixft.config.option_rules import check_extra_options, check_option_combinations
from mixft.data.shape_ladder import BATCH_SHAPES
from mixft.errors import UsageError
from mixft.options import (
    BOOL,
    FRACTION,
    LORA_DROPOUT,
    MAX_LENGTH,
    NAMES,
    NON_NEGATIVE_FLOAT,
    NON_NEGATIVE_FLOAT32,
    NON_NEGATIVE_INT,
    POSITIVE_FLOAT32,
    POSITIVE_INT,
    PROBABILITY,
    SEED,
    TEXT,
    choice,
    flag_of,
    option,
)
from mixft.train.schedules import CLASS_WEIGHTS, SCHEDULER, SCHEDULERS, check_schedule

DATA = "data (which recipes read which: --help of each recipe's USES; others refuse them)"
RELIABILITY = "reliability (docs/reliability.md)"
LORA = "LoRA (peft: text-classification and glue)"
OPTIMISATION = "optimisation (bert-sst2, text-classification, glue)"
REAL_RUN = "evaluation, best model, trackers, predictions"


def per_recipe(default, help: str, **kwargs):
    """An option only some recipes use (they list its name in their ``USES``)."""
    return option(default, help, per_recipe=True, **kwargs)


@dataclass
class RunConfig:
    """Options of one ``mixft.run`` (what the CLI flags fill in).

    A copy made by ``with_defaults`` remembers which options the recipe's defaults filled
    (not the user's: ``is_recipe_default``), so a message can say where a value came from
    (``describe_setting``). That record is an attribute, not a field: it is neither saved
    nor compared, and ``dataclasses.replace`` drops it (``replace_keeping_origin`` keeps it).

    Usage: ``mixft.run(RunConfig(recipe="bert-sst2", precisions=["fp32", "bf16"], max_train_samples=500))``
    """

    recipe: str = option("bert-sst2", "the recipe to run (see --help's list)", check=TEXT, cli=False)
    # names or "amp" (resolved by mixft.amp.precision); several = a comparison. The CLI spells it --amp/--precision/--compare.
    precisions: list[str] = option(None, "precisions to train", cli=False, default_factory=lambda: ["fp32"])
    # each precision is trained once per seed. The CLI spells it --seed/--seeds.
    seeds: list[int] = option(None, "seeds", cli=False, default_factory=lambda: [0])
    model: str | None = per_recipe(None, "model name or path (offline-first; default: the recipe's)", check=TEXT)
    data_dir: str | None = per_recipe(
        None, "directory with GLUE-layout train.tsv and dev.tsv", check=TEXT, metavar="DIR", group=DATA
    )
    train_file: str | None = per_recipe(
        None, "training data: .csv, .tsv, .json, .jsonl or .parquet", check=TEXT, metavar="FILE", group=DATA
    )
    validation_file: str | None = per_recipe(
        None, "validation data in the same formats", check=TEXT, metavar="FILE", group=DATA
    )
    dataset: str | None = per_recipe(
        None, "a Hugging Face dataset (local cache or hub), e.g. ag_news", check=TEXT, metavar="NAME", group=DATA
    )
    dataset_config: str | None = per_recipe(
        None, "the dataset's configuration, e.g. sst2 for glue", check=TEXT, metavar="CFG", group=DATA
    )
    eval_split: str | None = per_recipe(
        None,
        "the dataset's split to evaluate on (default: validation, validation_matched, dev or valid, whichever it has)",
        check=TEXT,
        metavar="SPLIT",
        group=DATA,
    )
    task_kind: str | None = per_recipe(
        None,
        "classification or regression (default: from the labels; float labels are regression)",
        check=choice("classification", "regression"),
        metavar="KIND",
        group=DATA,
    )
    task: str | None = per_recipe(
        None, "GLUE task: cola, sst2, mrpc, qqp, stsb, mnli, qnli, rte, wnli", check=TEXT, group=DATA
    )
    text_column: str | None = per_recipe(
        None, "column holding the text (auto-detected: sentence, text, ...)", check=TEXT, metavar="COL", group=DATA
    )
    text_pair_column: str | None = per_recipe(
        None, "column holding the second text of a pair (auto-detected)", check=TEXT, metavar="COL", group=DATA
    )
    label_column: str | None = per_recipe(
        None, "column holding the label (auto-detected: label, labels)", check=TEXT, metavar="COL", group=DATA
    )
    validation_split: float | None = per_recipe(
        None,
        "carve this fraction of the training data for validation when there is none",
        check=FRACTION,
        metavar="F",
        group=DATA,
    )
    max_train_samples: int | None = per_recipe(
        None,
        "use the first N training examples (default: all of the data you bring; 2000 of the generated demo data)",
        check=POSITIVE_INT,
        metavar="N",
        group=DATA,
    )
    max_eval_samples: int | None = per_recipe(
        None, "use the first N evaluation examples", check=POSITIVE_INT, metavar="N", group=DATA
    )
    max_length: int | None = per_recipe(
        None, "tokens per example; longer ones are truncated", check=MAX_LENGTH, metavar="N"
    )
    lora: bool = per_recipe(
        False,
        "train LoRA adapters on the frozen model (the classification head trains in "
        "full); --save-model then writes the adapters + head only",
        check=BOOL,
        group=LORA,
    )
    lora_r: int = per_recipe(8, "rank of each LoRA update", check=POSITIVE_INT, metavar="N", group=LORA)
    lora_alpha: float = per_recipe(
        16.0, "LoRA scaling: updates are multiplied by alpha / r", check=POSITIVE_FLOAT32, metavar="F", group=LORA
    )
    lora_dropout: float = per_recipe(
        0.05, "dropout on the LoRA branch's input", check=LORA_DROPOUT, metavar="P", group=LORA
    )
    lora_target_modules: str | None = per_recipe(
        None,
        "Linear layers to adapt: short names, comma-separated "
        "(e.g. query,value or q_proj,v_proj), or all-linear (default: the "
        "architecture's attention query and value)",
        check=TEXT,
        metavar="NAMES",
        group=LORA,
    )
    epochs: int | None = option(None, "passes over the training data", check=POSITIVE_INT, metavar="N", trains=True)
    max_steps: int | None = option(
        None, "optimizer steps; ends the run early when reached", check=POSITIVE_INT, metavar="N", trains=True
    )
    batch_size: int | None = option(
        None, "micro-batch size; effective batch = batch size x grad accum", check=POSITIVE_INT, metavar="N"
    )
    lr: float | None = option(None, "peak learning rate", check=POSITIVE_FLOAT32, metavar="F", trains=True)
    max_grad_norm: float | None = option(
        None,
        "clip the unscaled gradient norm to F (0: no clipping)",
        check=NON_NEGATIVE_FLOAT32,
        metavar="F",
        trains=True,
    )
    grad_accum: int = option(1, "micro-batches per optimizer step", check=POSITIVE_INT, metavar="N", trains=True)
    lr_scheduler: str = per_recipe(
        "linear",
        "learning-rate schedule after the warm-up (transformers' get_scheduler): " + ", ".join(SCHEDULERS),
        check=SCHEDULER,
        metavar="NAME",
        group=OPTIMISATION,
    )
    lr_cycles: int | None = per_recipe(
        None,
        "cosine_with_restarts: cosine cycles after the warm-up, each restarting at the peak lr (N >= 2; "
        "with one it is cosine)",
        check=POSITIVE_INT,
        metavar="N",
        group=OPTIMISATION,
    )
    warmup_ratio: float | None = per_recipe(
        None,
        "warm up linearly over this fraction of the optimizer steps (default 0.1; none with constant)",
        check=PROBABILITY,
        metavar="F",
        group=OPTIMISATION,
    )
    warmup_steps: int | None = per_recipe(
        None,
        "warm up over N optimizer steps instead of --warmup-ratio",
        check=NON_NEGATIVE_INT,
        metavar="N",
        group=OPTIMISATION,
    )
    weight_decay: float = per_recipe(
        0.01,
        "AdamW weight decay (biases and LayerNorm weights get none)",
        check=NON_NEGATIVE_FLOAT32,
        metavar="F",
        group=OPTIMISATION,
    )
    label_smoothing: float = per_recipe(
        0.0,
        "classification: train towards (1 - F) on the label and F spread over "
        "all classes (the evaluation loss is smoothed too)",
        check=PROBABILITY,
        metavar="F",
        group=OPTIMISATION,
    )
    class_weights: str | None = per_recipe(
        None,
        "balanced: weigh each class by its inverse frequency in the "
        "training labels (classification, for imbalanced data; the evaluation "
        "loss is weighted too)",
        check=choice(*CLASS_WEIGHTS),
        metavar="balanced",
        group=OPTIMISATION,
    )
    # Length grouping (mixft.data.batching): which sentences share a batch changes the trajectory, so
    # both are part of a run's identity for --resume (mixft/runs/identity.py).
    # Off by default: on real SST-2 at a small budget grouping cost 1.3 accuracy points over 10 seeds
    # (docs/benchmarks.md, "Accuracy at equal budget"), and a speed path must not cost accuracy by default.
    group_by_length: bool = per_recipe(
        False,
        "batch sentences of similar length together (less padding, faster, "
        "but it cost accuracy at small budgets: docs/benchmarks.md): each group "
        "of --length-group-size batches drawn at random is sorted by length and "
        "cut into batches; by default every batch is drawn at random",
        check=BOOL,
        negatable=True,
        group=OPTIMISATION,
    )
    length_group_size: int = per_recipe(
        50,
        "batches per length group: larger groups pad less, smaller ones keep batches closer to random",
        check=POSITIVE_INT,
        metavar="N",
        group=OPTIMISATION,
    )
    # Packing (mixft.data.packing): random batches without their padding. Exact up to float rounding, but
    # its dropout masks are drawn over other shapes, so it is part of a run's identity (mixft/runs/identity.py).
    pack_sequences: bool | None = per_recipe(
        None,
        "lay each batch's sentences end to end in a few rows (attention stays within a sentence): "
        "the same random batches and, up to float rounding, the same gradients as padding them, "
        "without computing the padding (dropout draws its masks over the packed shapes: another draw) "
        "(bert-sst2, on by default for bert, distilbert, electra, roberta and xlm-roberta models; "
        "other models' batches are padded, and --pack-sequences is refused for them)",
        check=BOOL,
        negatable=True,
        group=OPTIMISATION,
    )
    batch_shapes: str | None = per_recipe(
        None,
        "ladder: round each training batch's rows and row length up a short ladder (by less than a quarter) so that "
        "shapes repeat and kernels built per shape are reused; exact: each batch its own shape; auto: the "
        "ladder for bf16/fp16 compute on a CPU that runs it natively, else exact. The same computation up to "
        "float rounding, the added positions being padding; dropout draws its masks over them (another draw). "
        "bert-sst2, text-classification, glue; default exact: what the ladder buys in a whole bf16 step is not "
        "yet measured",
        check=choice(*BATCH_SHAPES),
        metavar="|".join(BATCH_SHAPES),
        group=OPTIMISATION,
    )
    gradient_checkpointing: bool = per_recipe(
        False,
        "recompute each layer's activations in backward instead of "
        "keeping them: less memory, about one more forward of compute",
        check=BOOL,
        group=OPTIMISATION,
    )
    device: str = option("auto", "where to train", check=choice(*DEVICE_CHOICES), metavar="|".join(DEVICE_CHOICES))
    output_dir: str = option(
        "outputs/run", "where results.json, report.md and checkpoints go", check=TEXT, metavar="DIR"
    )
    resume: bool = option(False, "continue from OUTPUT_DIR's checkpoint", check=BOOL)
    save_model: bool = option(False, "save the fine-tuned model under OUTPUT_DIR", check=BOOL)
    eval_only: bool = option(
        False, "no training: evaluate --model (e.g. a --save-model directory) at each precision", check=BOOL
    )
    # Issue 31: shard instead of copy under torchrun (mixft.train.fsdp; checked by mixft.runs.runner before any work).
    fsdp: bool = option(
        False,
        "under torchrun --nproc-per-node N (N >= 2): shard the model, its gradients and the "
        "optimizer state across the processes (FSDP2) instead of a whole copy in each (DDP), for a "
        "model larger than one device's memory (docs/fsdp.md)",
        check=BOOL,
    )
    num_workers: int = per_recipe(
        0, "DataLoader worker processes (0 keeps the data in this process)", check=NON_NEGATIVE_INT, metavar="N"
    )
    probe: bool = option(
        False,
        "answer 'is AMP faster here?' in seconds: time the recipe's matmuls and a few real "
        "training steps per precision, print a table and a recommendation, cache it for this "
        "machine (later runs' headers and --amp read it); trains nothing",
        check=BOOL,
    )
    # A real run (issue 20): evaluation during training, the best model, trackers, predictions, checkpoint costs.
    eval_steps: int = option(
        0,
        "also evaluate every N optimizer steps (0: at epoch ends only)",
        check=NON_NEGATIVE_INT,
        metavar="N",
        group=REAL_RUN,
        trains=True,
    )
    metric_for_best: str | None = option(
        None,
        "the eval metric that ranks evaluations (loss: lower is better; the "
        "others higher); default: the task's main metric (accuracy, pearsonr...)",
        check=TEXT,
        metavar="NAME",
        group=REAL_RUN,
        trains=True,
    )
    # None: on when the run evaluates more than once (eval_steps, or more than one epoch).
    load_best: bool | None = option(
        None,
        "end with the best evaluation's weights: the final eval, --save-model and "
        "--predict-file use them (default: on when evaluating more than once)",
        check=BOOL,
        negatable=True,
        group=REAL_RUN,
        trains=True,
    )
    early_stopping_patience: int | None = option(
        None,
        "stop after K evaluations in a row without improvement of --metric-for-best (default: never)",
        check=POSITIVE_INT,
        metavar="K",
        group=REAL_RUN,
        trains=True,
    )
    report_to: str | None = option(
        None,
        f"experiment trackers, comma-separated: {', '.join(TRACKERS)} "
        f'(local files; each an optional extra: pip install "mixft[{list(TRACKERS.values())[0].extra}]"; default: none)',
        check=TEXT,
        metavar="LIST",
        group=REAL_RUN,
        trains=True,
    )
    predict_file: str | None = option(
        None,
        "label this file (any data format; a label column is optional) and write "
        "OUTPUT_DIR/predictions.csv|jsonl; with labels, its metrics too (default: none)",
        check=TEXT,
        metavar="FILE",
        group=REAL_RUN,
    )
    save_total_limit: int | None = option(
        None,
        "also keep the newest K step checkpoints (checkpoint-step<N>.pt, .dcp/ under --fsdp; "
        "hard links: no extra writes); default: only the latest",
        check=POSITIVE_INT,
        metavar="K",
        group=RELIABILITY,
        trains=True,
    )
    checkpoint_minutes: float = option(
        10.0,
        "save the run's checkpoint (OUTPUT_DIR/checkpoint.pt; checkpoint.dcp/ under --fsdp) every F minutes of the run and at epoch ends (0: not by time)",
        check=NON_NEGATIVE_FLOAT,
        metavar="F",
        group=RELIABILITY,
        trains=True,
    )
    extra: dict[str, Any] = option(None, "recipe-specific options (Python API only)", cli=False, default_factory=dict)
    checkpoint_every: int = option(
        0,
        "also save the run's checkpoint every N optimizer steps (0: by time and at epoch ends only)",
        check=NON_NEGATIVE_INT,
        metavar="N",
        group=RELIABILITY,
        trains=True,
    )
    inject_nonfinite: float = option(
        0.0,
        "diagnostic: put an inf into one gradient element at this fraction of optimizer steps",
        check=PROBABILITY,
        metavar="RATE",
        group=RELIABILITY,
        trains=True,
    )
    detect_collapse: bool = option(
        True,
        "do not stop (exit code 3) when the loss scale, skipped steps or loss show a collapse",
        check=BOOL,
        flag="--no-collapse-check",
        group=RELIABILITY,
        trains=True,
    )
    min_loss_scale: float = option(
        1.0,
        "collapse when the fp16 loss scale falls below F",
        check=NON_NEGATIVE_FLOAT32,
        metavar="F",
        group=RELIABILITY,
        trains=True,
    )
    max_consecutive_skips: int = option(
        10,
        "collapse after N skipped optimizer steps in a row",
        check=POSITIVE_INT,
        metavar="N",
        group=RELIABILITY,
        trains=True,
    )
    # The fp16 risk check (mixft.amp.preflight) and its two fixes; mixft/runs/checks.py applies them.
    preflight: bool | None = option(
        None,
        "check the model for fp16 overflow/underflow before training (a few fp32 "
        "batches with hooks; default: before any fp16 run); it only checks, training "
        "follows",
        check=BOOL,
        negatable=True,
        group=RELIABILITY,
    )
    fp32_modules: list[str] | None = option(
        None,
        "run these modules outside autocast, in fp32 (the preflight names them), e.g. encoder.layer.3.output",
        check=NAMES,
        metavar="NAME,...",
        group=RELIABILITY,
    )
    init_loss_scale: float | None = option(
        None,
        "fp16's initial GradScaler loss scale (default 65536)",
        check=POSITIVE_FLOAT32,
        metavar="F",
        group=RELIABILITY,
        trains=True,
    )

    def for_recipe(self, recipe) -> RunConfig:
        """These options as ``recipe`` (a recipe module) runs them: checked, its defaults applied, validated.

        Refuses (UsageError) an option the recipe would ignore and an ``extra`` key it does not read,
        then fills every unset option with the recipe's default and applies every rule.
        Usage: ``cfg = RunConfig(recipe="bert-sst2", max_train_samples=500).for_recipe(get_recipe("bert-sst2"))``
        """
        self.check_recipe_options(self.recipe, recipe.USES, recipe.DEFAULTS)
        check_extra_options(self, recipe)  # extra: only the keys the recipe reads
        return self.with_defaults(recipe.DEFAULTS).validate()

    def with_defaults(self, defaults: dict[str, Any]) -> RunConfig:
        """A copy where every None field takes the recipe's default; unknown keys are a bug."""
        known = {f.name for f in fields(self)}
        unknown = set(defaults) - known
        if unknown:
            raise ValueError(f"recipe defaults name unknown options: {sorted(unknown)}")
        values = asdict(self)
        # Applied twice (a notebook's cfg, then mixft.run): the first copy's record still holds.
        filled = {key: value for key, value in recipe_defaulted(self).items() if key in defaults}
        for key, value in defaults.items():
            if values[key] is None:
                values[key] = value
                filled[key] = value
        cfg = RunConfig(**values)
        cfg.recipe_defaulted = filled
        return cfg

    def validate(self) -> RunConfig:
        """Apply every field's rule and the rules between fields; UsageError names the option."""
        for f in fields(self):
            value, check = getattr(self, f.name), f.metadata.get("check")
            if check is not None and value is not None:
                check.validate(flag_of(f), value)
        if not self.precisions:
            raise UsageError("--compare needs at least one precision, e.g. --compare fp32,bf16")
        if len(set(self.precisions)) != len(self.precisions):
            raise UsageError(f"--compare lists a precision twice: {','.join(self.precisions)}")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise UsageError(f"--seeds must list distinct integers, got {self.seeds}")
        for seed in self.seeds:
            SEED.validate("--seed", seed)
        if self.probe and (self.resume or self.save_model or self.eval_only):
            raise UsageError("--probe trains nothing: it cannot be combined with --resume, --save-model or --eval-only")
        if self.eval_only and (self.resume or self.save_model):
            raise UsageError("--eval-only trains nothing: it cannot be combined with --resume or --save-model")
        self._validate_lora()
        self._validate_optimisation()
        self._validate_real_run()
        check_option_combinations(self)  # options that meet (schedule x lr, loss scale x floor, ...)
        out = Path(self.output_dir)
        if out.exists() and not out.is_dir():
            raise UsageError(f"--output-dir {self.output_dir}: exists and is not a directory")
        return self

    def _validate_lora(self) -> None:
        # A LoRA setting without --lora would be silently ignored: the full model would train.
        if not self.lora:
            for f in fields(self):
                if f.name.startswith("lora_") and getattr(self, f.name) != f.default:
                    raise UsageError(f"{flag_of(f)} needs --lora")
        elif self.eval_only:
            raise UsageError("--lora with --eval-only: a saved LoRA directory is loaded as it is; drop --lora")

    def _validate_optimisation(self) -> None:
        check_schedule(self.lr_scheduler, self.warmup_ratio, self.warmup_steps, self.lr_cycles)
        if self.label_smoothing == 1:
            raise UsageError(
                "--label-smoothing 1 makes every target uniform, leaving nothing to learn: use a value below 1"
            )
        if not self.group_by_length and self.length_group_size != _default("length_group_size"):
            raise UsageError(
                "--length-group-size sizes the length groups of --group-by-length, which is off "
                "(every batch is drawn at random): add --group-by-length or drop --length-group-size"
            )
        if self.eval_only:  # nothing trains: a training option would be silently ignored
            filled = recipe_defaulted(self)  # the recipe's own training defaults (packing) are not the user's
            for f in fields(self):
                if (
                    (f.metadata.get("group") == OPTIMISATION or f.metadata.get("trains"))
                    and getattr(self, f.name) != f.default
                    and f.name not in filled
                ):
                    raise UsageError(f"--eval-only trains nothing: {flag_of(f)} cannot be combined with it")

    def _validate_real_run(self) -> None:
        from mixft.callbacks.tracker_names import check_trackers

        check_trackers(self.report_to)  # a tracker's package missing: the extra to install, now
        if self.predict_file is not None:
            path = Path(self.predict_file).expanduser()
            if not path.is_file():
                raise UsageError(
                    f"--predict-file {self.predict_file}: "
                    + ("is a directory, expected a data file" if path.is_dir() else "file not found")
                )

    def check_recipe_options(self, recipe_name: str, uses, defaults: dict[str, Any] | None = None) -> None:
        """Refuse an option the recipe would silently ignore (e.g. --data-dir with mlp-synthetic).

        A value equal to the recipe's own default is not the user's (a config that had
        ``with_defaults`` applied before ``mixft.run``).
        """
        defaults = defaults or {}
        for f in fields(self):
            value = getattr(self, f.name)
            if (
                f.metadata.get("per_recipe")
                and f.name not in uses
                and value != f.default
                and not (f.name in defaults and value == defaults[f.name])
            ):
                raise UsageError(
                    f"{flag_of(f)}: not used by recipe {recipe_name} (it uses: "
                    f"{', '.join(sorted(flag_of(g) for g in fields(self) if g.name in uses)) or 'none of the per-recipe options'})"
                )

    @property
    def clip_norm(self) -> float | None:
        """The trainer's max_grad_norm: None when clipping is disabled."""
        return self.max_grad_norm or None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _default(name: str):
    return next(f.default for f in fields(RunConfig) if f.name == name)


# ------------------------------------------------------------------ where a value came from


def recipe_defaulted(cfg) -> dict[str, Any]:
    """``{option: value}`` the recipe's ``DEFAULTS`` filled in ``cfg`` (``RunConfig.with_defaults``)."""
    return dict(getattr(cfg, "recipe_defaulted", None) or {})


def is_recipe_default(cfg, name: str) -> bool:
    """Whether option ``name`` of ``cfg`` holds the value the recipe's defaults put there, rather
    than one the user gave (command line, ``--config`` file or Python; even one equal to it)."""
    filled = recipe_defaulted(cfg)
    return name in filled and filled[name] == getattr(cfg, name)


def describe_setting(cfg, name: str) -> str:
    """Option ``name``'s value for a message, naming where it came from: ``"--max-length 64"``
    when the user gave it, ``"the recipe's default max length 128"`` when the recipe's
    defaults filled it (the user never typed the flag, so a message must not blame it),
    ``"--max-length not set"`` when it has none.

    Usage: ``f"{describe_setting(cfg, 'max_length')} is longer than the model reads"``
    """
    f = next(f for f in fields(RunConfig) if f.name == name)
    value = getattr(cfg, name)
    if value is None:
        return f"{flag_of(f)} not set"
    if is_recipe_default(cfg, name):
        return f"the recipe's default {name.replace('_', ' ')} {value}"
    return f"{flag_of(f)} {value}"


def replace_keeping_origin(cfg: RunConfig, **changes) -> RunConfig:
    """``dataclasses.replace`` that keeps the record of the recipe's defaults (for messages)."""
    from dataclasses import replace

    new = replace(cfg, **changes)
    new.recipe_defaulted = recipe_defaulted(cfg)  # a changed value no longer matches it: the user's
    return new


def with_settled(cfg: RunConfig, settled: dict[str, Any] | None) -> RunConfig:
    """``cfg`` with the values a recipe's ``prepare`` settled once the model was known (its ``settled``:
    bert-sst2 turns its default packing off for a family that does not pack). A settled option the
    recipe's defaults filled stays the recipe's in messages (``is_recipe_default``), not the user's.

    Usage: ``cfg = with_settled(cfg, prepared.settled)``
    """
    if not settled:
        return cfg
    new = replace_keeping_origin(cfg, **settled)
    new.recipe_defaulted.update({key: value for key, value in settled.items() if key in new.recipe_defaulted})
    return new
