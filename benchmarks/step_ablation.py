"""Whole-step ablation of mixft's CPU step changes: each one left out of the real trainer, rotated rounds.

``python benchmarks/step_ablation.py [--rounds 3] [--steps 12] [--warmup 3] [--precisions fp32,bf16]
[--batch-size 32] [--max-grad-norm X] [--data-dir DIR] [--json FILE]``

What is switched (all on is what ``scripts/finetune.py`` runs on a CPU; none is torch's own step):

* ``fast_dropout``: :mod:`mixft.train.fast_dropout`'s exact masks from one random byte per element
  instead of torch's ``bernoulli_`` (hidden-state and sdpa attention dropout);
* ``row_embedding_grad``: :mod:`mixft.train.row_grad`'s row gradients into a kept buffer,
  zeroed each step, instead of a freshly allocated vocabulary-sized zero tensor per step
  (bit-identical gradients);
* ``packing``: :mod:`mixft.data.packing`'s packed rows (the batch's sentences end to end,
  attention within each) instead of the same sentences padded to the longest;
* ``first_token_encoder``: :mod:`mixft.models.first_token_encoder`'s last layer computing only
  the [CLS] tokens the classifier reads (keys and values of every token) instead of every token.

A change that did not beat the machine's noise here was removed (issue 28: cleaning the
buffer by rows, the norm and clip of the written rows, skipping the clip's multiply by 1.0;
docs/benchmarks.md has their last ablation).

Variants per precision: ``all``, each switch left out (``-fast_dropout`` ...) and
``none``. Each is mixft's own ``Trainer`` from ``build_trainer`` on the ``bert-sst2``
recipe's model (the shipped MiniLM offline), trained on one fixed batch of the recipe's
loader so every variant computes the same shapes; a step's time is the wall time between
two ``on_step_end`` callbacks (data, forward, backward, norm, clip, optimizer, zero_grad;
``benchmarks.timing.StepTimer``). Each round builds every variant afresh and runs
``warmup`` untimed then ``steps`` timed steps, in a rotated order.

Printed: per variant the median step time, its spread (25th-75th percentile, min), the
speedup of ``all`` over the variant with the range of the per-round speedups (a range that
straddles 1.0 is noise) and the CPU model with its flags (amx_bf16, avx512_bf16,
avx512_fp16): an ablation from one CPU says nothing about another.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import statistics
import sys
from pathlib import Path
from unittest import mock

import torch

from benchmarks.bert import BertSetup, prepare_bert
from benchmarks.timing import SameBatch, StepTimer, markdown_table, rotated
from mixft.amp.hardware import describe_hardware, hardware_line
from mixft.amp.precision import resolve_device, resolve_precision
from mixft.errors import UsageError
from mixft.models import classifiers
from mixft.runs.build import build_trainer

SWITCHES = ("fast_dropout", "row_embedding_grad", "packing", "first_token_encoder")
TRAINER_SWITCHES = ("fast_dropout", "row_embedding_grad")  # the trainer's CPU swaps; packing is the loader's
PRECISIONS = ("fp32", "bf16")


def variants() -> dict[str, frozenset[str]]:
    """Variant name -> the switches it leaves out."""
    out = {"all": frozenset()}
    out.update({f"-{name}": frozenset({name}) for name in SWITCHES})
    out["none"] = frozenset(SWITCHES)
    return out


def timed_variant(
    bert, precision_name: str, left_out: frozenset[str], warmup: int, steps: int, max_grad_norm: float | None = None
) -> list[float]:
    """Seconds of each timed step of a fresh trainer with ``left_out`` switched off."""
    device = resolve_device("cpu")
    precision = resolve_precision(precision_name, device)
    built = dataclasses.replace(bert.cfg, pack_sequences="packing" not in left_out)
    parts = bert.recipe.build(built, bert.prepared, precision, device, seed=0)
    batch = next(iter(parts.train_loader))  # the same sentences either way: the sampler does not change
    timer = StepTimer()
    parts = dataclasses.replace(parts, train_loader=SameBatch(batch, warmup + steps), eval_loader=None)
    cfg = dataclasses.replace(bert.cfg, epochs=1, max_steps=None, eval_steps=0)
    if max_grad_norm is not None:
        cfg = dataclasses.replace(cfg, max_grad_norm=max_grad_norm)
    trainer = build_trainer(parts, cfg, precision=precision, device=device, seed=0, callbacks=[timer])
    for name in TRAINER_SWITCHES:
        if name in left_out and name in trainer.cpu_swaps:
            trainer.cpu_swaps.pop(name).remove()
    with contextlib.ExitStack() as stack:
        if "first_token_encoder" in left_out:  # every encoder the model does not cover takes this path
            stack.enter_context(mock.patch.object(classifiers, "reads_first_tokens_only", lambda encoder: False))
        trainer.fit()
    return timer.step_times_s[warmup:]


def run_ablation(time_variant, precisions: list[str], rounds: int, only: list[str] | None = None) -> dict:
    """``{"<precision>/<variant>": {"all": [...], "rounds": [[...], ...]}}`` from ``time_variant(p, left_out)``.

    ``only``: these variants (``all`` always among them), for a closer look at one switch."""
    names = variants()
    if only:
        names = {name: left for name, left in names.items() if name == "all" or name in only}
    order = [(p, v) for p in precisions for v in names]
    times = {f"{p}/{v}": {"all": [], "rounds": []} for p, v in order}
    for r in range(rounds):
        for precision, variant in rotated(order, r):
            t = time_variant(precision, names[variant])
            times[f"{precision}/{variant}"]["all"] += t
            times[f"{precision}/{variant}"]["rounds"].append(t)
    return times


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def ablation_table(times: dict, precisions: list[str]) -> str:
    rows = []
    for precision in precisions:
        best = times[f"{precision}/all"]
        for variant in [v for v in variants() if f"{precision}/{v}" in times]:
            t = times[f"{precision}/{variant}"]
            ms = [x * 1000 for x in t["all"]]
            if variant == "all":
                speedup = "1.00 (reference)"
            else:
                per_round = [statistics.median(v) / statistics.median(a) for v, a in zip(t["rounds"], best["rounds"])]
                speedup = (
                    f"{statistics.median(t['all']) / statistics.median(best['all']):.3f} "
                    f"(rounds {min(per_round):.3f}-{max(per_round):.3f})"
                )
            rows.append(
                [
                    precision,
                    variant,
                    f"{statistics.median(ms):.1f}",
                    f"{_quantile(ms, 0.25):.1f}-{_quantile(ms, 0.75):.1f}",
                    f"{min(ms):.1f}",
                    len(ms),
                    speedup,
                ]
            )
    headers = ["precision", "variant", "median ms/step", "p25-p75 ms", "min ms", "steps", "all ÷ this (speedup of all)"]
    return markdown_table(headers, rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=12, help="timed steps per variant per round")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps per variant per round")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--precisions", default=",".join(PRECISIONS))
    p.add_argument(
        "--variants",
        help="comma-separated variants to run beside all (default: every one: " + ", ".join(variants()) + ")",
    )
    p.add_argument("--max-grad-norm", type=float, help="the clip limit (default: the recipe's)")
    p.add_argument("--data-dir", help="a GLUE-layout SST-2 directory whose first batch is timed (default: generated)")
    p.add_argument("--json", help="also write the raw step times here")
    args = p.parse_args(argv)
    if min(args.rounds, args.steps, args.batch_size) < 1 or args.warmup < 1:
        p.error("--rounds, --steps and --batch-size must be >= 1, --warmup >= 1 (the first step measures memory)")
    precisions = [name.strip() for name in args.precisions.split(",") if name.strip()]
    only = [name.strip() for name in (args.variants or "").split(",") if name.strip()]
    if set(only) - set(variants()):
        p.error(f"unknown variant(s) {sorted(set(only) - set(variants()))}; choose from {', '.join(variants())}")
    setup = BertSetup(
        train_samples=args.batch_size, eval_samples=8, batch_size=args.batch_size, device="cpu", data_dir=args.data_dir
    )
    try:
        bert = prepare_bert(setup)
    except UsageError as e:  # e.g. a --data-dir that is not a GLUE SST-2 directory: one line, exit 2
        p.error(str(e))
    hw = describe_hardware(resolve_device("cpu"))
    cpu = resolve_device("cpu")
    shapes = {}
    for packed in (False, True):
        cfg = dataclasses.replace(bert.cfg, pack_sequences=packed)
        shown = bert.recipe.build(cfg, bert.prepared, resolve_precision("fp32", cpu), cpu, seed=0)
        shapes[packed] = tuple(next(iter(shown.train_loader))["input_ids"].shape)
    (n, width), (rows, capacity) = shapes[False], shapes[True]
    print(
        f"Step ablation, {bert.cfg.recipe} ({shown.run_info.get('model', bert.cfg.model)}), batch {n} x "
        f"{width} tokens padded, {rows} x {capacity} packed, {args.rounds} rounds x "
        f"({args.warmup} warm-up + {args.steps} timed steps) per variant"
    )
    print(
        f"{hardware_line(hw)}; flags {json.dumps(hw['cpu']['flags'])}; torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads\n"
    )
    times = run_ablation(
        lambda precision, left_out: timed_variant(
            bert, precision, left_out, args.warmup, args.steps, args.max_grad_norm
        ),
        precisions,
        args.rounds,
        only,
    )
    print(ablation_table(times, precisions))
    if args.json:
        result = {
            "hardware": hw,
            "args": vars(args),
            "batch_shape": shapes[False],
            "packed_shape": shapes[True],
            "switches": list(SWITCHES),
            "step_times_s": times,
        }
        Path(args.json).write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
