"""Whole-step ablation of mixft's CPU step changes: each one left out of the real trainer, rotated rounds.

``python benchmarks/step_ablation.py [--stream [--train-samples 2000]] [--rounds 3] [--steps 12] [--warmup 3]
[--precisions fp32,bf16] [--batch-size 32] [--max-grad-norm X] [--data-dir DIR] [--model M] [--no-floor]
[--json FILE]``

What is switched (all on is what ``scripts/finetune.py`` runs on a CPU, except the shape ladder, which
it uses only when asked, ``--batch-shapes ladder`` or ``auto``; none is torch's own step):

* ``packing``: :mod:`mixft.data.packing`'s packed rows (the batch's sentences end to end,
  attention within each) instead of the same sentences padded to the longest;
* ``first_token_encoder``: :mod:`mixft.models.first_token_encoder`'s last layer computing only
  the [CLS] tokens the classifier reads (keys and values of every token) instead of every token;
* ``shape_ladder``: :mod:`mixft.data.shape_ladder`'s batch shapes (rows and row length rounded up a
  ladder, so shapes repeat and kernels built for a shape are reused) instead of each batch's own.

A change that did not beat the machine's noise here was removed (issue 28: cleaning the
buffer by rows, the norm and clip of the written rows, skipping the clip's multiply by 1.0;
2026-11-29: mixft's own dropout masks and row-gradient embeddings, which paid on one fixed batch
but not over the stream on any CPU kind measured; docs/benchmarks.md has their last ablations).

Variants per precision: ``all``, each switch left out (``-packing`` ...) and
``none``. Each is mixft's own ``Trainer`` from ``build_trainer`` on the ``bert-sst2``
recipe's model (the shipped MiniLM offline), trained on one fixed batch of the recipe's
loader so every variant computes the same shapes; a step's time is the wall time between
two ``on_step_end`` callbacks (data, forward, backward, norm, clip, optimizer, zero_grad;
``benchmarks.timing.StepTimer``). Each round builds every variant afresh and runs
``warmup`` untimed then ``steps`` timed steps, in a rotated order.

``--stream``: the variants train on the recipe's real train loader instead, in its order (seed 0:
every variant the same first ``warmup + steps`` batches of an epoch of ``--train-samples``
sentences, packed or padded as the variant says), so a step's shapes change as in a run;
``fixed`` is ``all`` on one batch of that stretch repeated (the one with the median computed
tokens), so ``all`` beside ``fixed`` is what the changing shapes cost. Printed beside the table:
the epoch's distinct (rows x row length), packed and padded, exact and on the ladder, with their
padding efficiency (real over computed tokens), and the distinct input shapes the Linear layers saw
over the stream.

Printed: per variant the median step time, its spread (25th-75th percentile, min), the
speedup of ``all`` over the variant with the range of the per-round speedups (a range that
straddles 1.0 is noise) and the CPU model with its flags (amx_bf16, avx512_bf16,
avx512_fp16): an ablation from one CPU says nothing about another. Per precision, ``all``'s
median step beside its floor (``mixft.train.floor``: the step's matmul FLOPs,
``benchmarks.bert.bert_matmul_flops``, at the probe's matmul rate, plus fused AdamW's and the
clip's bytes at a measured bandwidth; ``--no-floor`` skips the probe this takes).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import json
import statistics
import sys
from pathlib import Path
from unittest import mock

import torch

from benchmarks.bert import BertSetup, bert_matmul_flops, encoder_config, prepare_bert
from benchmarks.floors import gauges_line, measure_gauges
from benchmarks.stream import LinearInputs, epoch_shapes, median_batch, step_work
from benchmarks.timing import SameBatch, StepTimer, markdown_table, median_ratio, rotated
from mixft.amp.hardware import describe_hardware, hardware_line
from mixft.amp.precision import resolve_device, resolve_precision
from mixft.errors import UsageError
from mixft.models import classifiers
from mixft.runs.build import build_trainer
from mixft.train.floor import optimizer_clip_bytes

SWITCHES = ("packing", "first_token_encoder", "shape_ladder")
PRECISIONS = ("fp32", "bf16")


STREAM = "stream"  # left out in the stream mode's ``fixed`` variant: one batch repeated


def variants(stream: bool = False) -> dict[str, frozenset[str]]:
    """Variant name -> the switches it leaves out (``stream``: also ``fixed``, all switches on one batch)."""
    out = {"all": frozenset()}
    if stream:
        out["fixed"] = frozenset({STREAM})
    out.update({f"-{name}": frozenset({name}) for name in SWITCHES})
    out["none"] = frozenset(SWITCHES)
    return out


def timed_variant(
    bert,
    precision_name: str,
    left_out: frozenset[str],
    warmup: int,
    steps: int,
    max_grad_norm: float | None = None,
    stream: bool = False,
    seen: dict | None = None,
) -> list[float]:
    """Seconds of each timed step of a fresh trainer with ``left_out`` switched off.

    ``stream``: train on the recipe's loader itself for ``warmup + steps`` steps (``STREAM`` left
    out: its median batch of those, repeated); else on its first batch, repeated. ``seen``: filled
    with what the timed steps computed, under ``(precision_name, left_out)``.
    """
    device = resolve_device("cpu")
    precision = resolve_precision(precision_name, device)
    built = dataclasses.replace(
        bert.cfg,
        pack_sequences="packing" not in left_out,
        batch_shapes="exact" if "shape_ladder" in left_out else "ladder",
    )
    parts = bert.recipe.build(built, bert.prepared, precision, device, seed=0)
    cfg = dataclasses.replace(bert.cfg, epochs=1, max_steps=None, eval_steps=0)
    if stream and STREAM not in left_out:
        # The run's own loader in its order (seed 0): every variant sees the same sentences.
        parts = dataclasses.replace(parts, eval_loader=None)
        cfg = dataclasses.replace(cfg, max_steps=warmup + steps)
    else:
        if stream:  # like the stream's shapes, repeated
            batch = median_batch(list(itertools.islice(parts.train_loader, warmup + steps)))
        else:
            batch = next(iter(parts.train_loader))  # the same sentences either way: the sampler does not change
        parts = dataclasses.replace(parts, train_loader=SameBatch(batch, warmup + steps), eval_loader=None)
    timer = StepTimer()
    if max_grad_norm is not None:
        cfg = dataclasses.replace(cfg, max_grad_norm=max_grad_norm)
    trainer = build_trainer(parts, cfg, precision=precision, device=device, seed=0, callbacks=[timer])
    with contextlib.ExitStack() as stack:
        if "first_token_encoder" in left_out:  # every encoder the model does not cover takes this path
            stack.enter_context(mock.patch.object(classifiers, "reads_first_tokens_only", lambda encoder: False))
        # Registered in every variant of a stream run alike (a Python hook per Linear call).
        linear = stack.enter_context(LinearInputs(parts.model)) if stream else None
        trainer.fit()
    if len(timer.step_times_s) < warmup + steps:
        raise RuntimeError(f"the loader gave {len(timer.step_times_s)} steps, not {warmup + steps}")
    if seen is not None:
        seen[(precision_name, left_out)] = {
            "step_work": step_work(timer.step_shapes[warmup:], timer.step_samples[warmup:]),
            "linear_input_shapes": linear.distinct if linear is not None else None,
            "linear_calls": linear.calls if linear is not None else None,
            "steps_seen": len(timer.step_times_s),  # warm-up included: what LinearInputs watched
            "parameter_bytes": optimizer_clip_bytes(trainer.params, clip=trainer.max_grad_norm is not None),
            "config": encoder_config(parts.model),
        }
    return timer.step_times_s[warmup:]


def run_ablation(
    time_variant, precisions: list[str], rounds: int, only: list[str] | None = None, stream: bool = False
) -> dict:
    """``{"<precision>/<variant>": {"all": [...], "rounds": [[...], ...]}}`` from ``time_variant(p, left_out)``.

    ``only``: these variants (``all`` always among them), for a closer look at one switch.
    ``stream``: the stream mode's variants (``fixed`` among them)."""
    names = variants(stream)
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
        for variant in [v for v in variants(stream=True) if f"{precision}/{v}" in times]:
            t = times[f"{precision}/{variant}"]
            ms = [x * 1000 for x in t["all"]]
            if variant == "all":
                speedup = "1.00 (reference)"
            else:
                speed, per_round = median_ratio(t, best)
                speedup = f"{speed:.3f} (rounds {min(per_round):.3f}-{max(per_round):.3f})"
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


