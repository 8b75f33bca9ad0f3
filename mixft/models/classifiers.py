"""The classic BERT sentence classifier: encoder + dropout + one linear unit (+ sigmoid).

The README's model ends in ``torch.sigmoid`` and trains with ``BCELoss``. Under
autocast that pair is refused ("unsafe to autocast"): in fp16, sigmoid saturates to
exactly 0 or 1 and ``log(0)`` is -inf. So ``forward`` returns the *logit*, the loss is
``BCEWithLogitsLoss`` (which autocast runs in fp32 and which folds the sigmoid into a
numerically stable log-sum-exp), and ``predict_proba`` applies the sigmoid for users.

``SequenceClassifier`` (below) is the model of the ``text-classification`` and ``glue``
recipes: any encoder, or a decoder-only model (GPT-2, Llama, Qwen2, Mistral, ...) whose
head reads the last token that is not padding; N classes with softmax cross-entropy, or
regression with MSE.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from mixft.errors import UsageError
from mixft.log import logger
from mixft.models.first_token_encoder import first_token_methods, first_token_states, reads_first_tokens_only
from mixft.models.packed import block_diagonal_mask, check_packs, first_token_places
from mixft.models.positions import first_position


class BertClassifier(nn.Module):
    """BERT encoder -> dropout -> Linear(hidden_size, 1). ``forward`` returns logits (B,).

    Usage::

        encoder = AutoModel.from_pretrained(path)
        model = BertClassifier(encoder)
        probs = model.predict_proba(**tokenizer(["a fine film"], return_tensors="pt"))
    """

    def __init__(self, encoder: nn.Module, dropout: float = 0.1):
        super().__init__()
        self.encoder = encoder
        self.dropout = nn.Dropout(dropout)
        # Sized from the encoder (the README hard-codes 512 on a 768-wide BERT).
        self.classifier = nn.Linear(encoder.config.hidden_size, 1)

    def forward(
        self, input_ids, attention_mask=None, token_type_ids=None, position_ids=None, sequence_ids=None
    ) -> torch.Tensor:
        """Logits (B,) of a padded batch, or of a packed one (``sequence_ids`` given: ``mixft.data.packing``).

        A packed batch's ``position_ids`` count each sentence from 0; a family that does not pack
        (``mixft.models.packed.PACKING_TYPES``) raises ValueError rather than compute something else.
        """
        if sequence_ids is not None:  # packed rows: attention stays within each sentence
            config = self.encoder.config
            check_packs(config)
            mask = block_diagonal_mask(sequence_ids, getattr(config, "_attn_implementation", None))
            rows, positions = first_token_places(sequence_ids, position_ids)
            # The positions the encoder gives the sentence padded alone: RoBERTa-likes count from
            # padding_idx + 1, not 0 (mixft.models.positions); the first token is still found at 0 above.
            if first_position(config):
                position_ids = position_ids + first_position(config)
        else:  # one sentence per row, its [CLS] first
            mask = attention_mask
            rows = torch.arange(input_ids.shape[0], device=input_ids.device)
            positions = torch.zeros_like(rows)
        cls = self._cls_states(input_ids, mask, token_type_ids, position_ids, rows, positions)
        pooler = getattr(self.encoder, "pooler", None)
        pooled = pooler(cls[:, None]) if pooler is not None else cls  # the pooler reads position 0
        return self.classifier(self.dropout(pooled)).squeeze(-1)

    def _cls_states(self, input_ids, mask, token_type_ids, position_ids, rows, positions) -> torch.Tensor:
        """(B, H): the encoder's last hidden state at each sentence's [CLS] (rows[i], positions[i])."""
        if reads_first_tokens_only(self.encoder):  # the last layer computes these tokens only
            return first_token_states(self.encoder, input_ids, mask, token_type_ids, position_ids, rows, positions)
        # The whole encoder; its own pooler_output (on each row's first token, which in packed rows
        # mixes sentences) is not read: B x hidden x hidden, under 0.2 % of a step's matmuls.
        out = self.encoder(
            input_ids=input_ids, attention_mask=mask, token_type_ids=token_type_ids, position_ids=position_ids
        )
        return out.last_hidden_state[rows, positions]

    def fsdp_forward_methods(self) -> list[tuple[nn.Module, str]]:
        """The sharded units' methods this model calls instead of their ``forward`` (``mixft.train.fsdp``'s
        protocol): the [CLS]-only last layer's, which FSDP must gather the layer's weights around."""
        return first_token_methods(self.encoder)

    @torch.no_grad()
    def predict_proba(self, **inputs) -> torch.Tensor:
        """P(label = 1): the README model's sigmoid output, computed in fp32."""
        return torch.sigmoid(self.forward(**inputs).float())


