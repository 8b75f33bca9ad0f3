"""The parts of the GPU check: each measures one thing and returns its figures and a markdown section.

- ``tests``   the suite's CUDA tests (``pytest -m gpu``: every test file that marks one; ``tests/gpu``
              only with ``--tiny``), in a child process with its own time limit;
- ``steps``   a BERT step per precision (fp32 with TF32 off, tf32, bf16 autocast, fp16 + GradScaler,
              bf16-pure) in mixft's Trainer on one fixed batch of random tokens (``timing.SameBatch``),
              ``warmup`` steps then ``steps`` timed ones (``timing.StepTimer``: synchronised clock,
              median), peak memory from ``timing.TimedRegion`` (CUDA: ``max_memory_allocated``);
- ``compare`` ``python scripts/finetune.py --recipe bert-sst2 --compare fp32,bf16,fp16`` on the model
              and the generated data (``mixft.cli.main.main``, in this process: the same code);
- ``peers``   mixft against ``transformers.Trainer`` on the same job and precision (``peers.run_peers``).

A part raises for a failure (the driver records the one-line reason); a precision or a batch
size a part cannot run here (tf32 on a CPU, one that the time left would not cover) is a row
with its own status and note, never a silent gap.

Usage::

    outcome = PARTS["steps"].run(context)
    outcome.figures["rows"][0]["median_step_ms"]
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import shlex
import shutil
import subprocess
import sys
import traceback
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .gpu_setup import ROOT, bert_config, make_data_dir, make_model_dir
from .timing import SameBatch, StepTimer, TimedRegion, markdown_table, mib, ratio

# Every precision of the step part, in the order of mixft's precision table.
STEP_PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "bf16-pure")
COMPARE_PRECISIONS = "fp32,bf16,fp16"
# Seconds kept back from a child process's limit, for recording what happened and writing the files.
RESERVE_S = 5.0


class Budget:
    """Seconds left of a budget; whether an estimate still fits. ``clock`` is injectable (tests).

    Usage: ``budget = Budget(480); if budget.covers(90): ...``
    """

    def __init__(self, total_s: float, clock: Callable[[], float] | None = None):
        import time

        self.total_s = float(total_s)
        self._clock = clock or time.monotonic
        self._t0 = self._clock()

    def elapsed(self) -> float:
        return self._clock() - self._t0

    def left(self) -> float:
        return self.total_s - self.elapsed()

    def covers(self, estimate_s: float) -> bool:
        """Whether ``estimate_s`` fits in what is left, ``RESERVE_S`` kept for writing the files."""
        return self.left() - RESERVE_S >= estimate_s

    def shortfall(self, estimate_s: float) -> str:
        """Why a part of ``estimate_s`` is skipped, in words."""
        return (
            f"skipped by the budget guard: about {estimate_s:.0f} s needed, {max(self.left(), 0):.0f} s left "
            f"of {self.total_s:.0f} s ({RESERVE_S:.0f} s kept to write the files)"
        )


@dataclass(frozen=True)
class Sizes:
    """How big each part is. The estimates are budget guesses (seconds), not measurements: the
    check's own JSON records each part's real time, from which they can be set."""

    name: str
    step_shapes: tuple[tuple[int, int], ...]  # BERT step: (batch size, tokens per row) of each row group
    step_steps: int  # timed steps per row, after step_warmup untimed ones
    step_warmup: int
    train: int  # compare and peers: generated sentences to train on, to evaluate on
    eval: int
    epochs: int
    batch: int
    peers_precisions: tuple[str, ...]
    estimates: dict[str, float]  # per part
    step_row_s: float  # one (batch, precision) row of the step part
    peers_run_s: float  # one precision of the peers part (mixft and Trainer)


GPU = Sizes(
    name="gpu",
    step_shapes=((32, 128), (128, 128)),
    step_steps=20,
    step_warmup=5,
    train=2000,  # bert-sst2's demo budget: 2000 train, 872 eval, 2 epochs, batch 32
    eval=872,
    epochs=2,
    batch=32,
    peers_precisions=("bf16", "fp16"),
    # From the first GPU run (one H200, 2026-11-27): tests 28 s, steps 42 s for 10 rows, compare 65 s,
    # peers 22 s; each estimate about twice that, for an H100's slower memory and a colder machine.
    estimates={"tests": 60.0, "steps": 90.0, "compare": 120.0, "peers": 45.0},
    step_row_s=8.0,
    peers_run_s=20.0,
)
TINY = Sizes(
    name="tiny",
    step_shapes=((4, 16),),
    step_steps=2,
    step_warmup=1,
    train=32,
    eval=16,
    epochs=1,
    batch=8,
    peers_precisions=("fp32",),
    estimates={"tests": 30.0, "steps": 10.0, "compare": 20.0, "peers": 20.0},
    step_row_s=2.0,
    peers_run_s=10.0,
)


@dataclass
class Context:
    """What every part shares: device, sizes, budget, folders; the model and data made once, on first use."""

    device: torch.device
    sizes: Sizes
    budget: Budget
    out_dir: Path
    work_dir: Path  # scratch, removed by the driver
    env: dict[str, str]  # for child processes (PYTHONPATH with the registered entry points)
    setup: dict[str, Any] = field(default_factory=dict)  # how the model and data were made (the report says)
    _model: Path | None = None
    _data: Path | None = None

    @property
    def tiny(self) -> bool:
        return self.sizes.name == TINY.name  # also after --step-shapes replaced its shapes

    def model_dir(self) -> Path:
        if self._model is None:
            path, tokenizer = make_model_dir(self.work_dir / "bert", tiny=self.tiny)
            self.setup["model"] = describe_model(self.tiny)
            self.setup["tokenizer"] = tokenizer
            self._model = path
        return self._model

    def data_dir(self) -> Path:
        if self._data is None:
            s = self.sizes
            self._data = make_data_dir(self.work_dir / "sst2", s.train, s.eval)
            self.setup["data"] = f"mixft's generated sentiment set, {s.train} train / {s.eval} eval sentences"
        return self._data


def describe_model(tiny: bool) -> str:
    """The check's BERT in words: ``"BertModel, random weights: 12 layers x 768 wide, ..."``."""
    config = bert_config(tiny)
    shape = "" if tiny else " (BertConfig(): bert-base-uncased's shape)"
    layers = config.num_hidden_layers
    return (
        f"BertModel, random weights: {layers} layer{'s' if layers != 1 else ''} x {config.hidden_size} wide, "
        f"vocabulary {config.vocab_size}{shape}"
    )


