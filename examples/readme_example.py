#!/usr/bin/env python
"""The README example, corrected and measured: its FP32 loop and its AMP loop, side by side.

The README shows a BERT classifier and two training loops, single and mixed precision.
As written it does not run (three bugs, :data:`BUGS`), and once they are fixed the
mixed-precision loop meets the autocast trap (:data:`AUTOCAST_TRAP`): sigmoid + ``BCELoss``.
This module keeps the two loops as real functions (:func:`single_precision_loop`,
:func:`mixed_precision_loop`), corrected and otherwise as the README has them; the diff
the script prints is taken from their source, so it is exactly the code that runs.

Usage::

    python examples/readme_example.py                 # offline defaults, minutes on a laptop CPU
    python examples/readme_example.py --model bert-base-uncased --data-dir glue/SST-2 --epochs 5

(``scripts/readme_example.py`` is the same entry point) or in Python, from the repository root::

    from examples.readme_example import ExampleConfig, prepare, run_comparison
    fp32, amp = run_comparison(prepare(ExampleConfig(max_train_samples=200)))

This file is the script (options, output); its parts are in ``examples/readme/`` (bugs,
autocast trap, loops, setup, comparison), and their public names are importable from here.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

# Run as a script, this file's folder is first on sys.path, not the repository root its parts live under.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from examples.readme.autocast_trap import (  # noqa: E402
    AUTOCAST_TRAP,
    TrapDemo,
    cuda_autocast_bce_verdict,
    demonstrate_bce_trap,
    format_trap,
)
from examples.readme.bugs import (  # noqa: E402
    BUGS,
    README_MODEL_CODE,
    Bug,
    BugReport,
    ReadmeModelAsWritten,
    TupleOutputs,
    format_bugs,
    reproduce_readme_bugs,
)
from examples.readme.comparison import RecordingLoss, evaluate, run_comparison, run_loop, side_by_side  # noqa: E402
from examples.readme.loops import loop_diff, mixed_precision_loop, single_precision_loop  # noqa: E402
from examples.readme.setup import README_EPOCHS, README_LR, ExampleConfig, Prepared, prepare  # noqa: E402
from mixft.errors import UsageError  # noqa: E402
from mixft.train.measure import device_name  # noqa: E402

__all__ = [
    "AUTOCAST_TRAP",
    "BUGS",
    "README_MODEL_CODE",
    "Bug",
    "BugReport",
    "ExampleConfig",
    "Prepared",
    "ReadmeModelAsWritten",
    "RecordingLoss",
    "TrapDemo",
    "TupleOutputs",
    "cuda_autocast_bce_verdict",
    "demonstrate_bce_trap",
    "evaluate",
    "format_bugs",
    "format_trap",
    "loop_diff",
    "main",
    "mixed_precision_loop",
    "prepare",
    "reproduce_readme_bugs",
    "run_comparison",
    "run_loop",
    "side_by_side",
    "single_precision_loop",
]

PROG = "readme_example.py"


def build_parser() -> argparse.ArgumentParser:
    from mixft.cli.parser import (
        OneLineParser as _Parser,
    )
    from mixft.cli.parser import (
        positive_float as _positive_float,
    )
    from mixft.cli.parser import (
        positive_int as _positive_int,
    )

    d = ExampleConfig()
    p = _Parser(
        prog=PROG,
        description="The README's BERT example, corrected, trained with its FP32 loop and its AMP loop side by side.",
    )
    p.add_argument("--model", default=d.model, help="model name or path (default: %(default)s, offline-first)")
    p.add_argument("--data-dir", help="directory with GLUE-layout train.tsv and dev.tsv (default: SST-2 or generated)")
    p.add_argument("--max-train-samples", type=_positive_int, default=d.max_train_samples)
    p.add_argument("--max-eval-samples", type=_positive_int, default=d.max_eval_samples)
    p.add_argument(
        "--epochs",
        type=_positive_int,
        default=d.epochs,
        help=f"default %(default)s; the README says {README_EPOCHS}, which takes five times as long",
    )
    p.add_argument("--batch-size", type=_positive_int, default=d.batch_size)
    p.add_argument(
        "--lr",
        type=_positive_float,
        default=d.lr,
        help=f"default %(default)g; the README's {README_LR:g} barely moves in the default budget",
    )
    p.add_argument("--max-length", type=_positive_int, default=d.max_length)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default=d.device)
    p.add_argument(
        "--amp",
        choices=["auto", "fp16", "bf16"],
        default=d.amp,
        help="the mixed precision (auto: fp16 on CUDA, bf16 on CPU)",
    )
    p.add_argument("--output-dir", help="also write results.json and report.md (with charts) here")
    return p


def config_from_args(args: argparse.Namespace) -> ExampleConfig:
    return ExampleConfig(
        model=args.model,
        data_dir=args.data_dir,
        max_train_samples=args.max_train_samples,
        max_eval_samples=args.max_eval_samples,
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        max_length=args.max_length,
        seed=args.seed,
        device=args.device,
        amp=args.amp,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of examples/readme_example.py (and scripts/readme_example.py). Returns the exit code (2 for bad input)."""
    try:
        args = build_parser().parse_args(argv)
        cfg = config_from_args(args).validate()
        if args.output_dir:
            from mixft.report.summary import CHART_TITLES
            from mixft.runs.outdir import REPORT_NAME, RESULTS_NAME, check_output_dir

            check_output_dir(Path(args.output_dir), files=[RESULTS_NAME, REPORT_NAME, *CHART_TITLES])
        prepared = prepare(cfg)  # model, data, device, precisions: every check before any work
    except UsageError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    for notice in prepared.notices:
        print(notice, file=sys.stderr)

    say = lambda *lines: print(*lines, sep="\n", flush=True)  # noqa: E731
    say("# The README example, corrected", "")
    say(
        "## Three bugs in the README code (run here on the resolved encoder)",
        format_bugs(reproduce_readme_bugs(prepared.encoder)),
        "",
    )
    say("## The autocast trap", AUTOCAST_TRAP, "")
    device = prepared.device
    traps = ["fp16"] + (["bf16"] if device.type == "cpu" else [])
    for name in traps:
        say(format_trap(demonstrate_bce_trap(device, name)), "")
    say("## The two loops that run below (unified diff)", loop_diff(), "")

    cfg = prepared.cfg
    budget = f"{cfg.epochs} epoch(s)" + (f" (README: {README_EPOCHS})" if cfg.epochs != README_EPOCHS else "")
    budget += f", batch {cfg.batch_size}, AdamW lr {cfg.lr:g}" + (
        f" (README: {README_LR:g})" if cfg.lr != README_LR else ""
    )
    say(
        "## FP32 vs AMP",
        f"model   {prepared.model_description}",
        f"data    {prepared.dataset_description}",
        f"device  {device_name(device)}",
        f"budget  {budget}, seed {cfg.seed}",
    )
    if cfg.epochs != README_EPOCHS or cfg.lr != README_LR:
        say(
            f"        a smaller budget than the README's, to finish in minutes on a CPU; "
            f"--epochs {README_EPOCHS} --lr {README_LR:g} for the README's"
        )
    try:
        fp32, amp = run_comparison(prepared, on_start=lambda p: say(f"training {p.name} ..."))
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    say("", side_by_side(fp32, amp), "")
    if device.type == "cpu":
        say(
            "Peak memory on CPU is the process's RSS (Python, libraries and data included), and the "
            "AMP run follows the fp32 run in the same process: read it as an upper bound, not tensor memory."
        )
    if args.output_dir:
        from mixft.report.markdown import write_report
        from mixft.report.plots import write_plots
        from mixft.results import results_document, write_results
        from mixft.runs.outdir import REPORT_NAME, RESULTS_NAME

        out = Path(args.output_dir)
        write_results(out / RESULTS_NAME, [fp32, amp])
        write_report(results_document([fp32, amp]), out, charts=write_plots)
        say(f"results: {out / RESULTS_NAME}", f"report:  {out / REPORT_NAME}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
