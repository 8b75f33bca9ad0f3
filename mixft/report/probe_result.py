"""What a probe found, kept and told: its result, the per-machine cache, and the words for it.

``mixft.runs.probe.probe`` measures; this module holds what it measured (``ProbeResult``, one
``PrecisionProbe`` per precision), keeps it per machine (``save_probe`` / ``cached_probe``,
keyed by CPU model and flags, torch's native bf16/fp16, GPU, torch version, recipe and
model; ``check_cache_dir`` before a probe measures; a ``CacheProblem`` for a cache file or
folder that is there but unusable), and says it: a terminal table, a report.md section and
one line for every run's header. What a run does with it (``--amp`` falls back to fp32 where bf16 measured slower)
is ``mixft.amp.precision.choose_precision``'s policy. Nothing here imports torch: a report or
a run header can show a probe without loading it.

Usage::

    result = cached_probe("bert-sst2", model_description, device="cpu")
    if result: print(probe_line(result))
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from mixft.amp.hardware import describe_hardware, device_note, hardware_key, hardware_line
from mixft.atomic import WriteFailed, write_json
from mixft.errors import UsageError, first_line
from mixft.log import logger

PROBE_FORMAT = 1  # bump when ProbeResult's fields change: older cache files then miss


@dataclass
class PrecisionProbe:
    """One precision's figures. Times in seconds; ratios are ``x fp32`` (above 1: faster)."""

    precision: str
    step_s: float | None = None  # median of the timed steps
    step_times_s: list[float] = field(default_factory=list)  # every step, warm-up first
    warmup_steps: int = 0
    speedup_vs_fp32: float | None = None  # fp32 step time / this step time
    matmul_flops_per_s: float | None = None  # over the recipe's Linear shapes
    matmul_ratio_vs_fp32: float | None = None
    skipped: str | None = None  # why the steps were not timed (over the budget)
    note: str | None = None  # why fewer steps than usual were timed (a slow precision spent its share of the budget)

    @property
    def timed_steps(self) -> int:
        return max(len(self.step_times_s) - self.warmup_steps, 0)

    @property
    def spread(self) -> float | None:
        """(slowest - fastest) / median of the timed steps: how steady the machine was."""
        timed = self.step_times_s[self.warmup_steps :]
        return (max(timed) - min(timed)) / self.step_s if timed and self.step_s else None


@dataclass
class ProbeResult:
    """What ``probe`` measured; ``to_dict()`` is results.json's ``hardware.probe``."""

    recipe: str
    model: str
    dataset: str | None
    device: str
    hardware: dict[str, Any]  # describe_hardware()
    # {"shape": [32, 25], "samples": 32, "tokens": 640, "batch_size": 32}: the one batch every step ran, and the
    # --batch-size it was drawn at (a run of another batch size does not reuse the probe)
    batch: dict[str, Any]
    matmul_shapes: list[dict[str, Any]]  # [{"rows", "in", "out", "bias", "calls"}] per training forward
    rows: list[PrecisionProbe]
    recommended: str  # the precision to train in here
    reason: str  # one line: why, with the measured ratio
    measured_at: str  # ISO 8601, UTC
    wall_s: float  # the probe's own wall time, preparation included
    time_budget_s: float
    notices: list[str] = field(default_factory=list)  # the recipe's (offline fallbacks, ...)
    format: int = PROBE_FORMAT

    def row(self, precision: str) -> PrecisionProbe | None:
        """The figures of ``precision``, or None when it was not probed."""
        return next((r for r in self.rows if r.precision == precision), None)

    def step_ratios(self) -> dict[str, float]:
        """``{precision: fp32 step time / its step time}`` for every timed precision (what
        ``mixft.amp.precision.choose_precision`` is handed). Usage: ``result.step_ratios()["bf16"]``"""
        return {r.precision: r.speedup_vs_fp32 for r in self.rows if r.speedup_vs_fp32}

    @property
    def key(self) -> str:
        """The cache key: hardware, torch version, recipe and model (see ``probe_key``)."""
        return probe_key(self.hardware, self.recipe, self.model)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "key": self.key}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProbeResult:
        """Inverse of ``to_dict`` (a cache file, results.json's ``hardware.probe``)."""
        names = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in names}
        values["rows"] = [PrecisionProbe(**row) for row in data["rows"]]
        return cls(**values)


# -------------------------------------------------------------------------------- cache
def default_cache_dir() -> Path:
    """``$MIXFT_CACHE``, else ``$XDG_CACHE_HOME/mixft``, else ``~/.cache/mixft``."""
    if os.environ.get("MIXFT_CACHE"):
        return Path(os.environ["MIXFT_CACHE"]).expanduser()
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "mixft"
    return Path.home() / ".cache" / "mixft"