def one_line(error: BaseException) -> str:
    """An exception as one line: its type and the first line of its message."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:300]}" if text else type(error).__name__


@dataclass
class Outcome:
    """What a part found: figures for the JSON, a markdown section, a note; ``status`` ok/failed/skipped."""

    figures: dict[str, Any]
    markdown: str
    note: str | None = None
    status: str = "ok"


@dataclass(frozen=True)
class Part:
    name: str
    title: str
    run: Callable[[Context], Outcome]


# ----------------------------------------------------------------------------- tests
def gpu_test_files(root: Path = ROOT) -> list[str]:
    """The test files (relative to ``root``) that mark a test ``gpu``."""
    return sorted(
        str(p.relative_to(root))
        for p in (root / "tests").rglob("test_*.py")
        if "mark.gpu" in p.read_text(encoding="utf-8", errors="replace")
    )


def junit_cases(path: Path) -> list[dict[str, str]]:
    """Each test case of a pytest JUnit XML file: ``{"test", "outcome", "message"}`` (outcome passed,
    failed, error or skipped; message: the first line of pytest's reason)."""
    cases = []
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed"}.get(child.tag, child.tag)
                message = (child.get("message") or child.text or "").strip().splitlines()[0:1]
                message = message[0][:300] if message else ""
                break
        cases.append(
            {"test": f"{case.get('classname', '')}::{case.get('name', '')}", "outcome": outcome, "message": message}
        )
    return cases


def run_tests(ctx: Context) -> Outcome:
    files = ["tests/gpu"] if ctx.tiny else gpu_test_files()
    xml = ctx.work_dir / "pytest.xml"
    # -n 0: one process owns the GPU; --basetemp: the child's tmp_path never touches a running session's.
    cmd = [sys.executable, "-m", "pytest", "-n", "0", "-p", "no:cacheprovider", "-m", "gpu", "-rfEs"]
    cmd += [f"--basetemp={ctx.work_dir / 'pytest-tmp'}", f"--junitxml={xml}", *files]
    limit = max(1.0, min(ctx.budget.left() - RESERVE_S, 2 * ctx.sizes.estimates["tests"]))
    print(f"gpu_check: tests: {shlex.join(cmd[1:])} (limit {limit:.0f} s)", flush=True)
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=ctx.env, capture_output=True, text=True, timeout=limit)
        output, code = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as e:
        output = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        print(output, flush=True)
        raise RuntimeError(f"pytest ran past its limit of {limit:.0f} s and was stopped") from e
    print(output, flush=True)
    cases = junit_cases(xml) if xml.is_file() else []
    counts = Counter(c["outcome"] for c in cases)
    summary = ", ".join(f"{counts[k]} {k}" for k in ("passed", "failed", "error", "skipped") if counts[k])
    figures = {"command": "python " + shlex.join(cmd[1:]), "files": files, "exit_code": code, "counts": dict(counts)}
    figures["cases"] = cases
    rows = [[c["test"], c["outcome"], c["message"].replace("|", "\\|")] for c in cases]
    markdown = f"`{figures['command']}`: exit code {code}; {summary or 'no test ran'}\n\n"
    markdown += markdown_table(["test", "outcome", "reason"], rows) if rows else output[-2000:]
    if counts["failed"] or counts["error"] or code not in (0, 5) or not cases:
        return Outcome(figures, markdown, f"pytest exit code {code}: {summary or 'no test ran'}", "failed")
    if not counts["passed"]:  # every CUDA test skipped: say so, never a silent pass
        reasons = sorted({c["message"] for c in cases})
        return Outcome(figures, markdown, f"all {len(cases)} skipped ({'; '.join(reasons)})", "skipped")
    return Outcome(figures, markdown, summary)


