"""``scripts/benchmark.py``: what mixed precision buys on this device, measured side by side.

Runs, in one process: (a) the seed notebook's MLP benchmark in three modes, (b) bert-sst2
step time, fp32 vs the device's AMP precision; with ``--peers`` the same BERT fine-tune
in mixft, ``transformers.Trainer`` and ``accelerate``; with ``--scaling`` throughput vs
batch size and sequence length. Prints markdown tables; ``--out FILE.json`` keeps every
measurement (written atomically). Bad options end with one line on stderr, exit code 2.

Usage::

    python scripts/benchmark.py --small --peers --out outputs/bench.json
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mixft import __version__
from mixft.amp.hardware import describe_hardware, hardware_line
from mixft.amp.precision import DEVICE_CHOICES
from mixft.cli.parser import OneLineParser, non_negative_int, positive_int, setup_logging
from mixft.errors import UsageError

PROG = "benchmark.py"

# --small: sizes that finish in minutes on a 2-core CPU. Full: the seed's MLP and the recipe's budget.
SIZES = {
    "small": {
        "mlp": {"width": 1024, "batches": 10},
        "steps": 10,
        "warmup": 2,
        "peers": {"train_samples": 1000, "eval_samples": 500, "epochs": 1},
        "scaling": {"batch_sizes": [8, 16, 32], "max_lengths": [32, 64, 128], "steps": 4, "warmup": 1},
    },
    "full": {
        "mlp": {},
        "steps": 20,
        "warmup": 5,
        "peers": {"train_samples": 2000, "eval_samples": 872, "epochs": 2},
        "scaling": {"batch_sizes": [8, 16, 32, 64], "max_lengths": [32, 64, 128, 256], "steps": 6, "warmup": 2},
    },
}


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=PROG, description="Measure what mixed precision buys here (and mixft against its peers).")
    p.add_argument("--small", action="store_true", help="CPU-friendly sizes (minutes on 2 cores)")
    p.add_argument("--device", choices=list(DEVICE_CHOICES), default="auto")
    p.add_argument(
        "--steps", type=positive_int, help="timed optimizer steps per run (step time) or per grid point (scaling)"
    )
    p.add_argument("--warmup", type=non_negative_int, help="untimed steps before those")
    p.add_argument("--out", help="write every measurement to this JSON file (atomically)")
    p.add_argument("--peers", action="store_true", help="also: mixft vs transformers.Trainer vs accelerate")
    p.add_argument("--scaling", action="store_true", help="also: throughput vs batch size and sequence length")
    p.add_argument("--no-mlp", action="store_true", help="skip the MLP benchmark")
    p.add_argument("--no-steps", action="store_true", help="skip bert-sst2 step time")
    mlp = p.add_argument_group("MLP benchmark (default: the seed's 3 x Linear(4096), batch 512, 50 batches, 3 epochs)")
    mlp.add_argument("--width", type=positive_int, help="Linear width (scales the MLP down or up)")
    mlp.add_argument("--batches", type=positive_int, help="batches per epoch")
    mlp.add_argument("--mlp-batch-size", type=positive_int, help="samples per batch")
    mlp.add_argument("--mlp-epochs", type=positive_int, help="epochs")
    mlp.add_argument(
        "--peak-size",
        type=positive_int,
        help="n of the n x n matmul that measures the device peak (default 2048 CPU, 8192 CUDA)",
    )
    mlp.add_argument(
        "--include-cpu-fp16",
        action="store_true",
        help="run the fp16 + GradScaler mode on CPU too (emulated fp16: keep sizes tiny)",
    )
    bert = p.add_argument_group("BERT benchmarks")
    bert.add_argument("--model", default="bert-base-uncased", help="offline: the shipped MiniLM stands in")
    bert.add_argument("--batch-size", type=positive_int, default=32)
    bert.add_argument("--max-length", type=positive_int, default=128)
    bert.add_argument(
        "--data-dir",
        help="GLUE-layout directory of real text (train.tsv, dev.tsv); default: the "
        "recipe's (GLUE SST-2 if cached, else mixft's generated set)",
    )
    bert.add_argument("--lr", type=float, help="peak learning rate (default 2e-5, the classic BERT value)")
    bert.add_argument("--train-samples", type=positive_int, help="peers: training examples")
    bert.add_argument("--eval-samples", type=positive_int, help="peers: evaluation examples")
    bert.add_argument("--epochs", type=positive_int, help="peers: epochs")
    bert.add_argument("--max-steps", type=positive_int, help="peers: stop each run after this many steps")
    p.add_argument(
        "--rounds",
        type=positive_int,
        default=1,
        help="repeat every measurement (MLP, step time, peers) in a rotated order; report the median",
    )
    bert.add_argument(
        "--frameworks",
        default="mixft,hf-trainer,hf-trainer-random,hf-trainer-packed,accelerate",
        help="peers: which, comma-separated (hf-trainer: Trainer with group_by_length, its fastest "
        "here; hf-trainer-random: with its default random sampling; hf-trainer-packed: random batches "
        "packed as mixft packs them, one [CLS] per sentence read through the model's pooler and head)",
    )
    bert.add_argument(
        "--precisions",
        default="fp32,amp",
        help="step time and peers: precisions to compare (amp: the device's; default fp32,amp)",
    )
    bert.add_argument("--seed", type=int, default=0)
    bert.add_argument(
        "--seeds",
        help="peers: seeds, comma-separated (each framework trains once per seed and "
        "round; accuracy is reported as mean ± std over them); default: --seed",
    )
    p.add_argument(
        "--threads", type=positive_int, help="torch intra-op threads (default: torch's choice); recorded in the output"
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of scripts/benchmark.py. Returns the exit code (2 for bad input)."""
    setup_logging()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
        document = run(args, argv)
    except UsageError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    if args.out:
        print(f"measurements: {args.out}")
    return 0 if document else 1