def probe_key(hardware: Mapping[str, Any], recipe: str, model: str) -> str:
    """A stable hash of what a probe result stands for: CPU model and flags, GPU, torch,
    device type, recipe, model and the result format. Usage: ``probe_key(describe_hardware(), "bert-sst2", m)``"""
    ident = {**hardware_key(dict(hardware)), "recipe": recipe, "model": model, "format": PROBE_FORMAT}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode("utf-8")).hexdigest()[:20]


def probe_cache_path(
    hardware: Mapping[str, Any], recipe: str, model: str, cache_dir: str | os.PathLike | None = None
) -> Path:
    """Where the probe of ``recipe``/``model`` on this hardware is cached."""
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", recipe)
    return root / "probes" / f"{safe}-{probe_key(hardware, recipe, model)}.json"


def check_cache_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    """Make the cache's probes folder and write a file in it, before a probe measures; returns the folder.

    Found now, a cache that cannot be written (``MIXFT_CACHE`` a file, under a file, on a
    read-only or pseudo file system) costs nothing; found after the probe, it cost the measurement.
    Raises UsageError naming the setting (``MIXFT_CACHE=...``) and the cause.

    Usage: ``check_cache_dir()  # before probe(); UsageError: MIXFT_CACHE=/x cannot hold the probe cache: ...``
    """
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    folder = root / "probes"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-check-"):
            pass  # what save_probe does: a temporary file in this folder, then a rename
    except OSError as exc:
        blocker = _file_in_the_way(folder)
        why = (
            f"{blocker} is a file, not a folder"
            if blocker is not None
            else f"cannot create or write {exc.filename or folder}: {exc.strerror or first_line(exc)}"
        )
        raise UsageError(
            f"{_cache_setting(cache_dir)} cannot hold the probe cache: {why}; set MIXFT_CACHE to a folder "
            "mixft can write"
        ) from None
    return folder


def save_probe(result: ProbeResult, cache_dir: str | os.PathLike | None = None) -> Path:
    """Write ``result`` to the per-machine cache (atomically); returns the file's path."""
    path = probe_cache_path(result.hardware, result.recipe, result.model, cache_dir)
    write_json(path, result.to_dict())
    return path


def keep_probe(
    result: ProbeResult, cache_dir: str | os.PathLike | None = None, *, kept_in: str | None = None
) -> Path | None:
    """``save_probe`` that warns instead of raising; None when the cache could not be written.

    For a probe already measured (and, when ``kept_in`` names it, already written there):
    a cache that fails now (a full disk, a folder removed since ``check_cache_dir``) must not
    cost the measurement. Usage: ``keep_probe(result, kept_in="out/probe.json")``
    """
    try:
        return save_probe(result, cache_dir)
    except OSError as exc:
        kept = f"it is kept in {kept_in}, but " if kept_in else ""
        logger.warning(
            "warning: the probe could not be cached (%s): %s; %slater runs on this machine will not find it "
            "until a --probe is cached",
            _cache_setting(cache_dir),
            exc if isinstance(exc, WriteFailed) else first_line(exc),
            kept,
        )
        return None


@dataclass(frozen=True)
class CacheProblem:
    """Why a probe cache that is there could not be used: an unreadable file, or a cache folder
    that is not one. Kept in results.json's ``hardware.probe_cache_problem``; said before the run
    (``warning()``), in the header (``line()``) and in ``--amp``'s reason (``amp_clause()``)."""

    path: str  # the cache file; for a folder problem, the file that stands where a folder must be
    cause: str  # one line: why
    folder: bool = False  # the cache folder itself is unusable (nothing can be cached there)

    def line(self) -> str:
        """``"the cached probe at P is unreadable (not valid JSON ...) and is ignored; --probe measures it again"``."""
        if self.folder:
            return f"not probed: {self.cause}; --probe needs a folder it can write"
        return f"the cached probe at {self.path} is unreadable ({self.cause}) and is ignored; --probe measures it again"

    def warning(self) -> str:
        return ("notice: " if self.folder else "warning: ") + self.line()

    def amp_clause(self) -> str:
        """What ``--amp``'s reason adds: it decided without the probe it would have followed."""
        if self.folder:
            return f"no usable probe ({self.cause})"
        return f"no usable probe (the cached one at {self.path} is unreadable)"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CacheProblem:
        return cls(str(data["path"]), str(data["cause"]), bool(data.get("folder")))