# ----------------------------------------------------------------------------- steps
def _step_row(ctx: Context, name: str, batch_size: int, length: int) -> dict[str, Any]:
    """One BERT step row: ``warmup`` + ``steps`` optimizer steps of mixft's Trainer on one batch."""
    from transformers import BertModel

    from mixft.amp.precision import resolve_precision
    from mixft.errors import UsageError
    from mixft.models.classifiers import BertClassifier
    from mixft.train.optim import adamw_factory
    from mixft.train.trainer import Trainer

    from .bert import bert_matmul_flops

    s, dev = ctx.sizes, ctx.device
    row: dict[str, Any] = {"precision": name, "batch_size": batch_size, "length": length}
    try:
        precision = resolve_precision(name, dev)
    except UsageError as e:  # tf32 on a CPU or a pre-Ampere GPU: not a choice here
        return {**row, "status": "skipped", "note": str(e)}
    config = bert_config(ctx.tiny)
    gen = torch.Generator().manual_seed(0)
    batch = {
        "input_ids": torch.randint(config.vocab_size, (batch_size, length), generator=gen),
        "attention_mask": torch.ones(batch_size, length, dtype=torch.long),
        "token_type_ids": torch.zeros(batch_size, length, dtype=torch.long),
        "labels": torch.randint(0, 2, (batch_size,), generator=gen).float(),
    }
    batch = {k: v.to(dev) for k, v in batch.items()}  # on the device once: the step is timed, not the copy
    torch.manual_seed(0)
    model = BertClassifier(BertModel(config))
    timer = StepTimer()
    total = s.step_warmup + s.step_steps
    trainer = Trainer(
        model,
        adamw_factory(2e-5, dev, precision=precision),  # the recipe's AdamW: fused on CUDA, optimi for bf16-pure
        nn.BCEWithLogitsLoss(),
        SameBatch(batch, total),
        precision=precision,
        device=dev,
        max_steps=total,
        seed=0,
        callbacks=[timer],
    )
    with TimedRegion(dev) as region:
        result = trainer.fit()
    summary = timer.summary(s.step_warmup)
    median = summary["median_step_s"]
    del trainer, model, batch
    return {
        **row,
        "status": "ok",
        "median_step_ms": median * 1e3,
        "min_step_ms": min(timer.step_times_s[s.step_warmup :]) * 1e3,
        "samples_per_s": batch_size / median,
        "tokens_per_s": batch_size * length / median,
        "matmul_tflops_per_s": bert_matmul_flops(config, [(batch_size, length)]) / median / 1e12,
        "peak_memory_bytes": region.peak_bytes,
        "peak_memory_kind": region.memory_kind,
        "skipped_steps": result.skipped_steps,
        "final_loss_scale": result.final_loss_scale,
        "timed_steps": summary["measured_steps"],
        "warmup_steps": s.step_warmup,
        "step_times_ms": [t * 1e3 for t in timer.step_times_s],
    }