def stream_lines(times: dict, seen: dict, precisions: list[str]) -> list[str]:
    """Per precision: ``all`` over the stream beside ``fixed``, per step and per matmul FLOP, and the
    Linear input shapes the stream brought. The stream's steps differ in size; the fixed batch is
    one of them, so the per-FLOP ratio (each variant's time over the FLOPs it computed) is the
    like-for-like one: above 1, the stream costs more per FLOP than the same work repeated."""
    lines = []
    for precision in precisions:
        if f"{precision}/fixed" not in times:
            continue
        stream, fixed = times[f"{precision}/all"], times[f"{precision}/fixed"]
        stream_vs_fixed, per_round = median_ratio(stream, fixed)
        work, still = seen[(precision, frozenset())], seen[(precision, frozenset({STREAM}))]
        flops = [bert_matmul_flops(work["config"], shapes) for shapes in work["step_work"]]
        fixed_flops = bert_matmul_flops(still["config"], still["step_work"][0])
        # Every round trained the same batches: round r's step i computed flops[i].
        per_flop = sum(stream["all"]) / (len(stream["rounds"]) * sum(flops))
        fixed_per_flop = statistics.median(fixed["all"]) / fixed_flops
        shape = "x".join(str(d) for d in still["step_work"][0][0][:2])
        a, f = statistics.median(stream["all"]), statistics.median(fixed["all"])
        lines.append(
            f"{precision}: stream {a * 1e3:.1f} ms/step, fixed batch ({shape}) {f * 1e3:.1f} ms/step: stream ÷ fixed "
            f"{stream_vs_fixed:.3f} (rounds {min(per_round):.3f}-{max(per_round):.3f}); per matmul FLOP (the stream's steps "
            f"{min(flops) / 1e9:.1f}-{max(flops) / 1e9:.1f} GFLOP, fixed {fixed_flops / 1e9:.1f}): stream ÷ fixed "
            f"{per_flop / fixed_per_flop:.3f}; the Linear layers saw {work['linear_input_shapes']} distinct input "
            f"shapes in {work['linear_calls']} calls over the stream's first {work['steps_seen']} steps"
        )
    return lines