def read_cached_probe(
    recipe: str,
    model: str,
    *,
    device=None,
    hardware: Mapping[str, Any] | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> tuple[ProbeResult | None, CacheProblem | None]:
    """(the cached probe or None, why a cache file there could not be used or None); logs nothing.

    (None, None): never probed here, or on other hardware, another torch, another recipe or
    model (their files have other names). A file at this machine's name that cannot be read,
    parsed or trusted (cut short, bad JSON, another format, fields missing) is a ``CacheProblem``,
    never silence: an ``--amp`` run would otherwise decide differently without a word.

    Usage: ``result, problem = read_cached_probe("bert-sst2", run_info["model"], device=device)``
    """
    hw = dict(hardware) if hardware is not None else describe_hardware(device)
    path = probe_cache_path(hw, recipe, model, cache_dir)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, None  # not probed here yet (or the cache folder does not exist yet)
    except NotADirectoryError:
        blocker = _file_in_the_way(path.parent) or path.parent
        cause = f"{_cache_setting(cache_dir)} cannot hold the probe cache: {blocker} is a file, not a folder"
        return None, CacheProblem(str(blocker), cause, folder=True)
    except UnicodeDecodeError:
        return None, CacheProblem(str(path), "not UTF-8 text")
    except OSError as exc:  # a folder at its name, no permission to read it
        return None, CacheProblem(str(path), exc.strerror or first_line(exc))
    result, cause = _parse_cached(text, probe_key(hw, recipe, model))
    return result, (CacheProblem(str(path), cause) if cause else None)


def cached_probe(
    recipe: str,
    model: str,
    *,
    device=None,
    hardware: Mapping[str, Any] | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> ProbeResult | None:
    """The cached probe of ``recipe`` with ``model`` (a run's ``run_info["model"]``) on this
    machine, or None: never probed here, or on other hardware, another torch, an older format.
    A cache file there that is unreadable is ignored with a warning naming it (``read_cached_probe``).

    Usage: ``cached_probe("bert-sst2", parts.run_info["model"], device=device)``
    """
    result, problem = read_cached_probe(recipe, model, device=device, hardware=hardware, cache_dir=cache_dir)
    if problem is not None:
        logger.warning(problem.warning())
    return result


def _parse_cached(text: str, key: str) -> tuple[ProbeResult | None, str | None]:
    """(the result, None) or (None, why this cache file's text is not a probe result of ``key``)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON, cut short or edited: {exc.msg} (line {exc.lineno}, column {exc.colno})"
    if not isinstance(data, dict):
        return None, f"a JSON {type(data).__name__}, not a probe result"
    if data.get("format") != PROBE_FORMAT:  # the format is in the file's name: another one here was edited
        return None, f"format {data.get('format')!r}, where this mixft reads format {PROBE_FORMAT}"
    try:
        result = ProbeResult.from_dict(data)
    except KeyError as exc:
        return None, f"no {exc.args[0]!r} field"
    except (TypeError, ValueError) as exc:
        return None, f"not a probe result: {first_line(exc)}"
    if result.key != key:
        return None, "it holds the probe of another machine, torch, recipe or model than its name says"
    return result, None


def _cache_setting(cache_dir: str | os.PathLike | None) -> str:
    """How the user named the cache folder: ``"MIXFT_CACHE=/x"``, or the folder and where it came from."""
    if cache_dir is not None:
        return str(cache_dir)
    if os.environ.get("MIXFT_CACHE"):
        return f"MIXFT_CACHE={os.environ['MIXFT_CACHE']}"
    origin = "$XDG_CACHE_HOME/mixft" if os.environ.get("XDG_CACHE_HOME") else "the default"
    return f"{default_cache_dir()} ({origin}; MIXFT_CACHE is not set)"


def _file_in_the_way(folder: Path) -> Path | None:
    """The first part of ``folder``, from the top, that exists but is not a folder (None: none)."""
    for part in [*reversed(folder.parents), folder]:
        if not os.path.exists(part):  # os.path: False, not an exception, for a part it may not look into
            return None
        if not os.path.isdir(part):
            return part
    return None


# ------------------------------------------------------------------------------ telling
def probe_line(result: ProbeResult) -> str:
    """One line for every run's header.

    Usage: ``probe_line(result)`` -> ``'probe: bf16 step 0.41x fp32, matmul 0.38x (this CPU has no AMX); fastest: fp32'``
    """
    parts = []
    for r in result.rows:
        if r.precision == "fp32":
            continue
        step = f"step {r.speedup_vs_fp32:.2f}x fp32" if r.speedup_vs_fp32 else "step not timed"
        matmul = f", matmul {r.matmul_ratio_vs_fp32:.2f}x" if r.matmul_ratio_vs_fp32 else ""
        parts.append(f"{r.precision} {step}{matmul}")
    note = device_note(result.hardware)
    body = "; ".join(parts) or "fp32 only"
    return f"probe: {body}{f' ({note})' if note else ''}; fastest: {result.recommended}"


def _table_rows(result: ProbeResult) -> list[list[str]]:
    rows = []
    for r in result.rows:
        timed = f"{r.timed_steps} (+{r.warmup_steps} warm-up)" if r.step_times_s else "not timed: budget"
        rows.append(
            [
                r.precision,
                f"{r.step_s * 1e3:.1f}" if r.step_s else "-",
                f"{r.speedup_vs_fp32:.2f}x" if r.speedup_vs_fp32 else "-",
                f"{r.matmul_flops_per_s / 1e9:.1f}" if r.matmul_flops_per_s else "-",
                f"{r.matmul_ratio_vs_fp32:.2f}x" if r.matmul_ratio_vs_fp32 else "-",
                f"{r.spread:.0%}" if r.spread is not None else "-",
                timed,
            ]
        )
    return rows


# "spread": (slowest - fastest) / median of the timed steps.
_HEADERS = ["precision", "step (ms)", "step vs fp32", "matmul GFLOP/s", "matmul vs fp32", "spread", "steps timed"]


def _skipped_notes(result: ProbeResult) -> list[str]:
    """Why a precision was not timed, or timed on fewer steps; where torch has no hardware path for it."""
    notes = [f"{r.precision} not timed: {r.skipped}" for r in result.rows if r.skipped and not r.step_times_s]
    notes += [f"{r.precision}: {r.note}" for r in result.rows if r.note and r.step_times_s]
    return notes + _native_notes(result)


def _native_notes(result: ProbeResult) -> list[str]:
    """``"bf16: no hardware path on this CPU (CPU capability AVX2, oneDNN has no bf16 here): torch emulates it"``."""
    native = result.hardware.get("native") or {}
    where = "GPU" if result.device.startswith("cuda") else "CPU"
    notes = []
    for r in result.rows:
        if r.precision in ("bf16", "fp16") and native.get(r.precision) is False:
            why = (
                f"compute capability {native.get('compute_capability')}"
                if native.get("via") == "CUDA"
                else f"CPU capability {native.get('cpu_capability')}, oneDNN has no {r.precision} here"
            )
            notes.append(f"{r.precision}: no hardware path on this {where} ({why}): torch emulates it")
    return notes


def _when(result: ProbeResult) -> str:
    return result.measured_at[:16].replace("T", " ") + " UTC"


def _batch_text(result: ProbeResult) -> str:
    shape = " x ".join(str(d) for d in result.batch.get("shape", [])) or "?"
    tokens = result.batch.get("tokens")
    return f"one batch of {shape}" + (f" ({tokens} real tokens)" if tokens else "")


def render_probe_table(result: ProbeResult) -> str:
    """The probe as a plain-text table for the terminal (header, table, recommendation).

    Usage: ``print(render_probe_table(probe(cfg)))``
    """
    rows = _table_rows(result)
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(_HEADERS)]

    def line(cells: list[str]) -> str:
        # Left-align the names and the last column, right-align the figures.
        out = [c.ljust(w) if i in (0, len(cells) - 1) else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))]
        return "  ".join(out).rstrip()

    head = [
        f"mixft probe: {result.recipe} on {result.device}: {hardware_line(result.hardware)}",
        f"model {result.model}; {_batch_text(result)}; torch {result.hardware.get('torch')}; "
        f"{_when(result)}; {result.wall_s:.1f} s (budget {result.time_budget_s:g} s)",
        "",
        line(_HEADERS),
        line(["-" * w for w in widths]),
        *(line(row) for row in rows),
        *_skipped_notes(result),
        "",
        f"recommendation: {result.reason}",
    ]
    return "\n".join(head)


def probe_markdown(result: ProbeResult, *, heading: str = "##") -> str:
    """The probe as a report.md section (``heading`` sets its level).

    Usage: ``report_text += probe_markdown(result)``
    """
    table = ["| " + " | ".join(_HEADERS) + " |", "|---|" + "---:|" * (len(_HEADERS) - 2) + "---|"]
    table += ["| " + " | ".join(row) + " |" for row in _table_rows(result)]
    shapes = ", ".join(f"{s['rows']}x{s['in']}->{s['out']} (x{s['calls']})" for s in result.matmul_shapes)
    lines = [
        f"{heading} Is mixed precision faster here? (probe)",
        "",
        f"Machine: {hardware_line(result.hardware)}; torch {result.hardware.get('torch')}; device `{result.device}`.",
        f"Recipe `{result.recipe}`, model {result.model}; every precision trained on the same {_batch_text(result)}, "
        f"median of the timed steps after warm-up (spread: slowest minus fastest over the median); "
        f"measured {_when(result)} in {result.wall_s:.1f} s.",
        "",
        *table,
        *(["", *_skipped_notes(result)] if _skipped_notes(result) else []),
        "",
        f"**Recommendation:** {result.reason}.",
    ]
    if shapes:
        lines += [
            "",
            f"Matmul figures: `F.linear` at the model's own Linear shapes (rows x in -> out, calls per "
            f"training forward): {shapes}.",
        ]
    lines += ["", "The answer depends on the hardware: a figure from one CPU is not a fact about another."]
    return "\n".join(lines) + "\n"