def run_steps(ctx: Context) -> Outcome:
    s = ctx.sizes
    rows = []
    for batch_size, length in s.step_shapes:
        for name in STEP_PRECISIONS:
            row = {"precision": name, "batch_size": batch_size, "length": length}
            if not ctx.budget.covers(s.step_row_s):
                rows.append({**row, "status": "skipped", "note": ctx.budget.shortfall(s.step_row_s)})
                continue
            try:
                rows.append(_step_row(ctx, name, batch_size, length))
            except Exception as e:  # one row's failure (out of memory at a large batch) is that row's
                traceback.print_exc()
                rows.append({**row, "status": "failed", "note": one_line(e)})
            finally:
                gc.collect()
                if ctx.device.type == "cuda":
                    torch.cuda.empty_cache()
            print(
                f"gpu_check: step {name} {batch_size} x {length}: {rows[-1].get('median_step_ms', rows[-1]['status'])}"
            )
    for row in rows:
        shape = (row["batch_size"], row["length"])
        base = next((r for r in rows if (r["batch_size"], r["length"]) == shape and r["precision"] == "fp32"), None)
        ok = row["status"] == "ok" and base is not None and base["status"] == "ok"
        row["speedup_vs_fp32"] = ratio(base["median_step_ms"], row["median_step_ms"]) if ok else None
    table = [
        [
            r["precision"],
            f"{r['batch_size']} x {r['length']}",
            f"{r['median_step_ms']:.2f}" if r["status"] == "ok" else r["status"],
            f"{r['min_step_ms']:.2f}" if r["status"] == "ok" else "",
            f"{r['samples_per_s']:.1f}" if r["status"] == "ok" else "",
            f"{r['speedup_vs_fp32']:.2f}x" if r.get("speedup_vs_fp32") else "",
            f"{r['matmul_tflops_per_s']:.3g}" if r["status"] == "ok" else "",
            f"{mib(r['peak_memory_bytes'])} ({r['peak_memory_kind']})" if r["status"] == "ok" else "",
            str(r["skipped_steps"]) if r["status"] == "ok" else "",
            r.get("note", ""),
        ]
        for r in rows
    ]
    headers = ["precision", "batch x tokens", "median ms/step", "min ms", "samples/s", "vs fp32", "matmul TFLOP/s"]
    headers += ["peak memory", "skipped steps", "note"]
    head = (
        f"mixft's Trainer, one fixed batch of random tokens (attention on every token), {s.step_warmup} warm-up "
        f"+ {s.step_steps} timed steps per row (median); the recipe's AdamW (fused on CUDA; torch-optimi's "
        "compensated AdamW for bf16-pure), BCE-with-logits, gradient clipping at 1.0."
    )
    figures = {"model": describe_model(ctx.tiny), "rows": rows}
    done = [r for r in rows if r["status"] == "ok"]
    failed = [f"{r['precision']} {r['batch_size']} x {r['length']}" for r in rows if r["status"] == "failed"]
    note = f"{len(done)} of {len(rows)} rows measured" + (f"; failed: {', '.join(failed)}" if failed else "")
    status = "failed" if failed else ("ok" if done else "skipped")
    return Outcome(figures, head + "\n\n" + markdown_table(headers, table), note, status)


# ----------------------------------------------------------------------------- compare
def run_compare(ctx: Context) -> Outcome:
    s = ctx.sizes
    argv = ["--compare", COMPARE_PRECISIONS, "--model", str(ctx.model_dir()), "--data-dir", str(ctx.data_dir())]
    argv += ["--epochs", str(s.epochs), "--batch-size", str(s.batch), "--seed", "0"]
    return compare_outcome(ctx, argv, "compare")


