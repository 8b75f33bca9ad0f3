"""Reading a ``--config`` file strictly and within bounds: what ``mixft.config.file`` parses.

A file of options is small and plain, so anything else is refused in one line before
any work: more than 1 MiB; YAML anchors and aliases (they expand without bound: 500
bytes of aliases become a million values, then a 17 MB config.yaml); nesting deeper than
16 levels (``RecursionError`` in the parsers otherwise); a key given twice (the last
would silently win), in YAML and JSON alike.

Paths in a file are the file's, not the shell's: ``data_dir``, ``train_file``,
``validation_file``, ``predict_file`` and ``output_dir`` are relative to the file's
folder, and ``model`` too when that folder holds it (else it is a hub name). A run writes
its ``config.yaml`` with absolute paths (``absolute_paths``), so ``--config
OUTPUT_DIR/config.yaml`` reproduces it from any folder.

Usage::

    data = read_mapping(Path("run.yaml"))              # dict (or None for an empty file), or UsageError
    values = resolve_paths(values, Path("run.yaml").parent)
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import yaml

from mixft.errors import UsageError

MAX_CONFIG_BYTES = 1 << 20  # 1 MiB: a run's options are ~3 KB; anything near this is not a config
MAX_DEPTH = 16  # a config is a mapping of scalars and short lists; `extra` one level below


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses aliases and duplicate keys (each a one-line UsageError)."""

    source = "--config"

    def compose_node(self, parent, index):
        # An alias (*name) re-uses a node: 10 aliases per level, 6 levels = a million leaves from 500 bytes.
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise UsageError(
                f"{self.source}: line {event.start_mark.line + 1}: YAML aliases (*{event.anchor}) are "
                "not accepted in a config file; write the value out"
            )
        event = self.peek_event()
        if getattr(event, "anchor", None):
            raise UsageError(
                f"{self.source}: line {event.start_mark.line + 1}: YAML anchors (&{event.anchor}) are "
                "not accepted in a config file; write the value out"
            )
        if len(self._depth_stack) > MAX_DEPTH:  # noqa: SLF001
            raise UsageError(
                f"{self.source}: line {event.start_mark.line + 1}: nested more than {MAX_DEPTH} levels "
                "deep; a config file holds options, lists and one level of `extra`"
            )
        self._depth_stack.append(1)
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth_stack.pop()

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, str) and key in seen:
                raise UsageError(
                    f"{self.source}: line {key_node.start_mark.line + 1}: {key!r} is given twice (first "
                    f"on line {seen[key]}); keep one"
                )
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def _decimal_or_text(loader: _StrictLoader, node):
    """YAML 1.1 reads ``010`` as octal 8 and ``1:30`` as 90, where a flag reads 10 and refuses: digits are the
    decimal number they spell; any other spelling stays text, for the option's own rule (a flag's) to read."""
    text = loader.construct_scalar(node)
    return int(text, 10) if re.fullmatch(r"[-+]?[0-9]+", text) else text


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _decimal_or_text)


def _yaml(text: str, source: str):
    loader = _StrictLoader(text)
    loader.source = source
    loader._depth_stack = []
    try:
        return loader.get_single_data()
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        raise UsageError(f"{source}: not valid YAML ({where}{getattr(e, 'problem', None) or e})") from None
    finally:
        loader.dispose()


def _json(text: str, source: str):
    def no_duplicates(pairs):
        out = {}
        for key, value in pairs:
            if key in out:
                raise UsageError(f"{source}: {key!r} is given twice; keep one")
            out[key] = value
        return out

    try:
        return json.loads(text, object_pairs_hook=no_duplicates)
    except json.JSONDecodeError as e:
        raise UsageError(f"{source}: not valid JSON (line {e.lineno}: {e.msg})") from None
    except RecursionError:
        raise UsageError(
            f"{source}: nested too deeply; a config file holds options, lists and one level of `extra`"
        ) from None


def read_mapping(path: str | os.PathLike):
    """The parsed file (YAML, or JSON by its suffix): bounded and strict, else a one-line UsageError.

    Usage: ``read_mapping("run.yaml")  # {"recipe": "text-classification", ...}``
    """
    source = f"--config {path}"
    try:
        size = os.stat(path).st_size
        if size > MAX_CONFIG_BYTES:
            raise UsageError(f"{source}: {size:,} bytes; a config file of options is at most {MAX_CONFIG_BYTES:,}")
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{source}: not a text file (UTF-8)") from None
    except OSError as e:
        raise UsageError(f"{source}: cannot read it ({e.strerror or e})") from None
    return _json(text, source) if Path(path).suffix.lower() == ".json" else _yaml(text, source)


#: The options that name files or folders (``model`` is one only when it exists as a path).
PATH_FIELDS = ("data_dir", "train_file", "validation_file", "predict_file", "output_dir")


def resolve_paths(values: dict, config_dir: Path) -> dict:
    """Relative paths in a config file are relative to the file's folder; ``model`` too when that folder holds it.

    Usage: ``resolve_paths({"train_file": "train.csv"}, Path("cfg"))  # {"train_file": "/abs/cfg/train.csv"}``
    """
    out = dict(values)
    for name in PATH_FIELDS:
        if isinstance(out.get(name), str):
            p = Path(out[name]).expanduser()
            out[name] = str(p if p.is_absolute() else (config_dir / p).resolve())
    model = out.get("model")
    if isinstance(model, str):
        p = Path(model).expanduser()
        beside = p if p.is_absolute() else config_dir / p
        if beside.exists():
            out["model"] = str(beside.resolve())
    return out


def absolute_paths(values: dict) -> dict:
    """``values`` with each path option absolute (against the current folder, where the run read them), for
    a config.yaml that works from anywhere; a ``model`` that is not a local path stays a hub name.

    Usage: ``absolute_paths(cfg.to_dict())``
    """
    return resolve_paths(values, Path.cwd())