def _check_out(path: str | None) -> None:
    if not path:
        return
    out = Path(path)
    if out.is_dir():
        raise UsageError(f"--out {path}: is a directory; give a file name, e.g. {out / 'bench.json'}")
    parent = out.parent if str(out.parent) else Path(".")
    if parent.exists() and not os.access(parent, os.W_OK):
        raise UsageError(f"--out {path}: directory {parent} is not writable")


def run(args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
    """Validate, measure, print tables; returns the JSON document (also written to --out)."""
    import torch

    from mixft.amp.precision import resolve_device, resolve_precision
    from mixft.atomic import write_json
    from mixft.train.measure import device_name

    from .bert import BertSetup
    from .peers import check_frameworks

    _check_out(args.out)
    frameworks = check_frameworks(args.frameworks)
    seeds = _check_seeds(args.seeds) if args.seeds else None
    if args.data_dir is not None and not all((Path(args.data_dir) / f).is_file() for f in ("train.tsv", "dev.tsv")):
        raise UsageError(f"--data-dir {args.data_dir}: needs train.tsv and dev.tsv (GLUE layout)")
    if args.lr is not None and not (args.lr > 0 and args.lr < float("inf")):
        raise UsageError(f"--lr must be a positive finite number, got {args.lr}")
    dev = resolve_device(args.device)
    # Every precision is validated for this device now, not after the MLP has run.
    precisions = list(
        dict.fromkeys(resolve_precision(_amp(name, dev), dev).name for name in _check_precisions(args.precisions))
    )
    if args.threads:
        torch.set_num_threads(args.threads)
    size = SIZES["small" if args.small else "full"]
    steps = args.steps or size["steps"]
    warmup = size["warmup"] if args.warmup is None else args.warmup
    command = "python scripts/benchmark.py " + " ".join(shlex.quote(a) for a in argv)
    doc: dict[str, Any] = {
        "mixft_version": __version__,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": command.strip(),
        "device": str(dev),
        "device_name": device_name(dev),
        # Which CPU flags (amx_bf16, avx512_bf16, avx512_fp16) or GPU produced these figures:
        # a ratio from one machine is not a fact about another.
        "hardware": describe_hardware(dev),
        "torch_version": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "load_avg_at_start": _load_avg(),
        "small": args.small,
    }
    print(
        f"mixft benchmark on {hardware_line(doc['hardware'])} [{dev}], torch {torch.__version__}, "
        f"{doc['torch_threads']} intra-op threads, load average {_fmt_load(doc['load_avg_at_start'])}"
    )
    print(f"command: {doc['command']}\n", flush=True)

    def save() -> None:
        if args.out:
            write_json(args.out, doc)  # after every section: a crash later keeps what was measured

    if not args.no_mlp:
        from .mlp import MLPSizes, mlp_table, run_mlp_benchmark

        sizes = MLPSizes(**size["mlp"])
        for field_name, value in (
            ("width", args.width),
            ("batches", args.batches),
            ("batch_size", args.mlp_batch_size),
            ("epochs", args.mlp_epochs),
        ):
            if value is not None:
                setattr(sizes, field_name, value)
        report = run_mlp_benchmark(
            sizes,
            device=dev,
            include_cpu_fp16=args.include_cpu_fp16,
            peak_n=args.peak_size,
            seed=args.seed,
            rounds=args.rounds,
        )
        doc["mlp"] = report.to_dict()
        print("## (a) MLP benchmark (the seed notebook's workload)\n")
        print(mlp_table(report) + "\n", flush=True)
        save()

    setup = BertSetup(
        model=args.model,
        batch_size=args.batch_size,
        max_length=args.max_length,
        seed=args.seed,
        device=str(dev),
        data_dir=args.data_dir,
        **({"lr": args.lr} if args.lr is not None else {}),
    )
    if not args.no_steps:
        from .steps import run_step_benchmark, steps_table

        report = run_step_benchmark(
            setup, steps=steps, warmup=warmup, rounds=args.rounds, precisions=precisions, peak_n=args.peak_size
        )
        doc["steps"] = report.to_dict()
        print("## (b) bert-sst2 step time, fp32 vs AMP\n")
        print(steps_table(report) + "\n", flush=True)
        save()

    if args.peers:
        from .peers import PeersConfig, peers_table, run_peers

        p = dict(size["peers"])
        for key, value in (
            ("train_samples", args.train_samples),
            ("eval_samples", args.eval_samples),
            ("epochs", args.epochs),
        ):
            if value is not None:
                p[key] = value
        peer_setup = BertSetup(**{**setup.__dict__, **p})
        report = run_peers(
            PeersConfig(
                setup=peer_setup,
                frameworks=frameworks,
                max_steps=args.max_steps,
                precisions=precisions,
                rounds=args.rounds,
                seeds=seeds,
            )
        )
        doc["peers"] = report.to_dict()
        print("## mixft vs transformers.Trainer vs accelerate\n")
        print(peers_table(report) + "\n", flush=True)
        save()

    if args.scaling:
        from .scaling import ScalingConfig, run_scaling, scaling_tables

        s = size["scaling"]
        report = run_scaling(
            ScalingConfig(
                setup=setup,
                batch_sizes=s["batch_sizes"],
                max_lengths=s["max_lengths"],
                steps=args.steps or s["steps"],
                warmup=s["warmup"] if args.warmup is None else args.warmup,
            )
        )
        doc["scaling"] = report.to_dict()
        print("## Scaling\n")
        print(scaling_tables(report) + "\n", flush=True)
        save()

    doc["load_avg_at_end"] = _load_avg()
    print(f"load average at the end: {_fmt_load(doc['load_avg_at_end'])}")
    save()
    return doc


def _check_seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        seeds = []
    if not seeds or len(set(seeds)) != len(seeds):
        raise UsageError(f"--seeds must list distinct integers, e.g. 0,1,2, got {text!r}")
    return seeds


def _check_precisions(text: str) -> list[str]:
    from mixft.amp.precision import PRECISIONS

    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    if not names or any(n not in (*PRECISIONS, "amp") for n in names):
        raise UsageError(f"--precisions must list some of {', '.join((*PRECISIONS, 'amp'))}, got {text!r}")
    return list(dict.fromkeys(names))


def _amp(name: str, dev) -> str:
    from mixft.amp.precision import amp_precision_names

    return amp_precision_names(dev)[0] if name == "amp" else name


def _load_avg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _fmt_load(load: list[float] | None) -> str:
    return "n/a" if load is None else f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1/5/15 min)"
