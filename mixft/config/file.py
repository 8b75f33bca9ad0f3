"""``--config FILE``: a run's options in YAML or JSON, and ``OUTPUT_DIR/config.yaml`` to reproduce it.

Keys are RunConfig field names (``max_train_samples``; ``max-train-samples`` too), plus the
command line's own spellings of the precisions and seeds: ``amp: true``, ``precision:
bf16``, ``compare: [fp32, bf16]``, ``seed: 1``, ``seeds: [0, 1, 2]``. Values pass the same
rules as the flags (``mixft.options``); unknown keys, bad values and unreadable or
malformed files are one-line UsageErrors before any work. Flags given on the command
line override the file.

Usage::

    values = merge(load_config_file("run.yaml"), cli_values, given_fields(parser, argv))
    cfg = RunConfig(**values).validate()
    write_config(cfg, Path(cfg.output_dir) / "config.yaml")   # --config that file reproduces cfg
"""

from __future__ import annotations

import argparse
import difflib
import os
from collections.abc import Mapping, Sequence
from dataclasses import Field, fields
from pathlib import Path
from typing import Any

from mixft.atomic import write_text
from mixft.config.run_config import RunConfig
from mixft.errors import UsageError
from mixft.log import logger
from mixft.options import SEED, TEXT

#: Command-line spellings that are not field names -> the field they fill.
CLI_SPELLINGS = {
    "amp": "precisions",
    "precision": "precisions",
    "compare": "precisions",
    "seed": "seeds",
    "seeds": "seeds",
    "precisions": "precisions",
}

#: Options mixft no longer has -> why. A file that sets one still loads (the config.yaml of an
#: older run reproduces it with --config): the key is skipped, with a notice where it asked for
#: what is gone. The command line keeps their flags the same way (mixft.cli.main.build_parser).
RETIRED = {
    "fast_dropout": (
        "mixft's own CPU dropout masks were removed (2026-11-29: over a run's batches they were no faster on "
        "any CPU measured, docs/benchmarks.md); every run draws torch's dropout masks"
    ),
}


def load_config_file(path: str | os.PathLike) -> dict[str, Any]:
    """The RunConfig values a YAML or JSON file sets: ``{field name: checked value}``.

    Usage: ``RunConfig(**load_config_file("run.yaml")).validate()``
    """
    from mixft.config.loader import read_mapping, resolve_paths

    source = f"--config {path}"
    data = read_mapping(path)  # bounded and strict: size, aliases, depth, duplicate keys
    if data is None:  # an empty file sets nothing
        return {}
    if not isinstance(data, Mapping):
        raise UsageError(f"{source}: must hold a mapping of option names to values, got a {type(data).__name__}")
    # The file's relative paths are the file's: a config beside its data runs from any folder.
    return resolve_paths(config_values(data, source), Path(path).parent)


def config_values(data: Mapping[str, Any], source: str = "--config") -> dict[str, Any]:
    """Checked RunConfig values from a mapping of file keys (what ``load_config_file`` returns).

    Usage: ``config_values({"epochs": 2, "seed": 1})  # {"epochs": 2, "seeds": [1]}``
    """
    by_name = {f.name: f for f in fields(RunConfig)}
    values: dict[str, Any] = {}
    written_as: dict[str, str] = {}
    for key, value in data.items():
        if not isinstance(key, str):
            raise UsageError(f"{source}: option names are strings, got {key!r}")
        name = key.strip().replace("-", "_")
        if name in RETIRED:
            if value:  # fast_dropout: false asked for torch's masks, which is what every run draws
                logger.warning("notice: %s: %r is ignored: %s", source, key, RETIRED[name])
            continue
        target = CLI_SPELLINGS.get(name, name)
        if target not in by_name:
            raise UsageError(f"{source}: unknown option {key!r}{_suggestion(name, by_name)}")
        if target in written_as:
            raise UsageError(f"{source}: {written_as[target]!r} and {key!r} both set {target}: give one")
        converted = (
            _spelling_value(name, value, source)
            if name in CLI_SPELLINGS
            else _field_value(by_name[name], key, value, source)
        )
        if converted is _UNSET:
            continue
        values[target] = converted
        written_as[target] = key
    return values


