"""Check a model directory before any training: one line naming the file and the cause.

``from_pretrained`` accepts a surprising amount of broken input without complaint: a
directory with no tokenizer files gets a 5-token tokenizer (every word becomes ``[UNK]``,
accuracy 0.5, no warning), a GPT-2 checkpoint trains as a "classifier", a ``--max-length``
beyond the position table trains until the first long batch and then crashes. This module
reads what is cheap to read - ``config.json``, the weight files' headers (never the tensors
themselves), the tokenizer - and refuses with a :class:`~mixft.errors.UsageError`:

- ``config.json`` missing, not valid JSON, without a ``model_type``, or of a type this
  transformers does not know;
- an encoder-decoder model (T5, BART, ...), always; a decoder-only one (GPT-2, Llama, ...)
  unless the caller takes them (``decoders=True``: text-classification and glue do, through
  transformers' last-token pooling head; bert-sst2 keeps its BERT classifier);
- weights missing, empty, truncated or corrupt, or not of the shapes the config describes;
- no tokenizer files, a tokenizer of special tokens only, or one whose ids reach beyond the
  model's vocabulary;
- a ``max_length`` longer than the model's position table (:func:`check_max_length`).

Library warnings raised while checking (``warnings`` and transformers' logging, e.g. "bos_token_id
must be None or an integer within the vocabulary") are held back: shown after a check that
passes, dropped when the model is refused, so the refusal is the one line the user sees.

Usage::

    checked = check_model(resolve_model(name).path, max_length=128)
    tokenizer = checked.tokenizer          # already loaded and checked
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import struct
import warnings
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mixft.errors import UsageError, first_line
from mixft.log import logger
from mixft.models.hub import CONFIG_FILE, SAFETENSORS_FILE, SAFETENSORS_INDEX, TORCH_FILE, TORCH_INDEX
from mixft.models.positions import first_position

# The files a tokenizer can be built from (transformers' fast and slow formats).
TOKENIZER_FILES = (
    "tokenizer.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "spm.model",
    "sentencepiece.bpe.model",
    "spiece.model",
    "tokenizer.model",
    "sentencepiece.model",
)

_SAFETENSORS_ITEMSIZE = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E5M2": 1,
    "F8_E4M3": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
}
# A safetensors header is JSON of a few hundred bytes per tensor; anything near this is not one.
_MAX_HEADER_BYTES = 100 * 1024 * 1024


@dataclass(frozen=True)
class CheckedModel:
    """What :func:`check_model` read: the parsed config, the loaded tokenizer, the weight files."""

    path: str
    config: Any  # transformers.PretrainedConfig
    tokenizer: Any  # transformers.PreTrainedTokenizerBase
    weight_files: tuple[str, ...]
    max_length: int | None  # the longest input the position table holds (None: no limit)


# ---------------------------------------------------------------------------------------
# The kind of model: encoders, and decoder-only models where the caller takes them
# ---------------------------------------------------------------------------------------

_ENCODERS = "BERT, RoBERTa, DeBERTa, ..."
_DECODERS = "GPT-2, Llama, Qwen2, Mistral, ..."


def is_decoder_only(config) -> bool:
    """True for a decoder-only language model (GPT-2, Llama, Qwen2, ...), whatever its head.

    Usage: ``is_decoder_only(AutoConfig.from_pretrained(path))``
    """
    from transformers.models.auto import modeling_auto as auto

    model_type = getattr(config, "model_type", None)
    generative = {
        *auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        *auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES,
        *auto.MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES,
    }
    return model_type in generative and model_type not in auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES


def encoder_problem(config, *, decoders: bool = False) -> str | None:
    """Why ``config`` is not a text model mixft can fine-tune as a classifier, or None when it is one.

    ``decoders=True`` accepts decoder-only models that transformers gives a
    sequence-classification head (it pools the last non-padding token).

    Usage: ``if (why := encoder_problem(AutoConfig.from_pretrained(path), decoders=True)): ...``
    """
    from transformers.models.auto import modeling_auto as auto

    model_type = getattr(config, "model_type", None) or "?"
    takes = f"{_ENCODERS} or decoder-only {_DECODERS}" if decoders else _ENCODERS
    if getattr(config, "is_encoder_decoder", False) or model_type in auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES:
        return f"is an encoder-decoder model ({model_type}); mixft fine-tunes encoders ({takes})"
    if is_decoder_only(config) and not decoders:
        return (
            f"is a decoder-only model ({model_type}); this recipe fine-tunes encoders ({_ENCODERS}); "
            "--recipe text-classification also takes decoder-only models"
        )
    if getattr(config, "is_decoder", False) and not is_decoder_only(config):
        # An encoder configured as a decoder sees only the tokens before each position, so
        # its [CLS] vector, the one the head reads, sees nothing but itself.
        return f"is a {model_type} encoder configured as a decoder (is_decoder: true in config.json); set it to false"
    if model_type not in auto.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES:
        return f"is a {model_type} model, which has no sequence-classification head in transformers"
    return None


def check_encoder(config, source: str, *, decoders: bool = False) -> None:
    """Raise UsageError unless ``config`` is a text model with a classification head.

    Usage: ``check_encoder(AutoConfig.from_pretrained(path), "--model gpt2", decoders=True)``
    """
    why = encoder_problem(config, decoders=decoders)
    if why:
        raise UsageError(f"{source} {why}")


# ---------------------------------------------------------------------------------------
# Sizes
# ---------------------------------------------------------------------------------------


def max_sequence_length(config) -> int | None:
    """The longest input (special tokens included) the model's position table holds.

    None when nothing limits it: no ``max_position_embeddings``, or DeBERTa with relative
    positions only (``position_biased_input=False``, as in DeBERTa-v3).

    Usage: ``max_sequence_length(AutoConfig.from_pretrained(path))  # 512 for roberta-base``
    """
    positions = getattr(config, "max_position_embeddings", None)
    if not isinstance(positions, int) or positions <= 0:
        return None
    if config.model_type in ("deberta", "deberta-v2") and not getattr(config, "position_biased_input", True):
        return None
    # RoBERTa-likes number from padding_idx + 1 (mixft.models.positions): 514 positions hold 512 tokens.
    return positions - first_position(config)


def check_max_length(config, max_length: int, source: str = "the model", shown: str | None = None) -> None:
    """Refuse a ``max_length`` longer than the model's position table, in one line.

    ``shown`` names the value as the run got it (``mixft.config.run_config.describe_setting``: the
    user's ``--max-length 512`` or the recipe's default); default ``--max-length N``.

    Usage: ``check_max_length(AutoConfig.from_pretrained(path), 512, "--model roberta-base")``
    """
    limit = max_sequence_length(config)
    if limit is not None and max_length > limit:
        extra = ""
        if first_position(config):
            extra = f" ({config.max_position_embeddings} positions, the first {first_position(config)} reserved)"
        raise UsageError(
            f"{shown or f'--max-length {max_length}'} is longer than {source} can read: at most {limit} "
            f"tokens{extra}; pass --max-length {limit} or less"
        )


# ---------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------


def _locate(source: str, path: str, filename: str) -> str | None:
    """The local file for ``filename`` of a model directory, cache entry or hub repo (None: absent)."""
    directory = Path(path)
    if directory.is_dir():
        candidate = directory / filename
        return str(candidate) if candidate.is_file() else None
    from transformers.utils.hub import cached_file

    try:
        return cached_file(
            path,
            filename,
            _raise_exceptions_for_missing_entries=False,
            _raise_exceptions_for_connection_errors=False,
            _raise_exceptions_for_gated_repo=False,
        )
    except OSError as exc:  # RepositoryNotFound, revision not found, a gated repo...
        raise UsageError(f"{source}: cannot read {filename} from the Hugging Face hub: {first_line(exc)}") from None


def _read_config(source: str, path: str):
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    config_path = _locate(source, path, CONFIG_FILE)
    if config_path is None:
        raise UsageError(f"{source}: no {CONFIG_FILE}")
    text = Path(config_path).read_bytes()
    try:
        raw = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        where = f" ({exc.msg} at line {exc.lineno} column {exc.colno})" if isinstance(exc, json.JSONDecodeError) else ""
        raise UsageError(f"{source}: {CONFIG_FILE} is not valid JSON{where}") from None
    if not isinstance(raw, dict):
        raise UsageError(f"{source}: {CONFIG_FILE} must hold a JSON object, found {type(raw).__name__}")
    model_type = raw.get("model_type")
    if not model_type:
        raise UsageError(f'{source}: {CONFIG_FILE} has no model_type (e.g. "bert", "roberta")')
    if model_type not in CONFIG_MAPPING_NAMES:
        raise UsageError(
            f"{source}: {CONFIG_FILE} has model_type {model_type!r}, which this transformers does not know "
            f"(e.g. bert, roberta, distilbert, electra, deberta-v2, xlm-roberta)"
        )
    try:
        return AutoConfig.from_pretrained(path)
    except Exception as exc:  # a field of the wrong type, a custom-code model, ...
        raise UsageError(
            f"{source}: {CONFIG_FILE} cannot be read as a {model_type} config: {first_line(exc)}"
        ) from None


def safetensors_shapes(file: str | Path, label: str | None = None) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape, read from a safetensors header; refuses empty, truncated or corrupt files.

    Reads the header only (8 bytes of length, then JSON), never the tensors.

    Usage: ``safetensors_shapes("model/model.safetensors")["embeddings.word_embeddings.weight"]``
    """
    file = Path(file)
    label = label or file.name
    size = file.stat().st_size
    if size == 0:
        raise UsageError(f"{label} is empty (0 bytes)")
    if size < 8:
        raise UsageError(f"{label} is truncated ({size} bytes; not even a safetensors header)")
    with file.open("rb") as handle:
        (header_len,) = struct.unpack("<Q", handle.read(8))
        if header_len > _MAX_HEADER_BYTES:
            raise UsageError(f"{label} is corrupt: not a safetensors file (header length {header_len})")
        if 8 + header_len > size:
            raise UsageError(f"{label} is truncated ({size} bytes; its header alone needs {8 + header_len})")
        raw = handle.read(header_len)
    try:
        header = json.loads(raw)
        if not isinstance(header, dict):
            raise ValueError
    except (UnicodeDecodeError, ValueError):
        raise UsageError(f"{label} is corrupt: its safetensors header is not valid JSON") from None
    shapes: dict[str, tuple[int, ...]] = {}
    end = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            shape = tuple(int(d) for d in entry["shape"])
            start, stop = (int(x) for x in entry["data_offsets"])
            itemsize = _SAFETENSORS_ITEMSIZE[entry["dtype"]]
        except (KeyError, TypeError, ValueError):
            raise UsageError(f"{label} is corrupt: bad header entry for tensor {name!r}") from None
        if stop - start != math.prod(shape) * itemsize or start < 0:
            raise UsageError(f"{label} is corrupt: tensor {name!r} of shape {list(shape)} has {stop - start} bytes")
        shapes[name] = shape
        end = max(end, stop)
    if 8 + header_len + end > size:
        raise UsageError(f"{label} is truncated ({size} bytes; its tensors need {8 + header_len + end})")
    return shapes


