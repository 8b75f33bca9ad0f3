"""Everything a run prints to the terminal: the header, the progress bar, the estimate, the result lines.

``cli/main.py`` parses, checks and runs; what reaches stdout on the way is said here (the one-line errors
and exit codes stay with main). The library prints nothing: it logs, and calls ``ConsoleObserver``.

Usage: ``run(cfg, ConsoleObserver(progress=True, signals=signals))``
"""

from __future__ import annotations

import os
import sys
import time

from mixft.callbacks.interrupt import SignalHandler, StopOnSignal
from mixft.config.run_config import RunConfig
from mixft.distributed import world_size
from mixft.metrics.task import UNDEFINED_KEY
from mixft.report.summary import is_eval_only
from mixft.runs.outdir import PROBE_REPORT_NAME, PROBE_RESULTS_NAME, REPORT_NAME, RESULTS_NAME, checkpoint_name
from mixft.train.hooks import Callback, StepInfo


class ProgressBar(Callback):
    """A tqdm bar per run; the loss is read (a host sync) only every ``every`` steps."""

    def __init__(self, label: str, every: int = 10, enabled: bool = True):
        self.label, self.every, self.enabled = label, every, enabled
        self.bar = None

    def on_train_begin(self, trainer) -> None:
        if self.enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(
                total=trainer.total_steps,
                initial=trainer.state.step,
                desc=self.label,
                unit="step",
                file=sys.stderr,
                dynamic_ncols=True,
            )

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


class DurationEstimate(Callback):
    """Prints, once the first steps are timed, how long the run will take.

    The first step is left out of the rate (it pays for lazy initialisation); the
    estimate is the measured seconds per step times the steps planned.
    """

    def __init__(self, label: str, warmup: int = 1, timed: int = 4):
        self.label, self.warmup, self.timed = label, warmup, timed
        self._t0: float | None = None
        self._first_step = 0
        self.done = False

    def on_train_begin(self, trainer) -> None:
        self._first_step = trainer.state.step  # a resumed run counts from where it is

    def on_step_end(self, trainer, info: StepInfo) -> None:
        if self.done or trainer.total_steps is None:
            return
        taken = info.step - self._first_step
        if taken == self.warmup:
            self._t0 = time.perf_counter()
        elif taken == self.warmup + self.timed and self._t0 is not None:
            per_step = (time.perf_counter() - self._t0) / self.timed
            left = max(trainer.total_steps - info.step, 0)
            say(
                f"  estimate   [{self.label}] {per_step:.2f} s/step: ~{_duration(per_step * trainer.total_steps)} "
                f"for {trainer.total_steps} steps, ~{_duration(per_step * left)} to go (training only)"
            )
            self.done = True


def say(*parts, flush: bool = True) -> None:
    """print() to stdout, where a closed pipe (``finetune.py ... | head -1``) is not an error.

    Training goes on and results.json is written; only the terminal output is dropped.
    """
    try:
        print(*parts, flush=flush)
    except BrokenPipeError:
        # Python's documented fix: point stdout at devnull so the exit-time flush is quiet.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def batch_text(batch_size: int, grad_accum: int, train_rows: int | None, processes: int = 1) -> str:
    """The header's batch arithmetic, true to the data: ``"4 x 2 accumulation = 8 effective"``.

    An optimizer step cannot see more examples than the training data holds (an epoch's
    last window is a step of its own): when the batch asked for is larger, say what each
    step really sees, ``"1000 x 8 accumulation = 8000 asked, but the training data has 16
    rows: each optimizer step sees all 16 (one step per epoch)"``.
    """
    effective = batch_size * grad_accum
    text = f"{batch_size} x {grad_accum} accumulation = {effective} effective"
    if train_rows is None or effective * processes <= train_rows:
        return text
    asked = f"{effective * processes} asked across {processes} processes" if processes > 1 else f"{effective} asked"
    return (
        f"{batch_size} x {grad_accum} accumulation = {asked}, but the training data has {train_rows} "
        f"row{'s' if train_rows != 1 else ''}: each optimizer step sees all {train_rows} (one step per epoch)"
    )