def logits_to_labels(logits: torch.Tensor) -> torch.Tensor:
    """sigmoid(logit) > 0.5  <=>  logit > 0 (no sigmoid needed, no saturation)."""
    return (logits > 0).long()


# ---------------------------------------------------------------------------------------
# Any encoder: N classes or a regression score
# ---------------------------------------------------------------------------------------
#
# Built on AutoModelForSequenceClassification, not on a mixft head over AutoModel, because:
# - each architecture keeps the head its authors fine-tuned with (BERT: pooler + linear;
#   RoBERTa/XLM-R/ELECTRA: dense + activation over <s>; DistilBERT: pre_classifier;
#   DeBERTa: ContextPooler). A generic head would need per-architecture knowledge of the
#   pooled vector anyway, and would score differently from run_glue.py and HF Trainer,
#   the peers mixft's figures are compared with;
# - num_labels, id2label/label2id and problem_type live in the model's own config, so
#   save_pretrained writes them and any transformers user can load the saved directory;
# - missing weights (a fresh head, a pooler absent from the checkpoint) are initialised
#   by the architecture's own _init_weights, from torch's RNG, which load_classifier seeds.
# The wrapper only makes forward return the logits tensor the Trainer's loss_fn expects.


class SequenceClassifier(nn.Module):
    """A transformers ``*ForSequenceClassification`` model whose ``forward`` returns logits.

    ``forward(**batch)`` returns (B, num_labels) logits for classification, (B,) scores for
    regression; ``loss_fn`` / ``predict_fn`` are the matching trainer functions.

    Usage::

        model = load_classifier(path, seed=0, labels=["negative", "neutral", "positive"])
        Trainer(model, opt, model.loss_fn, loader, predict_fn=model.predict_fn, ...)
        model.save_pretrained("out/model")      # config.json keeps id2label / label2id
    """

    def __init__(self, model: nn.Module, fresh_weights: Sequence[str] = ()):
        super().__init__()
        self.model = model
        # Weights not in the checkpoint (initialised from the seed): a fresh head is
        # untrained, which --eval-only must not present as a fine-tuned result.
        self.fresh_weights = tuple(sorted(fresh_weights))
        # A LoRA-wrapped model (peft) takes token_type_ids through **kwargs: ask the model inside.
        inner = model.get_base_model() if hasattr(model, "get_base_model") else model
        accepted = inspect.signature(inner.forward).parameters
        # DistilBERT takes no token_type_ids; RoBERTa/XLM-R have one segment embedding
        # (type_vocab_size 1), where zeros equal "absent" and a pair's ones would index
        # past the table; DeBERTa (0) ignores them. GPT-2 would look segment ids up in its
        # *word* embeddings. Only encoders with 2+ segments get them.
        self._token_types = (
            "token_type_ids" in accepted
            and getattr(model.config, "type_vocab_size", 2) > 1
            and not _is_decoder_only(model.config)
        )

    @property
    def config(self):
        """The transformers config: num_labels, id2label, label2id, problem_type."""
        return self.model.config

    @property
    def is_regression(self) -> bool:
        return self.config.problem_type == "regression"

    @property
    def labels(self) -> list[str] | None:
        """Label names in id order (None for regression)."""
        if self.is_regression:
            return None
        return [str(self.config.id2label[i]) for i in range(self.config.num_labels)]

    @property
    def untrained(self) -> bool:
        """True when some weights (typically the head) were not in the checkpoint."""
        return bool(self.fresh_weights)

    @property
    def loss_fn(self):
        return regression_loss if self.is_regression else classification_loss

    @property
    def predict_fn(self):
        return regression_values if self.is_regression else argmax_labels

    def forward(self, input_ids, attention_mask=None, token_type_ids=None) -> torch.Tensor:
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if self._token_types and token_type_ids is not None:
            inputs["token_type_ids"] = token_type_ids
        logits = self.model(**inputs).logits
        return logits.squeeze(-1) if self.is_regression else logits

    def save_pretrained(self, directory, **kwargs) -> None:
        """Write a standard transformers checkpoint (weights + config with the labels)."""
        self.model.save_pretrained(directory, **kwargs)


