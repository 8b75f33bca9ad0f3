"""``mixft`` / ``scripts/finetune.py``: parse -> check -> run. The logic lives in the library.

What a run prints on the way (header, progress bar, estimate, result lines) is ``cli/console.py``'s;
this module says only the one-line errors, once per launch, and turns outcomes into exit codes.
Every bad input ends with one line on stderr and exit code 2, before any work starts.

Exit codes: 0 done; 2 bad input (nothing written); 3 a run collapsed (results and the
last good checkpoint kept, diagnosis on stderr); 4 a file could not be written (disk
full, read-only, I/O error: the previous results.json and checkpoint kept); 130 / 143
stopped by SIGINT / SIGTERM (checkpoint saved: rerun with --resume); 5 another process of a torchrun
job is gone (the last checkpoint kept: rerun with --resume). See docs/reliability.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING

# Parsing and its one-line errors need no torch (seconds to load): `--help` and a mistyped option answer
# at once. What a run needs is imported once a run is asked (main(), _finish(), _leave_the_job()).
from mixft.amp.precision_names import PRECISION_NAMES
from mixft.atomic import WriteFailed
from mixft.cli.parser import OneLineParser, int_list, setup_logging
from mixft.config.run_config import RunConfig
from mixft.errors import UsageError
from mixft.options import SEED, add_arguments
from mixft.recipe import recipe_names
from mixft.runs.outdir import RESULTS_NAME, has_checkpoint

if TYPE_CHECKING:
    from mixft.cli.console import ConsoleObserver

PROG = "finetune.py"  # the name main(argv) gives itself when called from Python (tests, notebooks)
EXIT_USAGE = 2  # bad input: one line, before any work
EXIT_COLLAPSE = 3  # a run stopped because training collapsed (docs/reliability.md)
EXIT_WRITE_FAILED = 4  # results.json, report.md, a checkpoint or the model could not be written
EXIT_PEER_LOST = 5  # another process of a torchrun job is gone (docs/fsdp.md#more-than-one-machine)


def program_name() -> str:
    """What this process was started as, for its usage and error lines: ``mixft`` (the console script),
    ``finetune.py`` (``python scripts/finetune.py``, under torchrun too), ``python -m PKG`` (a module run with -m).

    Usage: ``build_parser(prog=program_name())``
    """
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name:  # python -m: argv[0] is the module's file, not what the user typed
        return f"python -m {spec.name.removesuffix('.__main__')}"
    name = os.path.basename(sys.argv[0]) if sys.argv else ""
    return name if name not in ("", "-c", "-") else PROG  # python -c / stdin: no name of its own


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The parser: every option but the precision and seed choices is generated from RunConfig."""
    p = OneLineParser(prog=prog, description="Fine-tune a recipe in FP32 or mixed precision and measure what AMP buys.")
    # Required, but a --config file may name it instead (main() checks that one of them does).
    p.add_argument(
        "--recipe", default=None, help=f"one of: {', '.join(recipe_names())} (required, here or in --config)"
    )
    p.add_argument(
        "--config",
        metavar="FILE",
        default=None,
        action=_Once,
        help="options from a YAML or JSON file (keys: RunConfig field names, e.g. max_train_samples); "
        "flags given here override it; every run writes OUTPUT_DIR/config.yaml (default: none)",
    )
    # RunConfig.precisions, spelled three ways.
    prec = p.add_mutually_exclusive_group()
    prec.add_argument(
        "--amp",
        action="store_true",
        help="automatic mixed precision: fp16 on CUDA; on a CPU bf16 where torch says it is native "
        "and it measures faster than fp32 (the probe: cached, else measured first, once), else fp32 with "
        "a notice (default off)",
    )
    prec.add_argument("--precision", choices=PRECISION_NAMES, help="one precision (default fp32)")
    prec.add_argument(
        "--compare",
        nargs="?",
        const="default",
        metavar="LIST",
        help="train each precision back to back, e.g. fp32,bf16 (without LIST: fp32 plus the device's AMP "
        "precisions) (default: off, one precision)",
    )
    # RunConfig.seeds, spelled two ways.
    seeds = p.add_mutually_exclusive_group()
    seeds.add_argument("--seed", type=SEED.parse, default=None, help="the run's seed (default 0)")
    seeds.add_argument(
        "--seeds",
        type=int_list,
        help="repeat each precision per seed, e.g. 0,1,2 (mean ± std) (default: one seed, --seed)",
    )
    add_arguments(p, fields(RunConfig))
    p.add_argument("--no-progress", action="store_true", help="no progress bar (default: a bar per run)")
    # Retired (mixft.config.file.RETIRED): it asked for torch's dropout masks, which every run now
    # draws; accepted so that older commands still run, and no longer listed.
    p.add_argument("--torch-dropout", action="store_true", help=argparse.SUPPRESS)
    return p


