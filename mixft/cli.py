"""``scripts/finetune.py``: parse -> validate -> run. The logic lives in the library.

Every bad input ends with one line on stderr and exit code 2, before any work starts.

Exit codes: 0 done; 2 bad input (nothing written); 3 a run collapsed (results and the
last good checkpoint kept, diagnosis on stderr); 130 / 143 stopped by SIGINT / SIGTERM
(checkpoint saved: rerun with --resume). See docs/reliability.md.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from .cliargs import (
    OneLineParser,
    setup_logging,
    int_list,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
    probability,
)
from .config import RunConfig
from .distributed import is_main_process, shutdown
from .errors import UsageError
from .faults import is_collapse
from .interrupt import SignalHandler, StopOnSignal
from .precision import DEVICE_CHOICES, PRECISIONS, amp_precision_names, resolve_device
from .registry import RECIPES
from .trainer import Callback, StepInfo

PROG = "finetune.py"
EXIT_COLLAPSE = 3  # a run stopped because training collapsed (docs/reliability.md)


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=PROG, description="Fine-tune a recipe in FP32 or mixed precision and measure what AMP buys.")
    p.add_argument("--recipe", required=True, help=f"one of: {', '.join(sorted(RECIPES))}")
    prec = p.add_mutually_exclusive_group()
    prec.add_argument("--amp", action="store_true", help="the device's best mixed precision (fp16 on CUDA, bf16 on CPU)")
    prec.add_argument("--precision", choices=list(PRECISIONS), help="one precision (default fp32)")
    prec.add_argument(
        "--compare", nargs="?", const="default", metavar="LIST",
        help="train each precision back to back, e.g. fp32,bf16 (default: fp32 plus the device's AMP precisions)",
    )
    p.add_argument("--model", help="model name or path (default: the recipe's, offline-first)")
    p.add_argument("--data-dir", help="directory with GLUE-layout train.tsv and dev.tsv")
    p.add_argument("--max-train-samples", type=positive_int)
    p.add_argument("--max-eval-samples", type=positive_int)
    p.add_argument("--epochs", type=positive_int)
    p.add_argument("--max-steps", type=positive_int, help="optimizer steps; stops the run early")
    p.add_argument("--batch-size", type=positive_int, help="micro-batch size")
    p.add_argument("--lr", type=positive_float)
    p.add_argument("--max-grad-norm", type=non_negative_float, help="clip the unscaled gradient norm (0: off)")
    p.add_argument("--grad-accum", type=positive_int, default=1, help="micro-batches per optimizer step")
    p.add_argument("--max-length", type=positive_int, help="tokens per sentence (longer ones are truncated)")
    seeds = p.add_mutually_exclusive_group()
    seeds.add_argument("--seed", type=int, default=None)
    seeds.add_argument("--seeds", type=int_list, help="repeat each precision per seed, e.g. 0,1,2 (mean ± std)")
    p.add_argument("--device", choices=list(DEVICE_CHOICES), default="auto")
    p.add_argument("--output-dir", default="outputs/run")
    p.add_argument("--resume", action="store_true", help="continue from OUTPUT_DIR's checkpoint")
    p.add_argument("--save-model", action="store_true", help="save the fine-tuned model under OUTPUT_DIR")
    p.add_argument("--eval-only", action="store_true",
                   help="no training: evaluate --model (e.g. a --save-model directory) at each precision")
    rel = p.add_argument_group("reliability (docs/reliability.md)")
    rel.add_argument("--checkpoint-every", type=non_negative_int, default=20, metavar="N",
                     help="save OUTPUT_DIR/checkpoint.pt every N optimizer steps and at epoch ends (0: epoch ends only)")
    rel.add_argument("--inject-nonfinite", type=probability, default=0.0, metavar="RATE",
                     help="diagnostic: put an inf into one gradient element at this fraction of optimizer steps")
    rel.add_argument("--no-collapse-check", action="store_true",
                     help="do not stop (exit code 3) when the loss scale, skipped steps or loss show a collapse")
    rel.add_argument("--min-loss-scale", type=non_negative_float, default=1.0, metavar="F",
                     help="collapse when the fp16 loss scale falls below F (default 1)")
    rel.add_argument("--max-consecutive-skips", type=positive_int, default=10, metavar="N",
                     help="collapse after N skipped optimizer steps in a row (default 10)")
    p.add_argument("--num-workers", type=int, default=0, help="DataLoader worker processes")
    speed = p.add_argument_group("speed (mixft.speed; what each buys: scripts/benchmark.py --ablation)")
    speed.add_argument("--compile", action="store_true",
                       help="torch.compile the model for training (slower on small CPUs: measure first)")
    speed.add_argument("--no-speedups", action="store_true",
                       help="torch's own kernels and the textbook clip: check a result against the plain loop")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def config_from_args(args: argparse.Namespace) -> RunConfig:
    if args.compare is not None:
        if args.compare == "default":
            device = resolve_device(args.device)
            precisions = ["fp32", *amp_precision_names(device)]
        else:
            precisions = [name.strip().lower() for name in args.compare.split(",") if name.strip()]
            unknown = [name for name in precisions if name not in PRECISIONS]
            if unknown:
                raise UsageError(f"--compare: unknown precision {unknown[0]!r}; choose from {', '.join(PRECISIONS)}")
    elif args.amp:
        precisions = ["amp"]
    else:
        precisions = [args.precision or "fp32"]
    seeds = args.seeds if args.seeds is not None else [args.seed if args.seed is not None else 0]
    return RunConfig(
        recipe=args.recipe,
        precisions=precisions,
        seeds=seeds,
        model=args.model,
        data_dir=args.data_dir,
        max_train_samples=args.max_train_samples,
        max_eval_samples=args.max_eval_samples,
        epochs=args.epochs,
        max_steps=args.max_steps,
        batch_size=args.batch_size,
        lr=args.lr,
        max_grad_norm=args.max_grad_norm,
        grad_accum=args.grad_accum,
        max_length=args.max_length,
        device=args.device,
        output_dir=args.output_dir,
        resume=args.resume,
        save_model=args.save_model,
        eval_only=args.eval_only,
        checkpoint_every=args.checkpoint_every,
        inject_nonfinite=args.inject_nonfinite,
        detect_collapse=not args.no_collapse_check,
        min_loss_scale=args.min_loss_scale,
        max_consecutive_skips=args.max_consecutive_skips,
        num_workers=args.num_workers,
        compile=args.compile,
        speedups=not args.no_speedups,
    )


class ProgressBar(Callback):
    """A tqdm bar per run; the loss is read (a host sync) only every ``every`` steps."""

    def __init__(self, label: str, every: int = 10, enabled: bool = True):
        self.label, self.every, self.enabled = label, every, enabled
        self.bar = None

    def on_train_begin(self, trainer) -> None:
        if self.enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=trainer.total_steps, initial=trainer.state.step, desc=self.label, unit="step", file=sys.stderr, dynamic_ncols=True)

    def on_step_end(self, trainer, info: StepInfo) -> None:
        if self.bar is None:
            return
        self.bar.update(1)
        if info.step % self.every == 0:
            postfix = {"loss": f"{info.loss.item():.4f}", "lr": f"{info.lr:.2e}"}
            if info.loss_scale is not None:
                postfix["scale"] = f"{info.loss_scale:g}"
            self.bar.set_postfix(postfix)

    def on_train_end(self, trainer, result) -> None:
        if self.bar is not None:
            self.bar.close()


def print_plan(cfg: RunConfig, device, precisions, prepared_info: dict) -> None:
    effective = cfg.batch_size * cfg.grad_accum
    print("mixft run")
    print(f"  recipe     {cfg.recipe}")
    print(f"  model      {prepared_info.get('model', cfg.model)}")
    print(f"  data       {prepared_info.get('dataset', cfg.data_dir)}")
    print(f"  device     {device}")
    print(f"  precision  {', '.join(p.name for p in precisions)}" + (f"  (seeds {cfg.seeds})" if len(cfg.seeds) > 1 else ""))
    print(f"  batch      {cfg.batch_size} x {cfg.grad_accum} accumulation = {effective} effective")
    budget = f"{cfg.epochs} epoch(s)" + (f", at most {cfg.max_steps} optimizer steps" if cfg.max_steps else "")
    print(f"  budget     {budget}, lr {cfg.lr:g}, max grad norm {cfg.max_grad_norm:g}")
    print(f"  output     {cfg.output_dir}/results.json", flush=True)


def print_result(result) -> None:
    """One line per run: the figures a user came for."""
    mem = result.peak_memory_bytes
    mem_s = f"{mem / 2**20:.0f} MiB ({'RSS' if result.peak_memory_kind == 'cpu_rss' else 'allocated'})" if mem else "n/a"
    if "accuracy" in result.eval:
        quality = f"accuracy {result.eval['accuracy']:.4f}"
    elif "loss" in result.eval:
        quality = f"eval loss {result.eval['loss']:.4f}"
    else:
        quality = "not evaluated"  # stopped before the first evaluation
    scale = f", final loss scale {result.final_loss_scale:g}" if result.final_loss_scale is not None else ""
    print(
        f"[{result.precision}] {quality} | {result.train_samples_per_s:.1f} samples/s | "
        f"train {result.train_time_s:.1f} s | peak memory {mem_s} | steps {result.steps}, "
        f"skipped {result.skipped_steps}{scale}",
        flush=True,
    )


class ConsoleObserver:
    """Prints the run summary, a progress bar per run, and one result line per run."""

    def __init__(self, progress: bool = True, signals: SignalHandler | None = None):
        self.signals = signals  # Ctrl-C / SIGTERM: stop at the next step, save, exit 130 / 143
        self.stoppers: list[StopOnSignal] = []
        self.show_progress = progress
        self.n_seeds = 1

    @property
    def main(self) -> bool:
        # Asked when needed, not at construction: run() joins the process group first.
        from .distributed import is_main_process

        return is_main_process()  # under data parallelism only rank 0 talks

    @property
    def progress(self) -> bool:
        return self.show_progress and self.main

    def on_plan(self, cfg, device, precisions, run_info) -> None:
        self.n_seeds = len(cfg.seeds)
        if self.main:
            from .distributed import world_size

            print_plan(cfg, device, precisions, run_info)
            if world_size() > 1:
                print(f"  parallel   {world_size()} processes (DistributedDataParallel), "
                      f"global batch {cfg.batch_size * cfg.grad_accum * world_size()}", flush=True)

    def callbacks(self, precision, seed):
        label = precision.name + (f" seed {seed}" if self.n_seeds > 1 else "")
        callbacks = [ProgressBar(label, enabled=self.progress)] + ([_ResultPrinter()] if self.main else [])
        if self.signals is not None:
            self.stoppers.append(StopOnSignal(self.signals))
            callbacks.append(self.stoppers[-1])
        return callbacks

    def stop_requested(self) -> bool:
        return self.signals is not None and self.signals.signum is not None


class _ResultPrinter(Callback):
    def on_train_end(self, trainer, result) -> None:
        print_result(result)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of scripts/finetune.py. Returns the exit code (2 for bad input)."""
    setup_logging()
    cfg = None
    try:
        args = build_parser().parse_args(argv)
        cfg = config_from_args(args)
        from .runner import run

        # run() makes every cheap check (plan()) before any work: bad input exits here.
        with SignalHandler() as signals:
            observer = ConsoleObserver(progress=not args.no_progress, signals=signals)
            results = run(cfg, observer)
    except UsageError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:  # a second Ctrl-C, or one outside training
        out = Path(cfg.output_dir) if cfg is not None else None
        if out is not None and any(out.glob("checkpoint*.pt")):
            print(f"{PROG}: interrupted; rerun the same command with --resume to continue from the last checkpoint "
                  f"in {out}", file=sys.stderr)
        else:
            print(f"{PROG}: interrupted", file=sys.stderr)
        return getattr(e, "exit_code", 130)
    if signals.signum is not None:
        saved = next((s.checkpoint for s in reversed(observer.stoppers) if s.checkpoint), None)
        where = f"checkpoint saved to {saved}" if saved else f"results so far in {cfg.output_dir}"
        print(f"{PROG}: interrupted ({signals.signal_name}); {where}; rerun the same command with --resume to continue",
              file=sys.stderr)
        return signals.exit_code
    collapsed = [r.precision + (f" seed {r.seed}" if len(cfg.seeds) > 1 else "")
                 for r in results if is_collapse(r.stopped_early)]
    if collapsed:  # the diagnosis itself was logged above, when the run stopped
        print(f"{PROG}: training collapsed ({', '.join(collapsed)}): see the diagnosis above; results in "
              f"{cfg.output_dir}/results.json; any checkpoint from before the collapse is kept", file=sys.stderr)
        return EXIT_COLLAPSE  # no barrier: a rank-local collapse (a NaN loss) may leave peers elsewhere
    if is_main_process():
        if len(results) > 1:
            print(f"comparison report: {cfg.output_dir}/report.md")
        print(f"results: {cfg.output_dir}/results.json")
    shutdown()
    return 0
