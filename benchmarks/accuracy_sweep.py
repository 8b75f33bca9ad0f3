"""Accuracy over seeds, candidate by candidate: what moves bert-sst2's accuracy at a fixed budget, and its step time.

``python benchmarks/accuracy_sweep.py --data-dir DIR --sizes 1000,2000,6000 --seeds 0,1,2,3,4
--candidates 'mixft;mixft:pack_sequences=false;hf-random' --json docs/bench/FILE.json [--max-minutes 18]``
``python benchmarks/accuracy_sweep.py --table docs/bench/FILE.json``  (the tables again, from the file)

A candidate is a framework, optionally with ``RunConfig`` options after a colon
(``mixft:group_by_length=false``, ``mixft:length_group_size=15,pack_sequences=false``):

* ``mixft``: the bert-sst2 recipe's parts (``recipe.build``) trained by
  ``mixft.runs.build.build_trainer``, as ``scripts/finetune.py`` trains them;
* ``mixft-2logit``: the same with a diagnostic head, two logits + cross-entropy instead of the
  recipe's one logit + sigmoid/BCE (the recipe's head is fixed by the project: measured, not adopted);
* ``hf-grouped`` / ``hf-random``: ``transformers.Trainer`` on the same recipe parts (model, data,
  collator, optimizer, schedule; ``benchmarks.peers``) with ``group_by_length`` (its fastest
  sampling here) or ``random`` (its default);
* ``hf-auto``: ``transformers.Trainer`` as a user would run it: ``AutoModelForSequenceClassification``
  (two logits, Trainer's own optimizer and schedule: no warm-up, no weight decay) on the same rows;
  ``hf-auto-grouped``: the same with ``group_by_length`` (Trainer's fastest sampling here).

Every run: ``--epochs`` (1) over the first N training rows of ``--data-dir`` for each of ``--sizes``,
batch ``--batch-size`` (32), ``--lr`` (5e-5), clip 1.0, ``--precision`` (fp32), one seed; accuracy on
all of the directory's dev rows from one evaluator (``benchmarks.bert.evaluate_accuracy``). Beside
it: the training call's wall time, ms per optimizer step, samples/s and padding efficiency (real
tokens / padded tokens). Runs go size by size, seed by seed, the candidates in a rotated order.

The JSON file is the sweep's state: every finished run is written at once (atomically), a run
already in it is not repeated, and ``--max-minutes`` stops starting new runs after that long, so a
long sweep goes in chunks (each under the machine's CPU lock). Timings are only comparable within
one machine and load; accuracy does not depend on them.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch import nn

from benchmarks.bert import BertSetup, WorkCounter, evaluate_accuracy, padding_collator, prepare_bert
from benchmarks.timing import TimedRegion, markdown_table, rotated
from mixft.amp.hardware import describe_hardware, hardware_line
from mixft.amp.precision import resolve_device, resolve_precision
from mixft.atomic import write_json
from mixft.config.run_config import RunConfig

FRAMEWORKS = ("mixft", "mixft-2logit", "hf-grouped", "hf-random", "hf-auto", "hf-auto-grouped")
_BOOLS = {"true": True, "false": False}


def parse_candidate(text: str) -> tuple[str, dict]:
    """``"mixft:pack_sequences=false,length_group_size=15"`` -> ("mixft", {...}); options checked against RunConfig."""
    framework, _, rest = text.partition(":")
    if framework not in FRAMEWORKS:
        raise SystemExit(f"accuracy_sweep: unknown framework {framework!r} in {text!r}; choose from {FRAMEWORKS}")
    fields = {f.name: f for f in dataclasses.fields(RunConfig)}
    options = {}
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        if key not in fields:
            raise SystemExit(f"accuracy_sweep: {key!r} in {text!r} is not a RunConfig option")
        options[key] = _BOOLS.get(value.lower(), value)
        if isinstance(options[key], str):
            options[key] = float(value) if any(c in value for c in ".e") else int(value)
    if options and framework.startswith("hf"):
        raise SystemExit(f"accuracy_sweep: {text!r}: options apply to mixft candidates only")
    return framework, options


# --------------------------------------------------------------------------- one run per framework
def _two_logit(parts, seed: int):
    """The recipe's model with Linear(hidden, 2) + cross-entropy instead of Linear(hidden, 1) + BCE (diagnostic)."""
    model = parts.model
    torch.manual_seed(seed)  # the head's init depends on the seed only, as the recipe's
    model.classifier = nn.Linear(model.classifier.in_features, 2)
    return dataclasses.replace(
        parts,
        model=model,
        loss_fn=lambda logits, labels: nn.functional.cross_entropy(logits.float(), labels.long()),
        predict_fn=lambda logits: logits.argmax(-1),
    )