class _Once(argparse.Action):
    """A flag given once: a second ``--config`` would replace the first file, not add to it."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = f"_{self.dest}_given"  # not the value: a parse may start from a namespace of markers (given_fields)
        if getattr(namespace, given, False):
            parser.error(f"{option_string} can be given once (a second file would replace the first, not add to it)")
        setattr(namespace, given, True)
        setattr(namespace, self.dest, values)


def config_from_argv(argv: Sequence[str] | None, prog: str = PROG) -> tuple[argparse.Namespace, RunConfig]:
    """The parsed flags and the RunConfig they give, with ``--config FILE``'s values under them.

    Flags named on the command line win over the file; the file wins over the flags' defaults.
    Usage: ``args, cfg = config_from_argv(["--config", "out/config.yaml", "--epochs", "1"])``
    """
    parser = build_parser(prog)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    cli_cfg = config_from_args(args)
    if args.config is None:
        if args.recipe is None:
            raise UsageError("--recipe is required (or a --config file that names one)")
        return args, cli_cfg
    from mixft.config.file import given_fields, load_config_file, merge

    file_values = load_config_file(args.config)
    # RunConfig's own default recipe must not stand in for the user's: the file or the flag names one.
    if args.recipe is None and file_values.get("recipe") is None:
        raise UsageError(f"--recipe is required: neither the command line nor --config {args.config} names one")
    values = merge(file_values, cli_cfg.to_dict(), given_fields(parser, argv))
    if args.compare == "default":  # a bare --compare: the precisions of the device the run uses, the file's too
        values["precisions"] = _default_compare(values.get("device") or "auto")
    return args, RunConfig(**values)


def _default_compare(device: str) -> list[str]:
    """A bare ``--compare``: fp32 and every mixed precision ``device`` trains in."""
    from mixft.amp.precision import amp_precision_names, resolve_device  # torch: only once a run is asked

    return ["fp32", *amp_precision_names(resolve_device(device))]


def config_from_args(args: argparse.Namespace) -> RunConfig:
    if args.compare == "default":
        precisions = _default_compare(args.device)
    elif args.compare is not None:
        precisions = [name.strip().lower() for name in args.compare.split(",") if name.strip()]
    else:
        precisions = ["amp"] if args.amp else [args.precision or "fp32"]
    seeds = args.seeds if args.seeds is not None else [args.seed if args.seed is not None else 0]
    generated = {f.name: getattr(args, f.name) for f in fields(RunConfig) if f.metadata.get("cli")}
    recipe = {"recipe": args.recipe} if args.recipe is not None else {}  # a --config file may name it
    return RunConfig(**recipe, precisions=precisions, seeds=seeds, **generated)


def _launch_rank() -> int:
    """This process's rank under torchrun / accelerate launch (0 when alone), before or after it joins the group."""
    if "torch" in sys.modules:  # without torch loaded no process group exists yet: the launcher's variables say
        from mixft import distributed

        if distributed.is_distributed():
            return distributed.rank()
    if int(os.environ.get("WORLD_SIZE", "1") or 1) <= 1:
        return 0
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


# How long a process other than 0 waits, after an error, for the launcher to end it (see _fail).
PEER_WAIT_S = 10.0


def _what_a_failed_write_left(e: WriteFailed, out: Path | None) -> str:
    """What the output directory holds after a failed write, and the command that goes on from it: only what is
    there (was: "earlier results and the last good checkpoint are kept" where neither existed, or where the
    earlier run had been moved to previous-*/ and a --resume answered "no checkpoint")."""
    if out is None:
        return ""
    kept = []
    if e.earlier_run is not None:
        kept.append(f"the earlier run is in {e.earlier_run}")
    elif (out / RESULTS_NAME).is_file():
        kept.append(f"the earlier {RESULTS_NAME} is kept")
    if has_checkpoint(out):
        kept.append("the last good checkpoint is kept")
        then = f"once fixed, rerun the same command with --resume to continue from the last checkpoint in {out}"
    else:
        then = "once fixed, rerun the same command"
    return "".join(f"; {part}" for part in (*kept, then))


def _fail(line: str, code: int) -> int:
    """Say ``line`` (a one-line error) once per launch; returns ``code``, the exit code.

    Under torchrun every process runs main() and, the checks being the same, meets the same error:
    process 0 says it. The others say nothing and wait: the launcher ends them as soon as process 0
    exits (torchrun terminates the rest of a job once one process has failed). Exiting at once
    instead, one of them could be seen first and process 0 terminated before it said anything. A
    process still running after the wait met an error of its own (a file only its node lacks), and
    says it, naming its rank.
    """
    rank = _launch_rank()
    if rank == 0:
        print(line, file=sys.stderr, flush=True)
        return code
    try:
        time.sleep(PEER_WAIT_S)
    except KeyboardInterrupt:  # Ctrl-C reaches every process: the launcher is stopping them all
        return code
    print(f"[rank {rank}] {line}", file=sys.stderr, flush=True)
    return code