@contextlib.contextmanager
def _quiet_transformers():
    """Hide from_pretrained's progress bar and load report; mixft reports fresh weights itself."""
    from transformers.utils import logging as hf_logging

    verbosity, bar = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bar:
            hf_logging.enable_progress_bar()


def _is_decoder_only(config) -> bool:
    from mixft.models.check import is_decoder_only

    return is_decoder_only(config)


def pad_for_classification(tokenizer, config, source: str = "the model"):
    """Make ``tokenizer`` pad the way a decoder-only classifier needs; returns it (changed in place).

    A decoder's head reads the last token that is not padding (transformers finds it as the
    rightmost id != ``config.pad_token_id``). GPT-2, Llama and Mistral tokenizers have no
    padding token, so batches cannot be padded at all: they pad with their end-of-text
    token, as transformers' own examples do. Padding goes on the right: the real tokens
    then keep positions 0..n-1 in any batch (left padding shifts them by the padding
    length, so a prediction would depend on the longest text in its batch), and causal
    attention keeps them from seeing the padding after them. Encoders are returned as they
    are. Pass the same tokenizer to :func:`load_classifier`, which copies its padding id
    into the model's config.

    Usage: ``tokenizer = pad_for_classification(checked.tokenizer, checked.config)``
    """
    if not _is_decoder_only(config):
        return tokenizer
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise UsageError(
                f"{source}: the tokenizer has neither a padding token nor an end-of-text token to pad with"
            )
        tokenizer.pad_token = tokenizer.eos_token
        logger.debug("%s: no padding token; padding with the end-of-text token %r", source, tokenizer.eos_token)
    tokenizer.padding_side = "right"
    return tokenizer


def load_classifier(
    model_path: str,
    *,
    seed: int,
    labels: Sequence[str] | None = None,
    regression: bool = False,
    source: str | None = None,
    tokenizer=None,
) -> SequenceClassifier:
    """Load any encoder or decoder-only model with its sequence-classification head, fp32 master weights.

    ``labels``: class names in id order (2 or more): a classifier with that many outputs,
    names saved as id2label/label2id. ``regression=True``: one output trained with MSE.
    Neither: the task saved in the checkpoint's config (a directory written by
    ``save_pretrained``, read back by ``--eval-only``). A checkpoint head of another size
    is replaced by a fresh one (fine-tuning an MNLI model for RTE); weights that do not fit
    the encoder are refused. Weights missing from the checkpoint are drawn from ``seed``
    alone: the same seed gives the same head in every run, and the caller's RNG stream is
    left untouched. Weights saved in fp16/bf16 are loaded as float32. Encoder-decoder models
    are refused (UsageError). A decoder-only model gets ``config.pad_token_id`` from
    ``tokenizer`` (default: the one saved with the model) after
    :func:`pad_for_classification`, so its head pools the padding the batches really hold,
    and no generation cache (a classifier never reuses one; it would only cost memory).

    Usage: ``model = load_classifier(resolve_model(name).path, seed=0, labels=["neg", "pos"])``
    """
    from transformers import AutoConfig, AutoModelForSequenceClassification

    from mixft.models.check import check_encoder

    source = source or f"--model {model_path}"
    if labels is not None and regression:
        raise UsageError("a model is either a classifier (labels) or a regression model, not both")
    config = AutoConfig.from_pretrained(model_path)
    check_encoder(config, source, decoders=True)
    if regression:
        task = {"num_labels": 1, "problem_type": "regression"}
    elif labels is not None:
        names = [str(name) for name in labels]
        if len(names) < 2 or len(set(names)) != len(names):
            raise UsageError(f"a classifier needs 2 or more distinct labels, got {names}")
        task = {
            "num_labels": len(names),
            "id2label": dict(enumerate(names)),
            "label2id": {name: i for i, name in enumerate(names)},
            "problem_type": "single_label_classification",
        }
    else:  # the checkpoint's own task; transformers' convention: 1 output means regression
        saved = config.problem_type or ("regression" if config.num_labels == 1 else "single_label_classification")
        task = {"problem_type": saved}
    if _is_decoder_only(config):
        task.update(pad_token_id=_decoder_pad_id(model_path, config, source, tokenizer), use_cache=False)

    # Seed right before the weights are created: the fresh head (and a pooler missing from
    # the checkpoint) then depends on the seed only, not on what ran before. fork_rng puts
    # the caller's RNG state back afterwards.
    with torch.random.fork_rng(devices=[]), _quiet_transformers():
        torch.manual_seed(seed)
        model, info = AutoModelForSequenceClassification.from_pretrained(
            model_path,
            dtype=torch.float32,
            output_loading_info=True,
            ignore_mismatched_sizes=True,
            **task,
        )
    # Mismatched sizes are loaded as fresh weights, then judged here: a head of another
    # size is expected when a new label set is asked for, never inside the encoder.
    prefix = f"{model.base_model_prefix}."
    mismatched = sorted(_mismatched_names(info))
    refused = [name for name in mismatched if name.startswith(prefix) or (labels is None and not regression)]
    if refused:
        raise UsageError(f"{source}: the weights do not fit config.json: {refused[0]} has another shape")
    fresh = set(info.get("missing_keys", ())) | set(mismatched)
    if fresh:
        logger.debug("%s: newly initialised (seed %d): %s", source, seed, ", ".join(sorted(fresh)))
    return SequenceClassifier(model, fresh)