def torch_file_shapes(file: str | Path, label: str | None = None) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape of a ``torch.save`` state dict, memory-mapped (tensors not read).

    Usage: ``torch_file_shapes("model/pytorch_model.bin")``
    """
    import torch

    file = Path(file)
    label = label or file.name
    if file.stat().st_size == 0:
        raise UsageError(f"{label} is empty (0 bytes)")
    try:
        try:
            state = torch.load(file, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as exc:
            if "mmap" not in str(exc):
                raise
            state = torch.load(file, map_location="cpu", weights_only=True)  # the legacy (non-zip) format
    except Exception as exc:  # a truncated zip, a pickle that is not a state dict...
        raise UsageError(f"{label} cannot be read (corrupt or truncated): {first_line(exc)}") from None
    if not isinstance(state, Mapping):
        raise UsageError(f"{label} does not hold a state dict (found {type(state).__name__})")
    return {name: tuple(t.shape) for name, t in state.items() if isinstance(t, torch.Tensor)}


def _shapes_of(source: str, path: str, filename: str) -> dict[str, tuple[int, ...]]:
    local = _locate(source, path, filename)
    if local is None:
        raise UsageError(f"{source}: {filename} is listed in the shard index but missing")
    label = f"{source}: {filename}"
    return safetensors_shapes(local, label) if filename.endswith(".safetensors") else torch_file_shapes(local, label)


def read_weight_shapes(source: str, path: str) -> tuple[tuple[str, ...], dict[str, tuple[int, ...]]]:
    """(weight files, tensor name -> shape) of a model, in transformers' order of preference."""
    for single in (SAFETENSORS_FILE, TORCH_FILE):
        if _locate(source, path, single) is not None:
            return (single,), _shapes_of(source, path, single)
    for index in (SAFETENSORS_INDEX, TORCH_INDEX):
        index_path = _locate(source, path, index)
        if index_path is None:
            continue
        try:
            weight_map = json.loads(Path(index_path).read_bytes())["weight_map"]
            shards = sorted(set(weight_map.values()))
        except (UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError):
            raise UsageError(f"{source}: {index} is not a valid shard index (JSON with a weight_map)") from None
        shapes: dict[str, tuple[int, ...]] = {}
        for shard in shards:
            shapes.update(_shapes_of(source, path, shard))
        return tuple(shards), shapes
    raise UsageError(f"{source}: no model weights ({SAFETENSORS_FILE} or {TORCH_FILE})")


