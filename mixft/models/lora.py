"""LoRA through ``peft``: small trained adapters on a frozen model, the classification head trained in full.

LoRA freezes every weight of the pretrained model and learns, beside chosen Linear layers
``W``, a low-rank update ``(alpha / r) * B @ A`` (``A``: r x in, ``B``: out x r, ``B`` starting
at zero so step 0 is the pretrained model). The head that reads the pooled vector is new
for the task, so it is trained in full (peft's ``modules_to_save``), and so is any weight
the checkpoint did not hold (a BERT pooler absent from a sentence-embedding checkpoint: a
random layer left frozen would be noise the adapters must learn around).

What gets saved is the adapters and the head only (``adapter_config.json`` +
``adapter_model.safetensors``, megabytes instead of the model's size), plus
``lora_classifier.json``: the base model's name or path and the task (labels or
regression), so :func:`load_lora_classifier` rebuilds the same classifier.

Usage::

    model = apply_lora(load_classifier(path, seed=0, labels=["neg", "pos"]), LoraOptions(r=8))
    trainable, total = trainable_parameters(model)
    ...train...
    model.save_pretrained("out/model")                       # adapters + head, small
    again = load_lora_classifier("out/model")                # same predictions
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from torch import nn

from mixft.errors import UsageError
from mixft.log import logger
from mixft.models.classifiers import SequenceClassifier, load_classifier
from mixft.options import LORA_DROPOUT, POSITIVE_FLOAT32, POSITIVE_INT

ALL_LINEAR = "all-linear"
LORA_FILE = "lora_classifier.json"
ADAPTER_CONFIG = "adapter_config.json"
# Defaults peft's own table lacks (its table covers BERT, RoBERTa, GPT-2, Llama, Qwen2, Mistral...).
_EXTRA_DEFAULT_TARGETS = {"distilbert": ("q_lin", "v_lin")}


@dataclass(frozen=True)
class LoraOptions:
    """LoRA's settings; every value checked when built (one-line UsageError).

    ``target_modules``: short names of Linear layers (``("query", "value")``), a comma
    separated string of them, ``"all-linear"``, or None for the architecture's default
    (query + value attention projections: BERT ``query,value``, GPT-2 ``c_attn``,
    Llama/Qwen2/Mistral ``q_proj,v_proj``).

    Usage: ``LoraOptions(r=8, alpha=16, dropout=0.05, target_modules="q_proj,v_proj")``
    """

    r: int = 8
    alpha: float = 16
    dropout: float = 0.05
    target_modules: tuple[str, ...] | str | None = None

    def __post_init__(self):
        POSITIVE_INT.validate("--lora-r", self.r)
        POSITIVE_FLOAT32.validate("--lora-alpha", self.alpha)
        LORA_DROPOUT.validate("--lora-dropout", self.dropout)
        targets = self.target_modules
        if isinstance(targets, str):
            targets = ALL_LINEAR if targets.strip() == ALL_LINEAR else tuple(n.strip() for n in targets.split(","))
        elif targets is not None:
            targets = tuple(targets)
        if isinstance(targets, tuple) and (not targets or not all(isinstance(n, str) and n for n in targets)):
            raise UsageError(
                f"--lora-target-modules must name Linear layers (e.g. query,value) or be "
                f"{ALL_LINEAR}, got {self.target_modules!r}"
            )
        object.__setattr__(self, "target_modules", targets)


class LoraClassifier(SequenceClassifier):
    """A :class:`SequenceClassifier` whose model is a peft LoRA model; saves adapters + head only.

    Usage: ``apply_lora(classifier, LoraOptions()).save_pretrained("out/model")``
    """

    def __init__(self, model: nn.Module, base_model: str, fresh_weights: Sequence[str] = ()):
        super().__init__(model, fresh_weights)
        self.base_model = base_model  # the name or path the frozen weights come from

    def save_pretrained(self, directory, **kwargs) -> None:
        """Write the adapters and the head (peft's files) and ``lora_classifier.json`` (base model, task)."""
        directory = Path(directory)
        self.model.save_pretrained(directory, **kwargs)
        task = {"problem_type": self.config.problem_type, "labels": self.labels}
        (directory / LORA_FILE).write_text(json.dumps({"base_model": self.base_model, "task": task}, indent=2) + "\n")


def _linear_types() -> tuple[type, ...]:
    from transformers.pytorch_utils import Conv1D  # GPT-2's Linear, weights transposed

    return (nn.Linear, Conv1D)


def head_modules(model: nn.Module) -> list[str]:
    """Names of the modules trained in full: the task head, and layers the checkpoint did not hold.

    The head is every top-level child of the transformers model except the pretrained body
    (``base_model_prefix``) that holds parameters: BERT ``classifier``, DistilBERT
    ``pre_classifier`` + ``classifier``, DeBERTa ``pooler`` + ``classifier``, GPT-2/Llama ``score``.

    Usage: ``head_modules(load_classifier(path, seed=0, labels=["a", "b"]))  # ['classifier']``
    """
    hf = model.model if isinstance(model, SequenceClassifier) else model
    if hasattr(hf, "get_base_model"):  # already LoRA-wrapped: the transformers model inside
        hf = hf.get_base_model()
    names = [
        name
        for name, child in hf.named_children()
        if name != hf.base_model_prefix and any(True for _ in child.parameters())
    ]
    fresh = model.fresh_weights if isinstance(model, SequenceClassifier) else ()
    for weight in fresh:
        module = weight.rpartition(".")[0]
        if module and not any(module == h or module.startswith(h + ".") for h in names):
            names.append(module)
    return sorted(set(names))


def _candidates(hf: nn.Module, heads: Sequence[str]) -> dict[str, str]:
    """Full name -> short name of every Linear layer outside the head (what LoRA may adapt)."""
    linear = _linear_types()
    return {
        name: name.rpartition(".")[2]
        for name, module in hf.named_modules()
        if isinstance(module, linear) and not any(name == h or name.startswith(h + ".") for h in heads)
    }


def _default_targets(model_type: str) -> tuple[str, ...] | str:
    from peft.utils import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as PEFT_DEFAULTS

    if model_type in _EXTRA_DEFAULT_TARGETS:
        return _EXTRA_DEFAULT_TARGETS[model_type]
    if model_type in PEFT_DEFAULTS:
        return tuple(PEFT_DEFAULTS[model_type])
    logger.info("LoRA: no default target modules known for %s; adapting all its Linear layers", model_type)
    return ALL_LINEAR


def resolve_targets(model: SequenceClassifier, options: LoraOptions) -> list[str]:
    """Full names of the Linear layers LoRA adapts; UsageError naming the available ones for an unknown name.

    Usage: ``resolve_targets(classifier, LoraOptions(target_modules="query,value"))``
    """
    heads = head_modules(model)
    candidates = _candidates(model.model, heads)
    wanted = options.target_modules or _default_targets(model.config.model_type)
    if wanted == ALL_LINEAR:
        return sorted(candidates)
    available = sorted(set(candidates.values()))
    unknown = [name for name in wanted if name not in available]
    if unknown:
        raise UsageError(
            f"--lora-target-modules: {model.config.model_type} has no Linear layer named "
            f"{', '.join(unknown)}; its Linear layers: {', '.join(available)} (or {ALL_LINEAR})"
        )
    return sorted(full for full, short in candidates.items() if short in wanted)


def check_lora_rank(model: nn.Module, targets: Sequence[str], r: int) -> None:
    """Refuse a rank above what the adapted layers can use, before peft allocates anything.

    An update ``B @ A`` of a layer ``in -> out`` has rank at most ``min(in, out)``: a larger
    ``r`` only adds parameters (and memory: ``--lora-r 100000000`` asks peft for gigabytes per
    layer). Reads shapes only, so it works on a model built on the meta device.

    Usage: ``check_lora_rank(classifier.model, resolve_targets(classifier, options), options.r)``
    """
    modules = dict(model.named_modules())
    widths = [min(modules[name].weight.shape) for name in targets if getattr(modules[name], "weight", None) is not None]
    if widths and r > max(widths):
        short = ", ".join(sorted({name.rpartition(".")[2] for name in targets}))
        raise UsageError(
            f"--lora-r {r} is above the rank the adapted layers can use (at most {max(widths)}: "
            f"min(in, out) of {short}); a larger rank adds parameters and nothing else"
        )


def check_lora_targets(config, options: LoraOptions) -> list[str]:
    """:func:`resolve_targets` before any weight is read: the model built from ``config`` on no memory.

    For start-up validation (a bad ``--lora-target-modules`` refused before training starts).

    Usage: ``check_lora_targets(checked.config, LoraOptions(target_modules="q_proj,v_proj"))``
    """
    import torch
    from transformers import AutoModelForSequenceClassification

    with torch.device("meta"):  # shapes and names only: nothing allocated or initialised for real
        model = AutoModelForSequenceClassification.from_config(config)
    targets = resolve_targets(SequenceClassifier(model), options)
    check_lora_rank(model, targets, options.r)
    return targets


def apply_lora(model: SequenceClassifier, options: LoraOptions | None = None, seed: int = 0) -> LoraClassifier:
    """Freeze ``model`` and add LoRA adapters; the head (and weights the checkpoint lacked) train in full.

    Returns a :class:`LoraClassifier` (forward, loss_fn, predict_fn, labels as before).
    peft adds the adapters inside ``model``'s transformers model (in place, nothing copied):
    use the returned classifier from then on. The adapters' initial ``A`` matrices are drawn
    from ``seed`` alone (peft draws them from torch's global RNG, which no earlier stage
    seeds, so two identical runs would start from different adapters); the caller's RNG
    stream is left as it was.

    Usage: ``model = apply_lora(load_classifier(path, seed=0, labels=names), LoraOptions(r=8), seed=0)``
    """
    import torch
    from peft import LoraConfig, TaskType, get_peft_model

    options = options or LoraOptions()
    if not isinstance(model, SequenceClassifier):
        raise UsageError(f"apply_lora takes a SequenceClassifier (from load_classifier), got {type(model).__name__}")
    if isinstance(model, LoraClassifier):
        raise UsageError("the model already has LoRA adapters")
    targets = resolve_targets(model, options)
    check_lora_rank(model.model, targets, options.r)
    conv1d = _linear_types()[1]
    modules = dict(model.model.named_modules())
    config = LoraConfig(
        task_type=TaskType.SEQ_CLS,
        r=options.r,
        lora_alpha=options.alpha,
        lora_dropout=options.dropout,
        target_modules=targets,
        modules_to_save=head_modules(model),
        # GPT-2's Conv1D keeps its weight as (in, out): peft must know, per layer kind.
        fan_in_fan_out=all(isinstance(modules[name], conv1d) for name in targets),
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.random.fork_rng(devices=[]):  # the adapters depend on the seed alone; the caller's stream is kept
            torch.manual_seed(seed)
            peft_model = get_peft_model(model.model, config)
    for warning in caught:  # transformers' deprecation notices raised inside peft: not the user's concern
        logger.debug("peft: %s", warning.message)
    base = model.config.name_or_path
    logger.debug(
        "LoRA r=%d alpha=%s on %d layers; trained in full: %s",
        options.r,
        options.alpha,
        len(targets),
        ", ".join(config.modules_to_save),
    )
    return LoraClassifier(peft_model, base, model.fresh_weights)


def trainable_parameters(model: nn.Module) -> tuple[int, int]:
    """(parameters that train, all parameters) as element counts; shared tensors counted once.

    Usage: ``trainable, total = trainable_parameters(model)  # for the run header``
    """
    params = list(model.parameters())
    return sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params)


def is_lora_directory(path) -> bool:
    """True for a directory written by ``LoraClassifier.save_pretrained``.

    Usage: ``if is_lora_directory(resolved.path): model = load_lora_classifier(resolved.path)``
    """
    path = Path(path)
    return (path / LORA_FILE).is_file() and (path / ADAPTER_CONFIG).is_file()


def lora_base_model(directory) -> str:
    """The base model's name or path recorded in a saved LoRA directory.

    Usage: ``check_model(lora_base_model(directory), decoders=True)``
    """
    directory = Path(directory)
    if not is_lora_directory(directory):
        raise UsageError(f"{directory}: not a LoRA classifier directory (no {LORA_FILE} and {ADAPTER_CONFIG})")
    try:
        return str(json.loads((directory / LORA_FILE).read_text())["base_model"])
    except (ValueError, KeyError, TypeError):
        raise UsageError(f"{directory}: {LORA_FILE} is not valid (JSON with base_model and task)") from None


def load_lora_classifier(
    directory, *, base_model: str | None = None, seed: int = 0, trainable: bool = False, tokenizer=None
) -> LoraClassifier:
    """Rebuild a saved LoRA classifier: the base model (recorded, or ``base_model``) + adapters + head.

    ``base_model`` overrides the recorded name or path (the base moved, or the caller
    resolved a hub name to a local path). ``trainable=True`` keeps the adapters and head
    trainable (to continue training); otherwise everything is frozen. A decoder's padding
    id comes from ``tokenizer``, by default the one saved in ``directory`` (else the base's).

    Usage: ``model = load_lora_classifier("out/model"); model.eval()``
    """
    from peft import PeftModel

    directory = Path(directory)
    base = base_model or lora_base_model(directory)
    task = json.loads((directory / LORA_FILE).read_text()).get("task") or {}
    regression = task.get("problem_type") == "regression"
    labels = None if regression else task.get("labels")
    if not regression and not labels:
        raise UsageError(f"{directory}: {LORA_FILE} records neither labels nor regression")
    if tokenizer is None and (directory / "tokenizer_config.json").is_file():
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(directory)
    source = f"{directory} (base model {base})"
    classifier = load_classifier(
        base, seed=seed, labels=labels, regression=regression, source=source, tokenizer=tokenizer
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        peft_model = PeftModel.from_pretrained(classifier.model, directory, is_trainable=trainable)
    for warning in caught:
        logger.debug("peft: %s", warning.message)
    # The head came from the directory: nothing is left as initialised.
    return LoraClassifier(peft_model, base)