def _decoder_pad_id(model_path: str, config, source: str, tokenizer) -> int:
    """The id the batches are padded with: the tokenizer's, which wins over a config that disagrees."""
    if tokenizer is None:
        from transformers import AutoTokenizer

        from mixft.models.check import TOKENIZER_FILES

        needs = f"{source}: a decoder-only model needs its tokenizer (for the padding id)"
        directory = Path(model_path)
        # transformers builds a token-less stand-in from a directory without tokenizer files.
        if directory.is_dir() and not any((directory / name).is_file() for name in TOKENIZER_FILES):
            raise UsageError(f"{needs}; there are no tokenizer files")
        try:
            tokenizer = AutoTokenizer.from_pretrained(model_path)
        except Exception as exc:  # a broken tokenizer.json, a hub repo without one...
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            raise UsageError(f"{needs}, which cannot be loaded: {first}") from None
    pad_id = pad_for_classification(tokenizer, config, source).pad_token_id
    if config.pad_token_id is not None and config.pad_token_id != pad_id:
        logger.debug(
            "%s: config.json pads with id %s, the tokenizer with %s; using the tokenizer's",
            source,
            config.pad_token_id,
            pad_id,
        )
    return pad_id


def _mismatched_names(info) -> set[str]:
    """Names in transformers' ``mismatched_keys`` (plain names or (name, old, new) tuples)."""
    return {item[0] if isinstance(item, tuple) else item for item in info.get("mismatched_keys", ())}


# Losses and predictions. Both losses run in fp32 with autocast disabled, whatever the
# logits' dtype: under fp16 a squared error above 256 overflows (65504 is fp16's largest
# value) and log-softmax of large logits loses the small probabilities, so every step would
# be skipped or the loss rounded; under bf16 a residual has 3 significant digits, so MSE
# gradients of a nearly fitted regression are noise. The cast costs one (B, N) copy.


