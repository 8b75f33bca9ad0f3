"""The GPU check: one prepared run for the day a GPU is lent (one device call of about 8 minutes).

Runs the parts of ``benchmarks.gpu_parts`` in order: the suite's CUDA tests, a BERT step per
precision, ``bert-sst2 --compare fp32,bf16,fp16``, mixft against ``transformers.Trainer``. Each
part is timed; one whose estimate the time left of ``--budget-s`` would not cover is skipped with
a note, so the call always returns its files. ``OUT_DIR/gpu_check.json`` (every figure) and
``OUT_DIR/gpu_check.md`` (the same as tables) are rewritten before and after every part: a part
still ``running`` in them was stopped from outside. With ``--compare`` run, its results.json and
report.md are copied beside them (``compare_results.json``, ``compare_report.md``).

``scripts/gpu_check.sh OUT_DIR`` is the one command for the device machine (it installs the carried
wheels first and keeps the output in ``OUT_DIR/gpu_check.log``); docs/benchmarks.md, "The GPU
check", has the call. ``--device cpu --tiny`` runs every part on a tiny model on a CPU: the suite
runs it that way, so the check cannot rot. Bad options: one line on stderr, exit code 2, before any
work. Exit code 1 when a part failed, else 0.

Usage::

    python -m benchmarks.gpu_check OUT_DIR [--budget-s 480] [--device cuda|cpu] [--tiny] [--parts tests,steps]
"""

from __future__ import annotations

import datetime as _dt
import shlex
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from mixft.amp.hardware import describe_hardware, hardware_line, resolve_device
from mixft.atomic import write_json, write_text
from mixft.cli.parser import OneLineParser, non_negative_float, setup_logging
from mixft.errors import UsageError

from .gpu_parts import GPU, PARTS, TINY, Budget, Context, Part, Sizes, child_env, one_line, package_versions
from .gpu_setup import ensure_entry_points
from .timing import markdown_table

PROG = "gpu_check"
DEFAULT_BUDGET_S = 480.0  # an 8-minute device call; the call's own limit (10 minutes) leaves room around it
# What the report names the versions of: the machine's stack and what the carried wheels bring.
PACKAGES = (
    "torch",
    "transformers",
    "accelerate",
    "datasets",
    "evaluate",
    "torch-optimi",
    "dill",
    "multiprocess",
    "pyarrow",
    "huggingface-hub",
    "fsspec",
    "xxhash",
    "tokenizers",
    "safetensors",
    "peft",
    "numpy",
    "pandas",
    "scipy",
    "matplotlib",
    "pytest",
    "pytest-xdist",
)


@dataclass(frozen=True)
class Suite:
    """One prepared check run by ``run_check``: its parts in order, its title and its files' stem.

    ``goals``: the check's verdicts as a markdown section placed under the parts' table, made from
    the document as it stands (None: no such section). The bf16 check (``benchmarks.bf16_check``)
    is the other suite.
    """

    stem: str  # STEM.json, STEM.md
    title: str
    parts: dict[str, Part]
    goals: Callable[[dict[str, Any]], str] | None = None

    @property
    def json_name(self) -> str:
        return f"{self.stem}.json"

    @property
    def markdown_name(self) -> str:
        return f"{self.stem}.md"


GPU_CHECK = Suite("gpu_check", "GPU check", PARTS)
JSON_NAME, MARKDOWN_NAME = GPU_CHECK.json_name, GPU_CHECK.markdown_name