def _expected_shapes(config) -> tuple[str, dict[str, tuple[int, ...]]]:
    """(base_model_prefix, parameter name -> shape) of the classifier built from ``config``, on no memory."""
    import torch
    from transformers import AutoModelForSequenceClassification

    with torch.device("meta"):  # shapes only: nothing allocated, nothing initialised for real
        model = AutoModelForSequenceClassification.from_config(config)
    return model.base_model_prefix, {name: tuple(t.shape) for name, t in model.state_dict().items()}


def check_weight_shapes(source: str, weight_files: Iterable[str], shapes: Mapping[str, tuple], config) -> None:
    """Refuse weights that do not fit ``config``: a shape mismatch, or no tensor of this model at all."""
    prefix, expected = _expected_shapes(config)
    files = ", ".join(weight_files)
    matched = 0
    for name, shape in shapes.items():
        # A bare encoder saves "embeddings...", a task model "<prefix>.embeddings...".
        key = name if name in expected else f"{prefix}.{name}"
        if key not in expected:
            continue  # another head (MLM, pooler variants), renamed legacy keys: not ours to judge
        matched += 1
        if tuple(shape) != expected[key]:
            raise UsageError(
                f"{source}: {files} does not fit {CONFIG_FILE}: tensor {name} has shape {list(shape)}, "
                f"the config describes {list(expected[key])}"
            )
    if matched == 0:
        raise UsageError(
            f"{source}: {files} holds no tensor of a {config.model_type} model (weights of another architecture?)"
        )