def floor_figures(times: dict, seen: dict, precisions: list[str], gauges) -> dict[str, dict]:
    """Per precision: ``all``'s median step and its floor (the median step's matmul FLOPs)."""
    out = {}
    for precision in precisions:
        work = seen[(precision, frozenset())]
        flops = statistics.median(bert_matmul_flops(work["config"], shapes) for shapes in work["step_work"])
        floor = gauges.floor(precision, flops, work["parameter_bytes"])
        step_s = statistics.median(times[f"{precision}/all"]["all"])
        out[precision] = {"line": f"{precision}: {floor.line(step_s)}", **floor.to_dict(step_s)}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=12, help="timed steps per variant per round")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps per variant per round")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--precisions", default=",".join(PRECISIONS))
    p.add_argument(
        "--variants",
        help="comma-separated variants to run beside all (default: every one: " + ", ".join(variants(True)) + ")",
    )
    p.add_argument("--max-grad-norm", type=float, help="the clip limit (default: the recipe's)")
    p.add_argument("--data-dir", help="a GLUE-layout SST-2 directory whose first batch is timed (default: generated)")
    p.add_argument("--model", default=BertSetup.model, help="model name or directory (offline: the shipped MiniLM)")
    p.add_argument(
        "--stream",
        action="store_true",
        help="train on the recipe's train loader in its order (the shapes a run sees) instead of one batch",
    )
    p.add_argument(
        "--train-samples",
        type=int,
        default=2000,
        help="--stream: sentences in the epoch whose first batches are timed and whose shapes are counted",
    )
    p.add_argument("--no-floor", action="store_true", help="skip the floor line (and the probe it runs)")
    p.add_argument("--json", help="also write the raw step times here")
    args = p.parse_args(argv)
    if min(args.rounds, args.steps, args.batch_size, args.train_samples) < 1 or args.warmup < 1:
        p.error(
            "--rounds, --steps, --batch-size and --train-samples must be >= 1, --warmup >= 1 "
            "(the first step measures memory)"
        )
    precisions = [name.strip() for name in args.precisions.split(",") if name.strip()]
    known = variants(args.stream)
    only = [name.strip() for name in (args.variants or "").split(",") if name.strip()]
    if set(only) - set(known):
        p.error(f"unknown variant(s) {sorted(set(only) - set(known))}; choose from {', '.join(known)}")
    cpu = resolve_device("cpu")
    try:
        for name in precisions:
            resolve_precision(name, cpu)
    except UsageError as e:
        p.error(str(e))
    setup = BertSetup(
        train_samples=args.train_samples if args.stream else args.batch_size,
        eval_samples=8,
        batch_size=args.batch_size,
        device="cpu",
        data_dir=args.data_dir,
        model=args.model,
    )
    try:
        bert = prepare_bert(setup)
    except UsageError as e:  # e.g. a --data-dir that is not a GLUE SST-2 directory: one line, exit 2
        p.error(str(e))
    hw = describe_hardware(cpu)
    shapes, epochs = {}, {}
    for packed in (False, True):
        for ladder in (False, True) if args.stream else (False,):  # the ladder's epochs: the stream mode prints them
            cfg = dataclasses.replace(bert.cfg, pack_sequences=packed, batch_shapes="ladder" if ladder else "exact")
            shown = bert.recipe.build(cfg, bert.prepared, resolve_precision("fp32", cpu), cpu, seed=0)
            if not ladder:
                shapes[packed] = tuple(next(iter(shown.train_loader))["input_ids"].shape)
            if args.stream:
                epochs[(packed, ladder)] = epoch_shapes(shown.train_loader)
    if args.stream and epochs[(True, False)].batches < args.warmup + args.steps:
        p.error(
            f"--stream: the epoch has {epochs[(True, False)].batches} batches of {args.batch_size}, fewer than "
            f"--warmup + --steps = {args.warmup + args.steps}; give more --train-samples (or data)"
        )
    (n, width), (rows, capacity) = shapes[False], shapes[True]
    model = shown.run_info.get("model", bert.cfg.model)
    if args.stream:
        print(
            f"Step ablation over the stream, {bert.cfg.recipe} ({model}): the recipe's train loader in its order "
            f"(seed 0), the first {args.warmup} + {args.steps} batches of {args.batch_size} of an epoch of "
            f"{epochs[(True, False)].sentences} sentences ({shown.run_info.get('dataset', '')}), {args.rounds} rounds per "
            "variant; fixed: all switches on the median batch of those, repeated"
        )
        for (_packed, ladder), epoch in sorted(epochs.items(), key=lambda item: (not item[0][0], item[0][1])):
            print(f"epoch, {'on the ladder' if ladder else 'exact'}, {epoch.describe()}")
    else:
        print(
            f"Step ablation, {bert.cfg.recipe} ({model}), batch {n} x "
            f"{width} tokens padded, {rows} x {capacity} packed, {args.rounds} rounds x "
            f"({args.warmup} warm-up + {args.steps} timed steps) per variant"
        )
    print(
        f"{hardware_line(hw)}; flags {json.dumps(hw['cpu']['flags'])}; torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads\n",
        flush=True,
    )
    # The probe first: a machine that cannot measure a floor says so before the long part.
    gauges = None if args.no_floor else measure_gauges(bert.cfg, precisions, cpu)
    seen: dict = {}
    times = run_ablation(
        lambda precision, left_out: timed_variant(
            bert, precision, left_out, args.warmup, args.steps, args.max_grad_norm, args.stream, seen
        ),
        precisions,
        args.rounds,
        only,
        args.stream,
    )
    print(ablation_table(times, precisions))
    lines = stream_lines(times, seen, precisions)
    floors = {}
    if gauges is not None:
        floors = floor_figures(times, seen, precisions, gauges)
        lines += [gauges_line(gauges)] + [f["line"] for f in floors.values()]
    if lines:
        print("\n" + "\n".join(lines))
    if args.json:
        result = {
            "hardware": hw,
            "args": vars(args),
            "batch_shape": shapes[False],
            "packed_shape": shapes[True],
            "switches": list(SWITCHES),
            "step_times_s": times,
            "epoch": {
                f"{'packed' if packed else 'padded'}{', ladder' if ladder else ''}": v.to_dict()
                for (packed, ladder), v in epochs.items()
            },
            "stream": lines,
            "seen": {
                f"{p}/{'+'.join(sorted(left)) or 'all'}": {k: v for k, v in w.items() if k != "config"}
                for (p, left), w in seen.items()
            },
            "floor_gauges": gauges.to_dict() if gauges else None,
            "floors": floors,
        }
        Path(args.json).write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