def batch_order_text(cfg: RunConfig, shapes: str | None = None) -> str:
    """Which sentences share a batch, and whether its padding is computed: ``"; random, packed (no padding)"``.

    ``cfg``: the run's, after the recipe settled packing for the model (``Prepared.settled``).
    ``shapes``: the first run's ``run_info["batch_shapes"]`` (``"ladder"``: shapes rounded up, some padding).
    """
    order = f"length-grouped ({cfg.length_group_size} batches per group)" if cfg.group_by_length else "random"
    if shapes == "ladder":
        how = "packed, rows and row length" if cfg.pack_sequences else "padded, length"
        return f"; {order}, {how} rounded up a ladder (--batch-shapes {cfg.batch_shapes})"
    if cfg.pack_sequences:
        return f"; {order}, packed (no padding computed)"
    if cfg.pack_sequences is False:  # a recipe that packs, not packing this run: say so
        return f"; {order}, padded"
    return f"; {order}" if cfg.group_by_length else ""


def print_plan(cfg: RunConfig, device, precisions, run_info: dict, steps: int | None, hardware: dict) -> None:
    from mixft.amp.hardware import hardware_line, native_line
    from mixft.report.probe_result import CacheProblem, ProbeResult, probe_line

    say("mixft run")
    say(f"  recipe     {cfg.recipe}")
    say(f"  model      {run_info.get('model', cfg.model)}")
    say(f"  data       {run_info.get('dataset', cfg.data_dir)}")
    if run_info.get("task"):
        say(f"  task       {run_info['task']}")
    if run_info.get("parameters"):
        params, lora = run_info["parameters"], run_info.get("lora")
        how = (
            (
                f" (LoRA r={lora['r']}, alpha {lora['alpha']:g}, dropout {lora['dropout']:g} on "
                f"{', '.join(lora['target_modules'])}; the head in full)"
            )
            if lora
            else ""
        )
        say(f"  params     {params['trainable']:,} trainable / {params['total']:,} total{how}")
    say(f"  device     {device}: {hardware_line(hardware)}")
    if "native" in hardware:  # torch's own check: is there a hardware path for bf16/fp16 here
        say(f"  native     {native_line(hardware['native'])}")
    if hardware.get("probe"):
        say(f"  speed      {probe_line(ProbeResult.from_dict(hardware['probe']))}")
    elif hardware.get("probe_cache_problem"):  # a cached probe is there but unreadable: not "not probed"
        say(f"  speed      {CacheProblem.from_dict(hardware['probe_cache_problem']).line()}")
    else:
        say("  speed      not probed on this machine yet (--probe measures it in under a minute)")
    chosen = " (--amp)" if list(cfg.precisions) == ["amp"] else ""  # why: the notice above and results.json
    say(
        f"  precision  {', '.join(p.name for p in precisions)}{chosen}"
        + (f"  (seeds {cfg.seeds})" if len(cfg.seeds) > 1 else "")
    )
    if cfg.eval_only:  # nothing trains: no batch arithmetic or budget to announce
        say(f"  evaluate   --eval-only: no training; evaluation batches of {cfg.batch_size * 2}")
        say(f"  output     {cfg.output_dir}/{RESULTS_NAME}")
        return
    batch = batch_text(cfg.batch_size, cfg.grad_accum, run_info.get("train_rows"), world_size())
    say(f"  batch      {batch}{batch_order_text(cfg, run_info.get('batch_shapes'))}")
    budget = f"{cfg.epochs} epoch(s)" + (f", at most {cfg.max_steps} optimizer steps" if cfg.max_steps else "")
    steps_text = f"{steps} optimizer steps per run" if steps is not None else "optimizer steps unknown (unsized data)"
    say(f"  budget     {budget} = {steps_text}, lr {cfg.lr:g}, max grad norm {cfg.max_grad_norm:g}")
    warmup = (
        f"{cfg.warmup_steps} warm-up steps"
        if cfg.warmup_steps is not None
        else f"{cfg.warmup_ratio if cfg.warmup_ratio is not None else 0.1:g} warm-up"
    )
    decay = cfg.weight_decay if cfg.weight_decay is not None else 0.01
    if (cfg.lr_scheduler, warmup, decay) != ("linear", "0.1 warm-up", 0.01):  # the defaults go unsaid
        cycles = f" x {cfg.lr_cycles} cycles" if cfg.lr_cycles else ""
        say(f"  schedule   {cfg.lr_scheduler}{cycles}, {warmup}, weight decay {decay:g}")
    say(f"  output     {cfg.output_dir}/{RESULTS_NAME}")