def build_parser() -> OneLineParser:
    p = OneLineParser(prog=PROG, description="The GPU check: CUDA tests, BERT steps, --compare, mixft vs Trainer.")
    p.add_argument("out_dir", help="folder for gpu_check.json, gpu_check.md and the --compare files")
    p.add_argument(
        "--budget-s",
        type=non_negative_float,
        default=DEFAULT_BUDGET_S,
        help=f"seconds for all parts; a part the time left would not cover is skipped (default {DEFAULT_BUDGET_S:.0f})",
    )
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--tiny", action="store_true", help="a 1-layer, 32-wide BERT and tiny sizes (the suite's CPU run)")
    p.add_argument("--parts", default=",".join(PARTS), help=f"which, comma-separated (default {','.join(PARTS)})")
    p.add_argument(
        "--step-shapes",
        metavar="BxT,...",
        help="the step part's batch x tokens shapes, e.g. 32x16,128x16 (default: the sizes' own)",
    )
    p.add_argument(
        "--site",
        help="where to register mixft's recipes when mixft is not installed (default: a temporary folder)",
    )
    return p


def check_step_shapes(text: str) -> tuple[tuple[int, int], ...]:
    """``"32x16,128x64"`` -> ((32, 16), (128, 64)); anything else is a UsageError."""
    shapes = []
    for item in text.split(","):
        batch, sep, length = item.strip().lower().partition("x")
        if not (sep and batch.isdigit() and length.isdigit() and int(batch) > 0 and int(length) > 0):
            raise UsageError(
                f"--step-shapes must list BATCHxTOKENS pairs of positive integers, e.g. 32x16, got {text!r}"
            )
        shapes.append((int(batch), int(length)))
    return tuple(shapes)


def check_parts(text: str, parts: dict[str, Part] = PARTS) -> list[str]:
    """``"tests,steps"`` -> the names in the check's order; an unknown one is a UsageError."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in parts]
    if not names or unknown:
        raise UsageError(f"--parts must list some of {', '.join(parts)}, got {text!r}")
    return [n for n in parts if n in names]


def made_out_dir(path: str) -> Path:
    """The check's folder, made now (with its parents); one that cannot be made is a UsageError."""
    out_dir = Path(path)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot create the output folder {out_dir}: {e.strerror or e}") from e
    return out_dir


def _now() -> str:
    return _dt.datetime.now().astimezone().isoformat(timespec="seconds")


def versions(device: torch.device) -> dict[str, Any]:
    """torch's own build facts: CUDA, cuDNN and NCCL versions where there is a GPU."""
    found: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda, "python": sys.version.split()[0]}
    if device.type == "cuda":
        found["cudnn"] = torch.backends.cudnn.version()
        try:
            found["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
        except (AttributeError, RuntimeError, TypeError):
            found["nccl"] = None
    return found


class Check:
    """The document being filled in: JSON figures, one markdown section per part, written after each change."""

    def __init__(
        self, out_dir: Path, command: str, device: torch.device, sizes: Sizes, budget: Budget, suite: Suite = GPU_CHECK
    ):
        self.out_dir = out_dir
        self.budget = budget
        self.suite = suite
        self.sections: dict[str, str] = {}
        self.doc: dict[str, Any] = {
            "check": f"mixft {suite.title}",
            "command": command,
            "started_at": _now(),
            "finished_at": None,
            "elapsed_s": 0.0,
            "budget_s": budget.total_s,
            "device": str(device),
            "sizes": sizes.name,
            "hardware_line": None,
            "versions": versions(device),
            "packages": package_versions(PACKAGES),
            "setup": {},
            "hardware": None,
            "parts": [],
        }

    def part(self, name: str) -> dict[str, Any]:
        return next(p for p in self.doc["parts"] if p["name"] == name)

    def write(self) -> None:
        self.doc["elapsed_s"] = round(self.budget.elapsed(), 1)
        write_json(self.out_dir / self.suite.json_name, self.doc)
        write_text(self.out_dir / self.suite.markdown_name, render_markdown(self.doc, self.sections, self.suite))


def parts_table(doc: dict[str, Any]) -> str:
    rows = [
        [
            p["name"],
            p["status"],
            f"{p['elapsed_s']:.1f}" if p["elapsed_s"] is not None else "",
            f"{p['estimate_s']:.0f}",
            (p["note"] or "").replace("|", "\\|"),
        ]
        for p in doc["parts"]
    ]
    return markdown_table(["part", "status", "time (s)", "estimate (s)", "note"], rows)


def render_markdown(doc: dict[str, Any], sections: dict[str, str], suite: Suite = GPU_CHECK) -> str:
    """STEM.md: the machine, the parts' statuses, the suite's goals (if it has them), then each part's tables."""
    v = doc["versions"]
    stack = f"torch {v['torch']}" + (f", CUDA {v['cuda']}" if v.get("cuda") else "")
    stack += f", cuDNN {v['cudnn']}" if v.get("cudnn") else ""
    stack += f", NCCL {v['nccl']}" if v.get("nccl") else ""
    packages = ", ".join(f"{k} {val}" for k, val in doc["packages"].items() if val and k != "torch")
    missing = ", ".join(k for k, val in doc["packages"].items() if not val)
    lines = [
        f"# {suite.title}",
        "",
        f"- device: {doc['device']}: {doc['hardware_line'] or 'not read yet'}",
        f"- {stack}; Python {v['python']}",
        f"- packages: {packages}" + (f"; not installed: {missing}" if missing else ""),
        f"- started {doc['started_at']}, {doc['elapsed_s']:.0f} s of a {doc['budget_s']:.0f} s budget"
        + (f", finished {doc['finished_at']}" if doc["finished_at"] else " (not finished)"),
        f"- sizes: {doc['sizes']}; command: `{doc['command']}`",
        *(f"- {key}: {value}" for key, value in doc["setup"].items()),
        "",
        parts_table(doc),
    ]
    if suite.goals is not None:
        lines += ["", "## Goals", "", suite.goals(doc)]
    for p in doc["parts"]:
        if p["name"] in sections:
            lines += ["", f"## {p['title']}", "", sections[p["name"]]]
    return "\n".join(lines) + "\n"


def run_check(
    out_dir: Path,
    device: torch.device,
    names: list[str],
    sizes: Sizes,
    budget: Budget,
    site: Path | None,
    command: str,
    suite: Suite = GPU_CHECK,
    make_context: Callable[..., Context] = Context,
) -> int:
    """Every part of ``names`` in order, within ``budget``; the files written after each. Returns the exit code.

    ``site``: where mixft's recipes are registered if mixft is not installed (None: the scratch folder).
    ``make_context``: builds what the parts share, called as ``Context`` is (a suite's parts may need more).
    """
    check = Check(out_dir, command, device, sizes, budget, suite)
    doc = check.doc
    for name in names:
        part = suite.parts[name]
        estimate = sizes.estimates[name]
        record = {"name": name, "title": part.title, "status": "pending", "estimate_s": estimate, "elapsed_s": None}
        doc["parts"].append({**record, "note": None, "figures": {}})
    work = Path(tempfile.mkdtemp(prefix=f"mixft-{suite.stem.replace('_', '-')}-"))
    site = site or work / "site"
    try:
        try:
            doc["setup"]["entry_points"] = ensure_entry_points(site)
        except Exception as e:  # the parts that need a recipe will each say so too
            doc["setup"]["entry_points"] = f"could not be registered: {one_line(e)}"
        hw = describe_hardware(device)
        doc["hardware"], doc["hardware_line"] = hw, hardware_line(hw)
        check.write()
        ctx = make_context(device, sizes, budget, out_dir, work, child_env(site), setup=doc["setup"])
        for name in names:
            record = check.part(name)
            if not budget.covers(record["estimate_s"]):
                record["status"], record["note"] = "skipped", budget.shortfall(record["estimate_s"])
                check.write()
                continue
            record["status"] = "running"
            check.write()
            t0 = time.monotonic()
            try:
                outcome = suite.parts[name].run(ctx)
            except Exception as e:
                traceback.print_exc()
                record["status"], record["note"] = "failed", one_line(e)
            else:
                record["status"], record["note"], record["figures"] = outcome.status, outcome.note, outcome.figures
                check.sections[name] = outcome.markdown
            record["elapsed_s"] = round(time.monotonic() - t0, 1)
            if device.type == "cuda":
                torch.cuda.empty_cache()
            check.write()
    finally:
        doc["finished_at"] = _now()
        check.write()
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n{hardware_line(doc['hardware']) if doc['hardware'] else doc['device']}\n{parts_table(doc)}")
    if suite.goals is not None:
        print(f"\n{suite.goals(doc)}")
    print(f"\nwritten: {out_dir / suite.json_name}, {out_dir / suite.markdown_name}")
    return 1 if any(p["status"] == "failed" for p in doc["parts"]) else 0


def main(argv: list[str] | None = None) -> int:
    setup_logging()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
        names = check_parts(args.parts)
        sizes = TINY if args.tiny else GPU
        if args.step_shapes is not None:
            sizes = replace(sizes, step_shapes=check_step_shapes(args.step_shapes))
        device = resolve_device(args.device)
        out_dir = made_out_dir(args.out_dir)
    except UsageError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    budget = Budget(args.budget_s)  # the clock starts once the options are known
    site = Path(args.site) if args.site else None
    command = shlex.join(["python", "-m", "benchmarks.gpu_check", *argv])
    return run_check(out_dir, device, names, sizes, budget, site, command)


if __name__ == "__main__":
    sys.exit(main())