def train_mixft(bert, cfg: RunConfig, precision, device, seed: int, two_logits: bool):
    from mixft.runs.build import build_trainer

    parts = bert.recipe.build(cfg, bert.prepared, precision, device, seed)
    if two_logits:
        parts = _two_logit(parts, seed)
    trainer = build_trainer(
        dataclasses.replace(parts, eval_loader=None), cfg, precision=precision, device=device, seed=seed
    )

    def train() -> int:
        trainer.fit()
        return trainer.state.step

    return parts.model, parts.eval_loader, parts.predict_fn, train


def train_hf(bert, cfg: RunConfig, precision, device, seed: int, sampling: str):
    from benchmarks.peers import _setup_hf

    parts = bert.recipe.build(cfg, bert.prepared, precision, device, seed)
    _, run = _setup_hf(cfg, parts, precision, device, seed, sampling=sampling)

    def train() -> int:
        return run()["steps"]

    return parts.model, parts.eval_loader, parts.predict_fn, train


def train_hf_auto(bert, cfg: RunConfig, precision, device, seed: int, sampling: str = "random"):
    """Trainer + AutoModelForSequenceClassification with TrainingArguments' own defaults but the budget.

    ``sampling``: ``"random"`` (Trainer's default) or ``"group_by_length"`` (its fastest here)."""
    import shutil
    import tempfile

    from transformers import AutoModelForSequenceClassification, PrinterCallback, TrainingArguments
    from transformers import Trainer as HFTrainer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # the load report of the new head: expected, and said in the docstring

    parts = bert.recipe.build(cfg, bert.prepared, precision, device, seed)  # the same rows, collator, eval loader
    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_pretrained(
        bert.prepared.model_path, num_labels=2, dtype=torch.float32
    ).to(device)
    collate = padding_collator(parts.train_loader.collate_fn)  # Trainer's model takes padded batches

    def long_labels(rows):  # the recipe's labels are floats for its BCE; two logits want class ids
        batch = collate(rows)
        batch["labels"] = batch["labels"].long()
        return batch

    out = tempfile.mkdtemp(prefix="mixft-sweep-")
    args = TrainingArguments(
        output_dir=out,
        per_device_train_batch_size=cfg.batch_size,
        num_train_epochs=cfg.epochs,
        learning_rate=cfg.lr,
        max_grad_norm=cfg.clip_norm or 0.0,
        seed=seed,
        train_sampling_strategy=sampling,
        bf16=precision.autocast_dtype == torch.bfloat16,
        fp16=precision.autocast_dtype == torch.float16,
        eval_strategy="no",
        save_strategy="no",
        logging_strategy="no",
        report_to=[],
        use_cpu=device.type == "cpu",
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    hf = HFTrainer(model=model, args=args, train_dataset=parts.train_loader.dataset, data_collator=long_labels)
    hf.remove_callback(PrinterCallback)

    def train() -> int:
        try:
            hf.train()
        finally:
            shutil.rmtree(out, ignore_errors=True)
        return hf.state.global_step

    return model, parts.eval_loader, lambda outputs: outputs.logits.argmax(-1), train


def one_run(bert, candidate: str, precision_name: str, seed: int) -> dict:
    framework, options = parse_candidate(candidate)
    device = resolve_device("cpu")
    precision = resolve_precision(precision_name, device)
    cfg = dataclasses.replace(bert.cfg, **options).validate()
    if framework in ("mixft", "mixft-2logit"):
        model, eval_loader, predict_fn, train = train_mixft(
            bert, cfg, precision, device, seed, framework == "mixft-2logit"
        )
    elif framework in ("hf-auto", "hf-auto-grouped"):
        sampling = "group_by_length" if framework == "hf-auto-grouped" else "random"
        model, eval_loader, predict_fn, train = train_hf_auto(bert, cfg, precision, device, seed, sampling)
    else:
        model, eval_loader, predict_fn, train = train_hf(
            bert, cfg, precision, device, seed, "group_by_length" if framework == "hf-grouped" else "random"
        )
    with WorkCounter(model) as work, TimedRegion(device) as region:
        steps = train()
    counts = work.totals()
    accuracy = evaluate_accuracy(model, eval_loader, predict_fn, precision, device)
    return {
        "candidate": candidate,
        "precision": precision.name,
        "train_rows": len(bert.prepared.train),
        "seed": seed,
        "accuracy": accuracy,
        "time_s": region.elapsed_s,
        "steps": steps,
        "ms_per_step": 1000 * region.elapsed_s / max(steps, 1),
        "samples_per_s": counts["samples"] / region.elapsed_s,
        "padding_efficiency": counts["real_tokens"] / counts["padded_tokens"] if counts["padded_tokens"] else None,
    }


# --------------------------------------------------------------------------- tables
def summary_rows(runs: list[dict]) -> list[dict]:
    """Per (precision, rows, candidate): accuracy mean ± std over seeds, medians of the timings."""
    cells: dict[tuple, list[dict]] = {}
    for run in runs:
        cells.setdefault((run["precision"], run["train_rows"], run["candidate"]), []).append(run)
    rows = []
    for (precision, n, candidate), group in cells.items():
        acc = [r["accuracy"] for r in sorted(group, key=lambda r: r["seed"])]
        rows.append(
            {
                "precision": precision,
                "train_rows": n,
                "candidate": candidate,
                "seeds": len(acc),
                "accuracy_per_seed": acc,
                "mean": statistics.mean(acc),
                "std": statistics.stdev(acc) if len(acc) > 1 else float("nan"),
                "ms_per_step": statistics.median(r["ms_per_step"] for r in group),
                "samples_per_s": statistics.median(r["samples_per_s"] for r in group),
                "padding_efficiency": statistics.median(r["padding_efficiency"] or math.nan for r in group),
            }
        )
    return rows


def tables(doc: dict) -> str:
    rows = summary_rows(doc["runs"])
    out = []
    for precision in dict.fromkeys(r["precision"] for r in rows):
        for n in sorted({r["train_rows"] for r in rows if r["precision"] == precision}):
            cell = [r for r in rows if r["precision"] == precision and r["train_rows"] == n]
            out.append(f"{precision}, {n} training rows:\n")
            out.append(
                markdown_table(
                    [
                        "candidate",
                        "seeds",
                        "accuracy mean ± std",
                        "per seed",
                        "ms/step (median)",
                        "samples/s",
                        "padding eff.",
                    ],
                    [
                        [
                            r["candidate"],
                            r["seeds"],
                            f"{r['mean']:.4f} ± {r['std']:.4f}",
                            " ".join(f"{a:.3f}" for a in r["accuracy_per_seed"]),
                            f"{r['ms_per_step']:.0f}",
                            f"{r['samples_per_s']:.1f}",
                            f"{r['padding_efficiency']:.2f}",
                        ]
                        for r in cell
                    ],
                )
                + "\n"
            )
    return "\n".join(out)


# --------------------------------------------------------------------------- the sweep
def _commit() -> str | None:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).resolve().parent,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--table", metavar="JSON", help="print the tables of an existing sweep file and exit")
    p.add_argument("--data-dir", help="GLUE-layout directory (train.tsv, dev.tsv) of real text")
    p.add_argument("--sizes", default="2000", help="training rows, comma-separated (the first N of train.tsv)")
    p.add_argument("--seeds", default="0,1,2,3,4")
    p.add_argument(
        "--candidates",
        default="mixft;hf-random",
        help="semicolon-separated, e.g. 'mixft;mixft:pack_sequences=false,group_by_length=false;hf-random'",
    )
    p.add_argument("--precision", default="fp32")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--json", help="the sweep's file: finished runs are kept here and not repeated")
    p.add_argument("--max-minutes", type=float, help="start no new run after this many minutes")
    args = p.parse_args(argv)
    if args.table:
        print(tables(json.loads(Path(args.table).read_text(encoding="utf-8"))))
        return 0
    if not args.data_dir or not args.json:
        p.error("--data-dir and --json are needed to run a sweep")
    candidates = [c.strip() for c in args.candidates.split(";") if c.strip()]
    for c in candidates:
        parse_candidate(c)
    sizes = [int(s) for s in args.sizes.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    path = Path(args.json)
    hw = describe_hardware(resolve_device("cpu"))
    doc = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {"runs": []}
    doc.setdefault("chunks", []).append(
        {
            "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "commit": _commit(),
            "argv": sys.argv[1:] if argv is None else list(argv),
            "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(),
            "hardware": hw,
        }
    )
    done = {(r["candidate"], r["precision"], r["train_rows"], r["seed"]) for r in doc["runs"]}
    print(f"{hardware_line(hw)}; torch {torch.__version__}, {torch.get_num_threads()} threads", flush=True)
    start = time.monotonic()
    for n in sizes:
        bert = prepare_bert(
            BertSetup(
                data_dir=args.data_dir,
                train_samples=n,
                eval_samples=None,
                epochs=args.epochs,
                batch_size=args.batch_size,
                lr=args.lr,
                device="cpu",
            )
        )
        for i, seed in enumerate(seeds):
            for candidate in rotated(candidates, i):
                if (candidate, resolve_precision(args.precision, resolve_device("cpu")).name, n, seed) in done:
                    continue
                if args.max_minutes is not None and time.monotonic() - start > 60 * args.max_minutes:
                    print(f"stopped after {args.max_minutes} minutes; run again to continue", flush=True)
                    write_json(path, doc)
                    return 0
                run = one_run(bert, candidate, args.precision, seed)
                doc["runs"].append(run)
                write_json(path, doc)
                print(
                    f"{n} rows seed {seed} {candidate}: accuracy {run['accuracy']:.4f}, "
                    f"{run['ms_per_step']:.0f} ms/step, {run['samples_per_s']:.1f} samples/s",
                    flush=True,
                )
    write_json(path, doc)
    print(tables(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