def sharding_lines(cfg, device, precisions, processes: int) -> list[str]:
    """The header's ``--fsdp`` lines: how the model is sharded at each precision, and the CPU speed paths.

    Usage: ``sharding_lines(cfg, torch.device("cpu"), [resolve_precision("bf16", cpu)], 2)``
    """
    how = []
    for p in precisions:
        if p.autocast_enabled:
            how.append(
                f"{p.name}: {p.name} weights gathered per block, fp32 master shards and gradient reduction, "
                "norms and embeddings gathered in fp32"
            )
        else:
            how.append(f"{p.name}: {p.name} weights gathered per block")
    lines = [
        f"  sharding   FSDP2 over {processes} processes (weights, gradients, optimizer state: 1/{processes} "
        f"each), global batch {cfg.batch_size * cfg.grad_accum * processes}",
        *(f"             {text}" for text in how),
    ]
    if cfg.eval_only:
        return lines  # nothing trains: no checkpoint
    single = len(precisions) * len(cfg.seeds) == 1
    where = f"{cfg.output_dir}/{checkpoint_name('<precision>', '<k>', single, sharded=True)}"
    lines.append(
        f"  checkpoint sharded: each process writes its shards into {where}/; --resume continues it with "
        f"--nproc-per-node {processes}; --save-model writes the whole model at the end"
    )
    return lines


# Evaluation figures that are not task metrics (they have their own places in the line).
_NOT_METRICS = {"loss", "time_s", "samples_per_s"}


def run_label(precision: str, seed: int, several_seeds: bool) -> str:
    """How the terminal names one run: its precision, and its seed where the command trains several."""
    return precision + (f" seed {seed}" if several_seeds else "")


def print_result(result, kept: bool = False, several_seeds: bool = False) -> None:
    """One line per run: the figures a user came for.

    ``kept``: a run ``--resume`` found finished in results.json; its line says so, so that a
    resumed command whose runs had all ended says what it holds instead of nothing.
    ``several_seeds``: the command trains each precision per seed (``--seeds``): the line names its seed.
    """
    label = f"[{run_label(result.precision, result.seed, several_seeds)}] " + (
        "finished earlier, kept by --resume: " if kept else ""
    )
    mem = result.peak_memory_bytes
    mem_s = (
        f"{mem / 2**20:.0f} MiB ({'RSS' if result.peak_memory_kind == 'cpu_rss' else 'allocated'})" if mem else "n/a"
    )
    metrics = {k: v for k, v in result.eval.items() if k not in _NOT_METRICS and isinstance(v, (int, float))}
    undefined = result.eval.get(UNDEFINED_KEY) or {}
    if metrics:
        # A NaN is a metric the data leaves undefined: say why (mixft.metrics.task.undefined_reasons), not "nan".
        shown, by_reason = [], {}
        for k, v in metrics.items():
            if k in undefined and v != v:
                by_reason.setdefault(str(undefined[k]), []).append(k)
            else:
                shown.append(f"{k} {v:.4f}")
        quality = ", ".join(shown + [f"{' and '.join(names)} undefined: {why}" for why, names in by_reason.items()])
    elif "loss" in result.eval:
        quality = f"eval loss {result.eval['loss']:.4f}"
    else:
        quality = "not evaluated"  # stopped before the first evaluation
    scale = f", final loss scale {result.final_loss_scale:g}" if result.final_loss_scale is not None else ""
    if is_eval_only(result):
        # --eval-only: the speed that was measured is inference; say that, not "0.0 samples/s trained"
        # (report.md's table does the same: mixft.report.summary.is_eval_only decides for both).
        say(
            f"{label}{quality} | inference {result.eval['samples_per_s']:.1f} samples/s | "
            f"eval {result.eval.get('time_s', 0.0):.1f} s | peak memory {mem_s} | no training (--eval-only)",
            flush=True,
        )
        return
    best = result.best or {}
    if best.get("loaded") and (result.last or {}).get("step") != best.get("step"):
        ties = best.get("ties") or 0
        tied = f"; {ties} later evaluation{'s' if ties != 1 else ''} tied, the first is kept" if ties else ""
        quality += f" (best, step {best['step']} of {result.steps}{tied})"
    if result.stop_kind == "early_stopping":
        quality += ", early stopping"
    writes = f" + checkpoints {result.checkpoint_time_s:.1f} s" if result.checkpoint_time_s else ""
    saved = (result.memory or {}).get("saved_activations_peak")
    saved_s = (
        f" | saved activations {saved / 2**20:.{0 if saved >= 10 * 2**20 else 1}f} MiB" if saved else ""
    )  # what a precision shrinks
    # A speed measured on ladder shapes (--batch-shapes) is said beside it: a --compare's runs may differ there.
    ladder = " (batch shapes on a ladder)" if result.batch_shapes == "ladder" else ""
    say(
        f"{label}{quality} | {result.train_samples_per_s:.1f} samples/s{ladder} | "
        f"train {result.train_time_s:.1f} s{writes} | peak memory {mem_s}{saved_s} | steps {result.steps}, "
        f"skipped {result.skipped_steps}{scale}",
        flush=True,
    )