def merge(file_values: Mapping[str, Any], cli_values: Mapping[str, Any], cli_given: set[str]) -> dict[str, Any]:
    """The command line's values, with the file's wherever the command line did not name the option.

    ``cli_values`` hold every field (argparse's defaults included); ``cli_given`` the fields
    the command line named (``given_fields``).

    Usage: ``merge({"epochs": 3, "lr": 1e-4}, vars_of_cli, {"epochs"})["lr"] == 1e-4``
    """
    merged = dict(cli_values)
    for name, value in file_values.items():
        if name not in cli_given:
            merged[name] = value
    return merged


def given_fields(parser: argparse.ArgumentParser, argv: Sequence[str]) -> set[str]:
    """The RunConfig fields the command line ``argv`` names explicitly (a default does not count).

    Every destination starts as a marker that argparse then leaves alone unless the flag
    is given, so ``--epochs 1`` counts even where 1 is the default.

    Usage: ``given_fields(build_parser(), ["--recipe", "x", "--amp", "--epochs", "2"])  # {"recipe", "precisions", "epochs"}``
    """
    unset = object()
    dests = {a.dest for a in parser._actions if a.dest != argparse.SUPPRESS}
    namespace = argparse.Namespace(**dict.fromkeys(dests, unset))
    parser.parse_args(list(argv), namespace=namespace)
    names = {f.name for f in fields(RunConfig)}
    given = set()
    for dest, value in vars(namespace).items():
        if value is unset:
            continue
        field_name = CLI_SPELLINGS.get(dest, dest)
        if field_name in names:
            given.add(field_name)
    return given


def write_config(cfg: RunConfig, path: str | os.PathLike) -> Path:
    """Write ``cfg`` as YAML, atomically: ``load_config_file(path)`` gives back the same RunConfig.

    Usage: ``write_config(cfg, Path(cfg.output_dir) / "config.yaml")``
    """
    write_text(path, config_yaml(cfg))
    return Path(path)


def config_yaml(cfg: RunConfig) -> str:
    """The text ``write_config`` writes: a header, then every option, paths absolute.

    Usage: ``config_yaml(cfg) == Path(out, "config.yaml").read_text()``
    """
    import yaml

    from mixft.config.loader import absolute_paths

    values = absolute_paths(cfg.to_dict())  # --config THIS_FILE reproduces the run from any folder
    _check_plain(values.get("extra", {}), "extra")
    header = (
        "# mixft: the effective configuration of this run.\n"
        "# Reproduce it with: python scripts/finetune.py --config THIS_FILE\n"
    )
    return header + yaml.dump(
        values, Dumper=_no_alias_dumper(), sort_keys=False, default_flow_style=False, allow_unicode=True
    )


# ------------------------------------------------------------------ helpers
_UNSET = object()


def _no_alias_dumper():
    import yaml

    class NoAliases(yaml.SafeDumper):
        """Writes a value shared twice out twice: a config file holds no anchors (mixft.config_loader refuses them)."""

        def ignore_aliases(self, data):
            return True

    return NoAliases  # a spelling that sets nothing (``amp: false``)


def _suggestion(name: str, by_name: Mapping[str, Field]) -> str:
    close = difflib.get_close_matches(name, [*by_name, *CLI_SPELLINGS], n=1)
    return f" (did you mean {close[0]!r}?)" if close else " (keys are RunConfig field names, e.g. max_train_samples)"


def _field_value(f: Field, key: str, value, source: str):
    where = f"{source}: {key}"
    if value is None:
        if "None" not in str(f.type):
            raise UsageError(f"{where} cannot be null")
        return None
    if f.name == "extra":
        return _extra_value(value, where)
    check = f.metadata.get("check")
    if check is None:
        return value
    value = _one_list_rule(f, value, where)
    # YAML reads "2e-5" (no dot) as text: numbers written as text are read as the flag would read them.
    if isinstance(value, str) and check.convert in (int, float):
        try:
            value = check.parse(value)
        except argparse.ArgumentTypeError as e:
            raise UsageError(f"{where} {e}") from None
    if check.convert is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    check.validate(where, value)
    return value