def _say_once(line: str) -> None:
    """A message every process of a launch has (a signal adopted by all of them): said by process 0 only."""
    if _launch_rank() == 0:
        print(line, file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``mixft`` and scripts/finetune.py. Returns the exit code (2 for bad input).

    ``argv`` None: this process's own command line, and its messages name the program as it was
    started (``mixft``, ``finetune.py``); a list (a call from Python): they name ``finetune.py``.
    """
    setup_logging()
    prog = program_name() if argv is None else PROG
    cfg = None
    try:
        args, cfg = config_from_argv(argv, prog)
        from mixft.callbacks.interrupt import SignalHandler
        from mixft.cli.console import ConsoleObserver, print_probe, quiet_library_progress
        from mixft.runs.probe import run_probe
        from mixft.runs.runner import run

        if cfg.probe:
            print_probe(cfg, run_probe(cfg))
            return 0
        if args.no_progress:
            quiet_library_progress()
        if cfg.num_workers:
            # Tokenizers warn in every forked DataLoader worker; mixft tokenises before forking.
            os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        # run() decides everything (make_plan()) before any work: bad input exits here.
        with SignalHandler() as signals:
            observer = ConsoleObserver(progress=not args.no_progress, signals=signals, several_seeds=len(cfg.seeds) > 1)
            results = run(cfg, observer)
    except UsageError as e:
        return _fail(f"{prog}: error: {e}", EXIT_USAGE)
    except WriteFailed as e:  # disk full, quota, read-only: a one-line cause, not a traceback
        out = Path(cfg.output_dir) if cfg is not None else None
        return _fail(f"{prog}: error: {e}{_what_a_failed_write_left(e, out)}", EXIT_WRITE_FAILED)
    except KeyboardInterrupt as e:  # a second Ctrl-C, or one outside training
        out = Path(cfg.output_dir) if cfg is not None else None
        if out is not None and has_checkpoint(out):
            _say_once(
                f"{prog}: interrupted; rerun the same command with --resume to continue from the last checkpoint "
                f"in {out}"
            )
        else:
            _say_once(f"{prog}: interrupted")
        return getattr(e, "exit_code", 130)
    except Exception as e:  # a process of the job gone (a node lost): one line; any other error is a bug
        from mixft.cli.peer_lost import peer_lost_line

        line = peer_lost_line(e, prog, Path(cfg.output_dir) if cfg is not None else None)
        if line is None:
            raise
        # Every surviving process meets it, process 0 perhaps not (its node may be the lost one):
        # each node's first process says it, at once.
        if os.environ.get("LOCAL_RANK", "0") == "0":
            print(line, file=sys.stderr, flush=True)
        return EXIT_PEER_LOST
    return _finish(prog, cfg, results, observer)


def _finish(prog: str, cfg: RunConfig, results, observer: ConsoleObserver) -> int:
    """The exit code of a run that returned: stopped by a signal, collapsed, or done (its last lines said)."""
    from mixft.callbacks.faults import is_collapse
    from mixft.cli.console import print_outputs, run_label
    from mixft.distributed import is_main_process

    signals = observer.signals
    if signals.signum is not None:
        saved = next((s.checkpoint for s in reversed(observer.stoppers) if s.checkpoint), None)
        where = f"checkpoint saved to {saved}" if saved else f"results so far in {cfg.output_dir}"
        _say_once(
            f"{prog}: interrupted ({signals.signal_name}); {where}; rerun the same command with --resume to continue"
        )
        return signals.exit_code
    collapsed = [run_label(r.precision, r.seed, observer.several_seeds) for r in results if is_collapse(r)]
    if collapsed:  # the diagnosis itself was logged above, when the run stopped
        # No barrier: a rank-local collapse (a NaN loss) may leave peers elsewhere (_fail waits for the launcher).
        return _fail(
            f"{prog}: training collapsed ({', '.join(collapsed)}): see the diagnosis above; results in "
            f"{cfg.output_dir}/{RESULTS_NAME}; any checkpoint from before the collapse is kept",
            EXIT_COLLAPSE,
        )
    if is_main_process():
        print_outputs(cfg, results)
    return _leave_the_job(prog, cfg)


def _leave_the_job(prog: str, cfg: RunConfig) -> int:
    """Leave the process group, whose barrier waits for every process: 0, or one line when a process is gone.

    A process lost after training (its node died while process 0 wrote the results) breaks that
    barrier: one line instead of a traceback. Process 0 wrote results.json before it got here, so its
    run stands; another process cannot tell whether process 0 did.
    """
    from mixft.distributed import is_main_process, lost_peer, shutdown

    try:
        shutdown()
    except Exception as e:
        words = lost_peer(e)
        if words is None:
            raise
        if is_main_process():
            print(
                f"{prog}: warning: another process of this run ended before the job did ({words}); "
                f"the results in {cfg.output_dir} are complete",
                file=sys.stderr,
                flush=True,
            )
            return 0
        if os.environ.get("LOCAL_RANK", "0") == "0":  # each node's first process, as for a peer lost mid-run
            print(
                f"{prog}: error: another process of this run is gone at its end ({words}); "
                f"{Path(cfg.output_dir) / RESULTS_NAME} is complete only if process 0 wrote it",
                file=sys.stderr,
                flush=True,
            )
        return EXIT_PEER_LOST
    return 0