class ConsoleObserver:
    """Prints the run summary, a progress bar per run, and one result line per run."""

    def __init__(self, progress: bool = True, signals: SignalHandler | None = None, several_seeds: bool = False):
        self.signals = signals  # Ctrl-C / SIGTERM: stop at the next step, save, exit 130 / 143
        self.stoppers: list[StopOnSignal] = []
        self.show_progress = progress
        self.several_seeds = several_seeds  # --seeds: every line names its run's seed

    @property
    def main(self) -> bool:
        # Asked when needed, not at construction: run() joins the process group first.
        from mixft.distributed import is_main_process

        return is_main_process()  # under data parallelism only rank 0 talks

    @property
    def progress(self) -> bool:
        return self.show_progress and self.main

    def on_plan(self, cfg, device, precisions, run_info, steps, hardware) -> None:
        if self.main:
            print_plan(cfg, device, precisions, run_info, steps, hardware)
            if world_size() > 1 and cfg.fsdp:
                for line in sharding_lines(cfg, device, precisions, world_size()):
                    say(line)
            elif world_size() > 1:
                say(
                    f"  parallel   {world_size()} processes (DistributedDataParallel), "
                    f"global batch {cfg.batch_size * cfg.grad_accum * world_size()}"
                )

    def callbacks(self, cfg, precision, seed):
        label = run_label(precision.name, seed, self.several_seeds)
        callbacks = [ProgressBar(label, enabled=self.progress)]
        if self.main:
            callbacks.append(DurationEstimate(label))
        return callbacks

    def stop_callbacks(self, cfg, precision, seed):
        if self.signals is None:
            return []
        self.stoppers.append(StopOnSignal(self.signals))
        return [self.stoppers[-1]]

    def on_result(self, result) -> None:
        if self.main:
            print_result(result, several_seeds=self.several_seeds)

    def on_kept(self, result) -> None:
        if self.main:
            print_result(result, kept=True, several_seeds=self.several_seeds)

    def stop_requested(self) -> bool:
        return self.signals is not None and self.signals.signum is not None


def quiet_library_progress() -> None:
    """--no-progress means none: also the libraries' own bars (weight loading, shard writing, datasets maps).

    The CLI owns this process's terminal, so it may switch them off; the library never does.
    """
    import huggingface_hub.utils

    huggingface_hub.utils.disable_progress_bars()
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    # else transformers reads huggingface_hub's switch when imported: a run without it does not pay its import
    # (mlp-synthetic with --no-progress: 16.5 s against 19.0 s, a 2-core Xeon without bf16 instructions)
    if "datasets" in sys.modules:
        sys.modules["datasets"].disable_progress_bars()
    else:  # datasets reads this when imported: a run that never loads a dataset does not pay its import (~1 s)
        os.environ["HF_DATASETS_DISABLE_PROGRESS_BARS"] = "1"


def print_probe(cfg: RunConfig, result) -> None:
    """``--probe``: the measured table, and where it was written."""
    from mixft.report.probe_result import render_probe_table

    say(render_probe_table(result))
    say(
        f"results: {cfg.output_dir}/{PROBE_RESULTS_NAME} (hardware.probe); report: {cfg.output_dir}/{PROBE_REPORT_NAME}"
    )


def print_outputs(cfg: RunConfig, results) -> None:
    """The last lines of a finished run: where its results (and a comparison's report) are."""
    if len(results) > 1:
        say(f"comparison report: {cfg.output_dir}/{REPORT_NAME}")
    say(f"results: {cfg.output_dir}/{RESULTS_NAME}")