def _scalar(value) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def _extra_value(value, where: str) -> dict[str, Any]:
    """``extra``: a recipe's own small options, a flat mapping of scalars (or lists of scalars)."""
    if not isinstance(value, Mapping):
        raise UsageError(f"{where} must be a mapping of recipe-specific options, got {value!r}")
    for key, item in value.items():
        if not isinstance(key, str):
            raise UsageError(f"{where}: option names are strings, got {key!r}")
        if not (_scalar(item) or (isinstance(item, list) and all(_scalar(v) for v in item))):
            raise UsageError(
                f"{where}.{key} must be a number, text, true/false or a list of them (a recipe's "
                f"own option), got a {type(item).__name__}"
            )
    return dict(value)


#: Options whose value is several names, stored as one comma-separated text (their declared form).
_NAMES_AS_TEXT = ("report_to", "lora_target_modules")


def _one_list_rule(f: Field, value, where: str):
    """Every option of several names takes a list or a comma-separated text in a file, as its flag does;
    the value is stored in the field's declared form (a list, or one text)."""
    from mixft.options import NAMES

    if f.metadata.get("check") is NAMES and isinstance(value, str):
        try:
            return NAMES.parse(value)
        except argparse.ArgumentTypeError as e:
            raise UsageError(f"{where} {e}") from None
    if f.name in _NAMES_AS_TEXT and isinstance(value, list):
        if not value or not all(isinstance(v, str) and v.strip() and "," not in v for v in value):
            raise UsageError(f"{where} must list names, e.g. [query, value], got {value!r}")
        return ",".join(v.strip() for v in value)
    return value


def _spelling_value(name: str, value, source: str):
    where = f"{source}: {name}"
    if name == "amp":
        if not isinstance(value, bool):
            raise UsageError(f"{where} must be true or false, got {value!r}")
        return ["amp"] if value else _UNSET
    if name == "precision":
        return [_precision(value, where)]
    if name in ("compare", "precisions"):
        names = [part.strip() for part in value.split(",")] if isinstance(value, str) else value
        if not isinstance(names, list) or not names:
            raise UsageError(f"{where} must list precisions, e.g. [fp32, bf16], got {value!r}")
        return [_precision(n, where) for n in names if not (isinstance(n, str) and not n.strip())]
    if name == "seed":
        SEED.validate(where, value)
        return [value]
    seeds = [part.strip() for part in value.split(",") if part.strip()] if isinstance(value, str) else value
    if not isinstance(seeds, list) or not seeds:
        raise UsageError(f"{where} must list integers, e.g. [0, 1, 2], got {value!r}")
    out = []
    for seed in seeds:
        if isinstance(seed, str):
            try:
                seed = SEED.parse(seed)
            except argparse.ArgumentTypeError as e:
                raise UsageError(f"{where} {e}") from None
        SEED.validate(where, seed)
        out.append(seed)
    return out


def _precision(value, where: str) -> str:
    from mixft.amp.precision_names import PRECISION_NAMES

    TEXT.validate(where, value)
    name = value.strip().lower()
    if name != "amp" and name not in PRECISION_NAMES:
        raise UsageError(f"{where}: unknown precision {value!r} (choose from {', '.join(PRECISION_NAMES)}, amp)")
    return name


def _check_plain(value, where: str) -> None:
    """Refuse what YAML cannot write back as it was (objects given through the Python API)."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            if not isinstance(k, str):
                raise UsageError(f"config file: {where} keys must be strings, got {k!r}")
            _check_plain(v, f"{where}.{k}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_plain(v, f"{where}[{i}]")
    elif not (value is None or isinstance(value, (bool, int, float, str))):
        raise UsageError(
            f"config file: {where} is a {type(value).__name__}; a config file holds only text, "
            "numbers, booleans, lists and mappings"
        )