def compare_outcome(ctx: Context, options: list[str], name: str) -> Outcome:
    """``python scripts/finetune.py --recipe bert-sst2 OPTIONS`` (a ``--compare``) in this process, into
    ``WORK/NAME``: each run's figures, its speed over fp32's of the same seed, one table. Its results.json
    and report.md are copied into the check's folder as ``NAME_results.json`` and ``NAME_report.md``."""
    from mixft.cli.main import main as finetune

    out = ctx.work_dir / name
    argv = ["--recipe", "bert-sst2", *options, "--device", ctx.device.type, "--output-dir", str(out), "--no-progress"]
    command = "python scripts/finetune.py " + shlex.join(argv)
    print(f"{name}: {command}", flush=True)
    code = finetune(argv)
    if code != 0:
        raise RuntimeError(f"{command} exited with code {code}")
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    for source, target in (("results.json", f"{name}_results.json"), ("report.md", f"{name}_report.md")):
        if (out / source).is_file():
            shutil.copy(out / source, ctx.out_dir / target)
    rows = []
    for run in results["runs"]:
        memory = run.get("memory") or {}
        rows.append(
            {
                "precision": run["precision"],
                "seed": run.get("seed"),
                "accuracy": (run.get("eval") or {}).get("accuracy"),
                "train_time_s": run["train_time_s"],
                "train_samples_per_s": run["train_samples_per_s"],
                "peak_memory_bytes": run["peak_memory_bytes"],
                "peak_memory_kind": run.get("peak_memory_kind"),
                "saved_activations_bytes": memory.get("saved_activations_peak"),
                "steps": run["steps"],
                "skipped_steps": run["skipped_steps"],
                "final_loss_scale": run["final_loss_scale"],
            }
        )
    for r in rows:  # each run against fp32 of its own seed, trained beside it
        base = next((b for b in rows if b["precision"] == "fp32" and b["seed"] == r["seed"]), None)
        r["speed_vs_fp32"] = ratio(base["train_time_s"], r["train_time_s"]) if base else None
    table = [
        [
            r["precision"],
            r["seed"],
            f"{r['accuracy']:.4f}" if r["accuracy"] is not None else "n/a",
            f"{r['train_time_s']:.1f}",
            f"{r['train_samples_per_s']:.1f}",
            f"{r['speed_vs_fp32']:.2f}x" if r["speed_vs_fp32"] else "n/a",
            f"{mib(r['peak_memory_bytes'])} ({r['peak_memory_kind']})",
            mib(r["saved_activations_bytes"]),
            f"{r['steps']} ({r['skipped_steps']} skipped)",
            f"{r['final_loss_scale']:g}" if r["final_loss_scale"] is not None else "",
        ]
        for r in rows
    ]
    headers = ["precision", "seed", "accuracy", "train (s)", "samples/s", "speed vs fp32", "peak memory"]
    headers += ["saved activations", "steps", "final loss scale"]
    markdown = f"`{command}` (its results.json and report.md: {name}_results.json, {name}_report.md)\n\n"
    markdown += markdown_table(headers, table)
    return Outcome({"command": command, "runs": rows}, markdown, f"{len(rows)} runs")


# ----------------------------------------------------------------------------- peers
def run_peers_part(ctx: Context) -> Outcome:
    from .bert import BertSetup
    from .peers import PeersConfig, peers_table, run_peers

    s = ctx.sizes
    setup = BertSetup(
        model=str(ctx.model_dir()),
        train_samples=s.train,
        eval_samples=s.eval,
        batch_size=s.batch,
        epochs=1,
        device=ctx.device.type,
        data_dir=str(ctx.data_dir()),
    )
    rows, tables, notes = [], [], []
    for name in s.peers_precisions:
        if not ctx.budget.covers(s.peers_run_s):
            notes.append(f"{name}: {ctx.budget.shortfall(s.peers_run_s)}")
            continue
        report = run_peers(PeersConfig(setup=setup, precisions=[name], frameworks=["mixft", "hf-trainer"]))
        tables.append(peers_table(report))
        for row in report.summary():
            row.pop("extra", None)  # every parameter's name, per framework: the settings say what ran
            rows.append(row)
    figures = {"setup": dataclasses.asdict(setup), "rows": rows, "not_run": notes}
    markdown = "\n\n".join(tables + [f"Not run: {n}" for n in notes])
    if not rows:
        return Outcome(figures, markdown, "; ".join(notes), "skipped")
    ratios = [f"{r['precision']}: mixft {r['mixft_ratio']:.2f}x" for r in rows if r["framework"] == "hf-trainer"]
    return Outcome(figures, markdown, "; ".join(ratios + notes))


PARTS: dict[str, Part] = {
    "tests": Part("tests", "The suite's CUDA tests", run_tests),
    "steps": Part("steps", "A BERT step per precision", run_steps),
    "compare": Part("compare", f"bert-sst2 --compare {COMPARE_PRECISIONS}", run_compare),
    "peers": Part("peers", "mixft against transformers.Trainer", run_peers_part),
}


def package_versions(names: tuple[str, ...]) -> dict[str, str | None]:
    """``{name: version or None}`` for each distribution name (None: not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    found: dict[str, str | None] = {}
    for name in names:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


def child_env(site: Path | None) -> dict[str, str]:
    """This process's environment, with ``site`` and the repository root first on ``PYTHONPATH``."""
    env = dict(os.environ)
    paths = [str(site)] if site is not None else []
    paths += [str(ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env