def classification_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Softmax cross-entropy of (B, N) logits against (B,) class ids, computed in fp32.

    Usage: ``Trainer(model, opt, classification_loss, loader, ...)``
    """
    with torch.autocast(logits.device.type, enabled=False):
        return nn.functional.cross_entropy(logits.float(), labels.long())


def classification_loss_factory(label_smoothing: float = 0.0, class_weights: torch.Tensor | None = None):
    """Softmax cross-entropy with label smoothing and/or per-class weights, in fp32 like ``classification_loss``.

    ``class_weights``: one weight per class (e.g. ``mixft.train.schedules.class_weights_balanced``);
    the batch loss is then the mean over its examples of each one's weighted loss. Not
    ``F.cross_entropy``'s weighted mean, which divides by the weights of the batch's own labels:
    that denominator differs from micro-batch to micro-batch, so k accumulated micro-batches
    were not one batch k times the size, and the eval loss moved with the eval batch size.
    Balanced weights average 1 over the training labels, so the loss keeps cross-entropy's scale.
    Neither option: ``classification_loss`` itself, so a run without them computes exactly
    what it did before they existed.

    Usage: ``loss_fn = classification_loss_factory(0.1, class_weights_balanced(train_labels, 3))``
    """
    if not label_smoothing and class_weights is None:
        return classification_loss
    weights = None if class_weights is None else class_weights.detach().float()

    def loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        with torch.autocast(logits.device.type, enabled=False):
            weight = None if weights is None else weights.to(logits.device)  # a few floats: no cost worth caching
            per_example = nn.functional.cross_entropy(
                logits.float(), labels.long(), weight=weight, label_smoothing=label_smoothing, reduction="none"
            )
            return per_example.mean()  # a plain mean over examples: micro-batches add up to the window's batch

    return loss


def refuse_for_regression(regression: bool, label_smoothing: float = 0.0, class_weights=None) -> None:
    """One line when a regression task is given a classification-only loss option.

    Usage: ``refuse_for_regression(task.kind == "regression", cfg.label_smoothing, cfg.class_weights)``
    """
    if regression and (label_smoothing or class_weights is not None):
        raise UsageError("--label-smoothing and --class-weights are for classification; this task is regression (MSE)")


def task_loss(regression: bool, label_smoothing: float = 0.0, class_weights: torch.Tensor | None = None):
    """The training loss of a ``SequenceClassifier``'s task: MSE, or cross-entropy with the options.

    Regression refuses label smoothing and class weights (UsageError, one line).

    Usage: ``loss_fn = task_loss(model.is_regression, label_smoothing=0.1)``
    """
    refuse_for_regression(regression, label_smoothing, class_weights)
    return regression_loss if regression else classification_loss_factory(label_smoothing, class_weights)


def regression_loss(scores: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean squared error of (B,) scores against (B,) targets, computed in fp32.

    Usage: ``Trainer(model, opt, regression_loss, loader, ...)``
    """
    with torch.autocast(scores.device.type, enabled=False):
        return nn.functional.mse_loss(scores.float(), targets.float())


def argmax_labels(logits: torch.Tensor) -> torch.Tensor:
    """Predicted class ids of (B, N) logits. Usage: ``predict_fn=argmax_labels``."""
    return logits.argmax(dim=-1)


def regression_values(scores: torch.Tensor) -> torch.Tensor:
    """Predicted scores (the outputs themselves, in fp32). Usage: ``predict_fn=regression_values``."""
    return scores.float()


# ---------------------------------------------------------------------------------------
# Gradient (activation) checkpointing
# ---------------------------------------------------------------------------------------


def transformers_model(model: nn.Module) -> nn.Module:
    """The transformers model inside a mixft classifier: BertClassifier's encoder, a
    SequenceClassifier's model (under a LoRA model: the base model peft wraps).

    Usage: ``transformers_model(model).config``
    """
    inner = model.encoder if isinstance(model, BertClassifier) else getattr(model, "model", model)
    return inner.get_base_model() if hasattr(inner, "get_base_model") else inner


def enable_gradient_checkpointing(model: nn.Module) -> None:
    """Recompute each transformer layer's activations during backward instead of keeping them.

    Autograd then keeps only each layer's input (and what is outside the layers) from the
    forward: less memory, for about one more forward pass of compute. Gradients are the same
    (dropout masks are replayed: torch's checkpoint restores the RNG state). Non-reentrant
    checkpointing: the reentrant kind passes no gradient to the layers' parameters when the
    layer's input does not require grad (a LoRA model's frozen embeddings), and torch asks
    for the choice to be explicit. A model without checkpointing support is refused.

    Usage: ``enable_gradient_checkpointing(model)  # before training, model in train mode``
    """
    hf = transformers_model(model)
    if not getattr(hf, "supports_gradient_checkpointing", False):
        raise UsageError(f"--gradient-checkpointing: {type(hf).__name__} does not support it")
    # A classifier never reuses a generation cache, and transformers warns that it turns it
    # off under checkpointing: say so in the config instead.
    if getattr(hf.config, "use_cache", False):
        hf.config.use_cache = False
    kwargs = {"use_reentrant": False}
    if hasattr(hf, "activation_checkpointing_enable"):  # the newer name; gradient_checkpointing_enable warns there
        hf.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
