"""A Hugging Face dataset by name (and config), from the local cache or the hub, without waiting.

Usage::

    from mixft.data.hubdata import fetch_hub_dataset
    splits, source = fetch_hub_dataset("glue", "mrpc")   # a DatasetDict, "hub" or "cache"

The hub is probed once (:func:`mixft.models.hub.hub_reachable`, seconds); when it does not answer,
:func:`mixft.models.hub.go_offline` stops `datasets` from retrying for ~50 s, and the dataset
loads from the local cache or not at all. A dataset that cannot be had raises
:class:`DatasetUnavailable`, a one-line UsageError.
"""

from __future__ import annotations

from mixft.data.files import datasets_bars_off, first_line
from mixft.data.glue import GLUE_REPO
from mixft.errors import UsageError
from mixft.log import logger
from mixft.models.hub import go_offline, hub_reachable, offline_mode_set

# Canonical hub repositories of datasets best known by their old, namespace-less names: the
# cache is keyed by the repository, so "glue" must find what "nyu-mll/glue" stored.
ALIASES = {
    "glue": GLUE_REPO,
    "ag_news": "fancyzhx/ag_news",
    "imdb": "stanfordnlp/imdb",
}


class DatasetUnavailable(UsageError):
    """The dataset is neither in the local cache nor downloadable now."""


def dataset_label(name: str, config: str | None = None) -> str:
    """How a dataset is named to the user. Usage: ``dataset_label("glue", "mrpc")  # "glue/mrpc"``"""
    return f"{name}/{config}" if config else name


def canonical_name(name: str) -> str:
    """The hub repository for ``name``; other names unchanged. Usage: ``canonical_name("glue")  # "nyu-mll/glue"``"""
    return ALIASES.get(name.strip(), name.strip())


OTHER_DATA = "pass --train-file/--validation-file"


def fetch_hub_dataset(
    name: str,
    config: str | None = None,
    *,
    hub_timeout: float = 3.0,
    shown: str | None = None,
    other_data: str = OTHER_DATA,
):
    """``(DatasetDict, source)`` for a hub dataset; source is "hub" or "cache".

    Usage: ``splits, source = fetch_hub_dataset("imdb")``
    Raises DatasetUnavailable (one line) when the dataset is neither cached nor reachable,
    or the hub refuses it (unknown name or config). ``shown`` is how the user asked for it
    (default ``--dataset NAME/CONFIG``), ``other_data`` the advice for data without the hub:
    the caller's, since only it knows which flags its recipe accepts.
    """
    if not str(name).strip():
        raise UsageError("--dataset must name a Hugging Face dataset, got ''")
    label = dataset_label(name, config)
    shown = shown or f"--dataset {label}"
    user_offline = offline_mode_set()
    online = hub_reachable(hub_timeout)
    if not online:
        go_offline()
    import datasets

    try:
        with datasets_bars_off():  # download and conversion bars are noise in the CLI output
            loaded = datasets.load_dataset(canonical_name(name), config)
    except Exception as exc:  # not cached offline, unknown name or config, download failure
        logger.debug("dataset %s unavailable (%s): %s", label, type(exc).__name__, exc)
        if online:
            raise DatasetUnavailable(f"{shown}: cannot load it from the hub: {first_line(exc)}") from None
        why = "offline mode is set (HF_HUB_OFFLINE)" if user_offline else "the hub is unreachable"
        raise DatasetUnavailable(
            f"{shown}: not in the local datasets cache and {why}; run once with hub access or {other_data}"
        ) from None
    if not isinstance(loaded, datasets.DatasetDict):
        loaded = datasets.DatasetDict({"train": loaded})
    return loaded, "hub" if online else "cache"