# ---------------------------------------------------------------------------------------
# Tokenizer
# ---------------------------------------------------------------------------------------


def _load_tokenizer(source: str, path: str, config):
    from transformers import AutoTokenizer

    directory = Path(path)
    if directory.is_dir() and not any((directory / name).is_file() for name in TOKENIZER_FILES):
        raise UsageError(
            f"{source}: no tokenizer files (tokenizer.json, vocab.txt, vocab.json + merges.txt or a "
            "sentencepiece model); copy them from the model this one was trained from"
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except Exception as exc:
        raise UsageError(f"{source}: the tokenizer cannot be loaded: {first_line(exc)}") from None
    vocab = tokenizer.get_vocab()
    special = set(tokenizer.all_special_tokens)
    if not any(token not in special for token in vocab):
        raise UsageError(
            f"{source}: the tokenizer has only its {len(vocab)} special tokens, so every word would become "
            "unknown; no usable tokenizer files"
        )
    top = max(vocab.values()) + 1
    vocab_size = getattr(config, "vocab_size", None)
    if isinstance(vocab_size, int) and top > vocab_size:
        raise UsageError(
            f"{source}: the tokenizer produces ids up to {top - 1} but {CONFIG_FILE} has vocab_size {vocab_size} "
            "(tokenizer and weights come from different models?)"
        )
    return tokenizer


# ---------------------------------------------------------------------------------------
# Library warnings: after a pass, never before a refusal
# ---------------------------------------------------------------------------------------

# Loggers whose records are held during a check (children propagate to them).
_LIBRARY_LOGGERS = ("transformers",)


class _Holder(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def held_library_warnings() -> Iterator[None]:
    """Hold the ``warnings`` and transformers log records raised inside the block; show them
    after it when it ends normally, drop them when it raises (the error line comes alone).

    Usage: ``with held_library_warnings(): config = AutoConfig.from_pretrained(path)``
    """
    held = []
    for name in _LIBRARY_LOGGERS:
        lib = logging.getLogger(name)
        holder = _Holder()
        held.append((lib, lib.handlers[:], lib.propagate, holder))
        lib.handlers = [holder]
        lib.propagate = False
    try:
        # record=True keeps the active filters (ignored stays ignored) and only replaces showwarning.
        with warnings.catch_warnings(record=True) as caught:
            yield
    except BaseException:
        n = len(caught) + sum(len(h.records) for *_, h in held)
        if n:
            logger.debug("dropped %d library warning(s) raised while checking a refused model", n)
        raise
    finally:
        for lib, handlers, propagate, _ in held:
            lib.handlers, lib.propagate = handlers, propagate
    for lib, _, _, holder in held:
        for record in holder.records:
            lib.handle(record)
    for w in caught:
        warnings.showwarning(w.message, w.category, w.filename, w.lineno, w.file, w.line)


# ---------------------------------------------------------------------------------------
# All of it
# ---------------------------------------------------------------------------------------


def check_model(
    path: str,
    *,
    max_length: int | None = None,
    source: str | None = None,
    decoders: bool = False,
    max_length_shown: str | None = None,
) -> CheckedModel:
    """Check a resolved model before training; return its config and loaded tokenizer.

    ``path`` is what ``from_pretrained`` gets (``resolve_model(...).path``: a directory or a
    cached/hub repo id). ``source`` names it in messages (default ``--model PATH``). Reads
    the config, the weight files' headers and the tokenizer; raises UsageError, one line
    naming the file and the cause, for anything that would train wrongly or crash later.
    ``decoders=True`` accepts decoder-only models (see :func:`encoder_problem`).
    ``max_length_shown``: how messages name ``max_length`` (see :func:`check_max_length`).
    Library warnings raised meanwhile appear only if the check passes.

    Usage: ``tokenizer = check_model(resolved.path, max_length=cfg.max_length).tokenizer``
    """
    source = source or f"--model {path}"
    with held_library_warnings():
        config = _read_config(source, path)
        check_encoder(config, source, decoders=decoders)
        weight_files, shapes = read_weight_shapes(source, path)
        check_weight_shapes(source, weight_files, shapes, config)
        tokenizer = _load_tokenizer(source, path, config)
        if max_length is not None:
            check_max_length(config, max_length, source, max_length_shown)
    logger.debug("%s: %s checked (%d tensors in %s)", source, config.model_type, len(shapes), ", ".join(weight_files))
    return CheckedModel(
        path=str(path),
        config=config,
        tokenizer=tokenizer,
        weight_files=weight_files,
        max_length=max_sequence_length(config),
    )
