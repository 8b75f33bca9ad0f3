"""How one option is described once: its type check, its help and its command-line spelling.

``RunConfig`` (mixft/config/run_config.py) declares every field with :func:`option`; the CLI's
parser is generated from those declarations and ``RunConfig.validate`` runs the same
checks on values that come from Python. So an option's type, default and help are
written in one place only.

Usage::

    @dataclass
    class Config:
        epochs: int | None = option(None, "passes over the training data", check=POSITIVE_INT)
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mixft.errors import UsageError


@dataclass(frozen=True)
class Check:
    """A value rule: how to read it from text, when it is acceptable, and how to say so."""

    convert: Callable[[str], Any]
    accepts: Callable[[Any], bool]
    expected: str  # completes "must be ...", e.g. "a positive integer"

    def parse(self, text: str):
        """Text from the command line -> value (argparse reports the error in one line)."""
        try:
            value = self.convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {self.expected}, got {text!r}") from None
        if not self.accepts(value):  # comparisons with nan are False, so nan is refused too
            raise argparse.ArgumentTypeError(f"must be {self.expected}, got {text!r}")
        return value

    def validate(self, flag: str, value) -> None:
        """A value from Python (RunConfig(...) in a notebook) -> UsageError when unacceptable."""
        try:
            ok = self.accepts(value)
        except TypeError:
            ok = False
        if not ok:
            raise UsageError(f"{flag} must be {self.expected}, got {value!r}")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _text(text: str) -> str:
    if not text.strip():
        raise ValueError(text)
    return text


POSITIVE_INT = Check(int, lambda v: _is_int(v) and v >= 1, "a positive integer")
NON_NEGATIVE_INT = Check(int, lambda v: _is_int(v) and v >= 0, "an integer >= 0")
POSITIVE_FLOAT = Check(float, lambda v: _is_number(v) and v > 0, "a positive finite number")
NON_NEGATIVE_FLOAT = Check(float, lambda v: _is_number(v) and v >= 0, "a finite number >= 0")
# Values that become float32 tensors (learning rate, loss scale, LoRA alpha, ...): float32 cannot
# hold more than 3.4e38, so a larger one would fail at the first step ("cannot be converted to
# float without overflow") or turn into inf; refused here, from the flag, a config file and Python alike.
FLOAT32_MAX = 3.4028234663852886e38
POSITIVE_FLOAT32 = Check(
    float, lambda v: _is_number(v) and 0 < v <= FLOAT32_MAX, "a positive finite number up to float32's 3.4e38"
)
NON_NEGATIVE_FLOAT32 = Check(
    float, lambda v: _is_number(v) and 0 <= v <= FLOAT32_MAX, "a finite number >= 0 up to float32's 3.4e38"
)
PROBABILITY = Check(float, lambda v: _is_number(v) and 0 <= v <= 1, "a probability between 0 and 1")
FRACTION = Check(float, lambda v: _is_number(v) and 0 < v < 1, "a fraction between 0 and 1 (exclusive)")
# 0 keeps every activation; 1 would drop them all, so LoRA's adapters would learn nothing.
LORA_DROPOUT = Check(float, lambda v: _is_number(v) and 0 <= v < 1, "a number >= 0 and below 1")
# torch.manual_seed takes any integer in [-2**63, 2**64): refuse the rest before work starts.
SEED = Check(int, lambda v: _is_int(v) and -(2**63) <= v < 2**64, "an integer in [-2**63, 2**64)")
# Below 8 tokens a sentence is mostly [CLS]/[SEP]: the same floor everywhere --max-length is read.
MAX_LENGTH = Check(int, lambda v: _is_int(v) and v >= 8, "an integer >= 8 (tokens per example)")
TEXT = Check(_text, lambda v: isinstance(v, str) and bool(v.strip()), "a non-empty string")
BOOL = Check(bool, lambda v: isinstance(v, bool), "True or False")


def _names(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",")]
    if any(not n for n in names):
        raise ValueError(text)
    return list(dict.fromkeys(names))  # a name given twice is the same name


# "a,b" on the command line, a list in Python and config files (e.g. --fp32-modules).
NAMES = Check(
    _names,
    lambda v: isinstance(v, list) and bool(v) and all(isinstance(n, str) and n.strip() and "," not in n for n in v),
    "comma-separated names without empty entries, e.g. encoder.layer.0.output,classifier",
)


def choice(*names: str) -> Check:
    return Check(str, lambda v: v in names, f"one of: {', '.join(names)}")


def option(
    default,
    help: str,
    *,
    check: Check | None = None,
    flag: str | None = None,
    metavar: str | None = None,
    group: str | None = None,
    cli: bool = True,
    per_recipe: bool = False,
    negatable: bool = False,
    trains: bool = False,
    default_factory=None,
):
    """A dataclass field with its rule and command-line form.

    ``flag`` defaults to ``--field-name``; a bool whose default is True gets a ``--no-...``
    flag (give it in ``flag``). ``cli=False`` keeps a field out of the generated parser
    (the CLI spells it itself, e.g. ``--amp``/``--compare`` for ``precisions``).
    ``per_recipe``: only recipes that list the field in their ``USES`` read it.
    ``negatable``: a switch spelled both ``--x`` and ``--no-x`` (its default may be None: "decide later").
    ``trains``: only training reads it (``--eval-only`` refuses it rather than record it in force).
    """
    meta = {
        "help": help,
        "check": check,
        "flag": flag,
        "metavar": metavar,
        "group": group,
        "cli": cli,
        "per_recipe": per_recipe,
        "negatable": negatable,
        "trains": trains,
    }
    if default_factory is not None:
        return field(default_factory=default_factory, metadata=meta)
    return field(default=default, metadata=meta)


def flag_of(f) -> str:
    """The command-line spelling of a RunConfig field."""
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def add_arguments(parser: argparse.ArgumentParser, dataclass_fields, groups: dict[str, Any] | None = None) -> None:
    """Add one argument per declared field (``cli=True``): type, default and help from the field."""
    groups = dict(groups or {})
    for f in dataclass_fields:
        meta = f.metadata
        if not meta.get("cli", False):
            continue
        target = parser
        if meta.get("group"):
            target = groups.setdefault(meta["group"], parser.add_argument_group(meta["group"]))
        flag = flag_of(f)
        if meta.get("negatable"):
            # --x and --no-x; a None default (decided by the run, e.g. --preflight's "auto") is said in the help.
            said = "default" in meta["help"]
            default_text = "" if said else f" (default {'on' if f.default else 'off'})"
            target.add_argument(
                flag,
                dest=f.name,
                action=argparse.BooleanOptionalAction,
                default=f.default,
                help=meta["help"] + default_text,
            )
            continue
        if f.type in ("bool", bool) or isinstance(f.default, bool):
            # True-by-default switches are spelled --no-x and store False.
            action = "store_false" if f.default else "store_true"
            state = "on; this flag turns it off" if f.default else "off"
            target.add_argument(
                flag, dest=f.name, action=action, default=f.default, help=f"{meta['help']} (default {state})"
            )
            continue
        check = meta.get("check")
        default = f.default if f.default is not None else None
        if "default" in meta["help"]:
            help_text = meta["help"]  # it says its default itself
        elif default not in (None, ""):
            help_text = f"{meta['help']} (default {default})"
        else:
            help_text = f"{meta['help']} (default: unset, the recipe decides)"
        target.add_argument(
            flag,
            dest=f.name,
            type=check.parse if check else str,
            default=default,
            metavar=meta.get("metavar"),
            help=help_text,
        )
