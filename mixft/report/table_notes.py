"""The notes under report.md's comparison table: what its numbers say, and what they do not.

Seed noise against the deltas, evaluation-only rows, speed (and batch shapes that differ between
precisions), the loss scaler's skipped steps, memory, anything unusual in the runs, and which
evaluation the figures come from (``--load-best``, checkpoint writes). Every sentence is computed
from the results document.

Usage: ``notes = table_notes(doc, summarize(doc), "fp32")``
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from mixft.report.comparison_table import NO_TRAINING, fmt_metric_delta, only_evaluated, table_metrics
from mixft.report.memory_section import fresh_rss_steps
from mixft.report.summary import (
    delta_key,
    distinct,
    group_runs,
    is_points,
    metric_label,
    metric_short,
    number,
    run_metric,
    task_of,
)


def _skipped_at(runs: list[dict]) -> list[tuple[Any, list[int]]]:
    """(seed, [steps skipped]) for runs whose history marks skipped steps."""
    out = []
    for r in runs:
        hist = r.get("history") or {}
        steps, skipped = hist.get("step") or [], hist.get("skipped") or []
        at = [s for s, k in zip(steps, skipped) if k]
        if at:
            out.append((r.get("seed"), at))
    return out


def table_notes(doc: dict, rows: list[dict], baseline: str) -> list[str]:
    """The report's notes, in order: seed noise, eval-only runs, speed, GradScaler, memory, best model, the unusual."""
    base = next((r for r in rows if r["is_baseline"]), None)
    evaluated = only_evaluated(rows)
    return [
        *_seed_noise_notes(doc, rows, base, baseline),
        *_held_in_low_precision_notes(doc, rows),
        *_eval_only_notes(rows, base, baseline, evaluated),
        *_speed_notes(rows, base, baseline),
        *_batch_shape_notes(doc),
        *_scaler_notes(doc, rows, evaluated),
        *_memory_notes(doc, rows),
        *best_model_notes(doc.get("runs") or []),
        *_unusual_notes(doc),
    ]


def _seed_noise_notes(doc: dict, rows: list[dict], base: dict | None, baseline: str) -> list[str]:
    """The task's first metric (accuracy where there is one): each gap against the seed spread."""
    notes: list[str] = []
    # -- the task's first metric (accuracy where there is one): gap vs seed noise
    m = table_metrics(rows)[0]
    short, unit, scale = metric_short(m), (" pts" if is_points(m) else ""), (100 if is_points(m) else 1)
    spec = ".2f" if is_points(m) else ".4f"
    if base is None:
        notes.append(
            f"No `{baseline}` run in these results, so Δ{short}, speedup and memory ratio are n/a "
            f"(they compare against `{baseline}`)."
        )
    else:
        few = []
        for r in rows:
            if r["is_baseline"] or r[delta_key(m)] is None:
                continue
            if r[f"{m}_n"] > 1 and base[f"{m}_n"] > 1:
                # Pooled sample std of the pair, in the Δ's units.
                pooled = math.sqrt((r[f"{m}_std"] ** 2 + base[f"{m}_std"] ** 2) / 2) * scale
                d = r[delta_key(m)]
                spread = f"pooled std {pooled:{spec}}{unit}, {r[f'{m}_n']} vs {base[f'{m}_n']} seeds"
                gap = f"**{r['precision']}** vs {baseline}: Δ{short} {fmt_metric_delta(m, d)}{unit}"
                if abs(d) <= 2 * pooled:
                    notes.append(
                        f"{gap} is within 2× the seed spread ({spread}), so it is indistinguishable from seed noise."
                    )
                else:
                    notes.append(f"{gap} is more than 2× the seed spread ({spread}): likely a real difference.")
            else:
                few.append(r["precision"])
        if few:
            label = metric_label(m, task_of(doc))
            notes.append(
                f"{label[:1].upper() + label[1:]} for {', '.join(f'**{p}**' for p in few)} vs {baseline} rests on "
                f"one seed: run `--compare --seeds 0,1,2` to tell a gap from noise."
            )
    return notes


# Why a precision that holds the whole model in bf16 may score and run below AMP (measured: docs/pure_bf16.md).
_WHY_PURE = (
    "it holds the weights, gradients and AdamW state themselves in {dtype}, so the residual stream, the "
    "LayerNorms, the gradients and their sums over micro-batches round to {dtype} where AMP keeps fp32, and "
    "its Kahan-compensated optimizer step makes a dozen unfused passes over memory where AMP's fused AdamW "
    "makes one (docs/pure_bf16.md)"
)


def _held_in_low_precision_notes(doc: dict, rows: list[dict]) -> list[str]:
    """What holding the whole model in bf16 (bf16-pure, bf16-true) cost here, against AMP in the same dtype.

    Paired by seed, trained side by side in this command: the first metric's difference and the
    training speed; without an AMP run of that dtype, how to get one.
    """
    groups = group_runs(doc)
    m = table_metrics(rows)[0]
    short, scale = metric_short(m), (100 if is_points(m) else 1)
    unit, spec = (" pts", "+.2f") if is_points(m) else ("", "+.4f")
    held = {r["precision"]: _held_dtype(groups.get(r["precision"], [])) for r in rows}
    notes: list[str] = []
    for row in rows:
        dtype = held[row["precision"]]
        if dtype is None or row.get("eval_only"):
            continue
        why = _WHY_PURE.format(dtype=dtype)
        amp = next(
            (
                r
                for r in rows
                if r["autocast_dtype"] == dtype and held[r["precision"]] is None and not r.get("eval_only")
            ),
            None,
        )
        name = f"**{row['precision']}**"
        if amp is None:
            notes.append(
                f"{name} has no AMP run in {dtype} beside it here: add it to `--compare` to see what holding the "
                f"whole model in {dtype} costs against AMP; {why}."
            )
            continue
        own = {r.get("seed"): number(run_metric(r, m)) for r in groups[row["precision"]]}
        amps = {r.get("seed"): number(run_metric(r, m)) for r in groups[amp["precision"]]}
        diffs = [(own[s] - amps[s]) * scale for s in own if s in amps and own[s] is not None and amps[s] is not None]
        if not diffs:
            continue
        lower = sum(d < 0 for d in diffs)
        gap = f"Δ{short} {sum(diffs) / len(diffs):{spec}}{unit} (mean over {len(diffs)} seed(s), lower on {lower})"
        speed = ""
        if amp["train_time_s_mean"] and row["train_time_s_mean"]:
            speed = f", at {amp['train_time_s_mean'] / row['train_time_s_mean']:.2f}× AMP's training speed"
        notes.append(
            f"{name} against **{amp['precision']}** (AMP in {dtype}), trained side by side here: {gap}{speed}. "
            f"Where it falls behind AMP, this is why: {why}."
        )
    return notes


def _held_dtype(runs: list[dict]) -> str | None:
    """The dtype a precision's runs held the model in (results.json's ``param_dtype``); None: fp32 masters."""
    return next((r.get("param_dtype") for r in runs if r.get("param_dtype")), None)


def _eval_only_notes(rows: list[dict], base: dict | None, baseline: str, evaluated: bool) -> list[str]:
    """Eval-only runs: what was measured, and why there are no train figures."""
    notes: list[str] = []
    # -- eval-only runs: what was measured, and why there are no train figures
    if evaluated:
        notes.append(
            "These runs trained nothing (`--eval-only`): each evaluated the saved model at its precision, so the "
            "speed columns are inference on the eval set (eval time, samples/s), and there are no train times, "
            "skipped steps or loss scales."
        )
        if base is not None and any(r["inference_speedup"] is not None for r in rows if not r["is_baseline"]):
            notes.append(
                f"inference speedup = {baseline}'s mean eval time ÷ this precision's (above 1.00× is "
                f"faster); memory ratio = this precision's mean peak memory ÷ {baseline}'s."
            )
    elif any(r.get("eval_only") for r in rows):
        names = ", ".join(f"**{r['precision']}**" for r in rows if r.get("eval_only"))
        notes.append(f'{names} only evaluated a saved model (`--eval-only`): its train cells read "{NO_TRAINING}".')
    return notes


def _speed_notes(rows: list[dict], base: dict | None, baseline: str) -> list[str]:
    """What speedup and memory ratio mean."""
    notes: list[str] = []
    # -- speed
    if base is not None and any(r["speedup"] is not None for r in rows if not r["is_baseline"]):
        notes.append(
            f"speedup = {baseline}'s mean train time ÷ this precision's (above 1.00× is faster); "
            f"memory ratio = this precision's mean peak memory ÷ {baseline}'s (below 1.00× is smaller)."
        )
        for r in rows:
            if r["speedup_basis"] == "samples_per_s":
                notes.append(
                    f"**{r['precision']}** trained {_counts(r['step_counts'])} optimizer steps per run, {baseline} "
                    f"{_counts(base['step_counts'])}: a train time ratio would call the shorter run faster, so its "
                    f"speedup is its mean samples/s ÷ {baseline}'s (a short run's includes its warm-up)."
                )
    return notes


def _counts(counts: list[int]) -> str:
    return " or ".join(map(str, counts)) if counts else "an unknown number of"


def _batch_shape_notes(doc: dict) -> list[str]:
    """Precisions that trained on differently shaped batches (``--batch-shapes auto`` rounds up a ladder only for bf16
    on a CPU with AMX): their speed ratio holds the shapes' effect too, so it is said."""
    trained = [r for r in doc.get("runs") or [] if r.get("steps")]  # evaluation-only runs have no batches of theirs
    kinds = distinct(trained, "batch_shapes")
    if len(kinds) < 2:
        return []
    which = "; ".join(
        f"{kind}: {', '.join(distinct([r for r in trained if r.get('batch_shapes') == kind], 'precision'))}"
        for kind in sorted(kinds)
    )
    return [
        f"The precisions trained on differently shaped batches ({which}; `ladder`: rows and row length rounded up "
        "a short ladder so that shapes repeat, `exact`: as the data gives them), so each speedup holds what the "
        "shapes buy or cost as well as the precision. Rerun with `--batch-shapes ladder` or `--batch-shapes exact` "
        "to compare the precisions alone."
    ]


def _scaler_notes(doc: dict, rows: list[dict], evaluated: bool) -> list[str]:
    """The GradScaler: skipped steps per precision, or why there are none."""
    notes: list[str] = []
    groups = group_runs(doc)
    # -- GradScaler
    for r in rows:
        if not r["skipped_steps_total"]:
            continue
        steps = f" of {r['steps_total']}" if r["steps_total"] else ""
        where = "; ".join(
            f"seed {seed}: step{'s' if len(at) > 1 else ''} {', '.join(map(str, at[:8]))}"
            + (" …" if len(at) > 8 else "")
            for seed, at in _skipped_at(groups[r["precision"]])
        )
        at = f" ({where})" if where else ""
        collapsed = any(run.get("stop_kind") == "collapse" for run in groups[r["precision"]])
        if r["grad_scaler"] and collapsed:  # not the calibration it would be in a run that went on
            notes.append(
                f"**{r['precision']}**: the GradScaler skipped {r['skipped_steps_total']}{steps} optimizer "
                f"steps for inf/NaN gradients{at}, lowering the loss scale each time, until the run collapsed "
                "(its note below says why)."
            )
        elif r["grad_scaler"]:
            # Was: injected skips called calibration, while the fp32 row's note named the injection.
            injected = any((run.get("config") or {}).get("inject_nonfinite") for run in groups[r["precision"]])
            notes.append(
                f"**{r['precision']}**: the GradScaler skipped {r['skipped_steps_total']}{steps} optimizer "
                f"steps for inf/NaN gradients{at}, lowering the loss scale each time. "
                + (
                    "--inject-nonfinite put inf/NaN into these runs' gradients on purpose: the skips are its, "
                    "not the scale calibrating."
                    if injected
                    else "That is normal early in fp16 training while the scale calibrates; "
                    "skips throughout training would mean gradients keep overflowing."
                )
            )
        else:  # no scaler to blame: the loop's own rule skips a step whose gradients are not finite
            notes.append(
                f"**{r['precision']}**: {r['skipped_steps_total']}{steps} optimizer steps were skipped for inf/NaN "
                f"gradients{at}; with no GradScaler (and no loss scale to lower), the trainer skips a step whose "
                "gradients are not finite. In fp32 or bf16 that means the model itself overflows (or "
                "--inject-nonfinite put them there)."
            )
    skipped_any = any(r["skipped_steps_total"] for r in rows)
    if evaluated:  # nothing trained: no scaler to speak of
        pass
    elif rows and not any(r["grad_scaler"] for r in rows):
        notes.append(
            "No GradScaler in these runs (fp32 and bf16 need none)"
            + ("." if skipped_any else ", so there are no skipped steps to watch.")
        )
    elif any(not r["grad_scaler"] for r in rows):
        notes.append("In the final loss scale column, — means the precision ran without a GradScaler.")
    return notes


def _memory_notes(doc: dict, rows: list[dict]) -> list[str]:
    """What the peak memory figures are, and where they are missing or not comparable."""
    notes: list[str] = []
    # -- memory
    kinds = distinct(doc.get("runs") or [], "peak_memory_kind")
    if "cpu_rss" in kinds:
        notes.append(
            "Peak memory (RSS) is the process's peak resident set, not tensor memory: it includes "
            "the Python runtime, libraries and data, so it understates what a precision saves."
        )
        fresh = fresh_rss_steps(doc.get("runs") or [])
        if fresh:
            notes.append(
                f"Each run's peak RSS was measured in a fresh process that built its model and data and trained "
                f"its first {fresh} steps, with no earlier run in it, so run order does not move it"
                + (
                    "; the increase over start is what those steps added after building."
                    if any(r["memory_increase_n"] for r in rows)
                    else "."
                )
            )
        else:
            notes.append(
                "On CPU the RSS of a later run includes what earlier runs in the same process left "
                "allocated, so run order affects it"
                + (
                    ": the increase over start (peak minus the RSS when the run began) is the fairer comparison."
                    if any(r["memory_increase_n"] for r in rows)
                    else "."
                )
            )
    if "cuda_max_allocated" in kinds:
        notes.append(
            "Peak memory (allocated) is `torch.cuda.max_memory_allocated()`: the high-water mark of "
            "tensor memory, not counting the caching allocator's reserve or the CUDA context."
        )
    if len(kinds) > 1:
        notes.append("Runs measured different kinds of memory; memory ratios across kinds are n/a.")
    missing = [
        f"{r.get('precision')} seed {r.get('seed')}"
        for r in doc.get("runs") or []
        if number(r.get("peak_memory_bytes")) is None
    ]
    if missing:
        notes.append(f"Peak memory was not measured for {', '.join(missing)}; means use the runs that have it.")
    return notes


def _unusual_notes(doc: dict) -> list[str]:
    """Undefined metrics, runs that stopped early, runs on different devices."""
    notes: list[str] = []
    # -- anything unusual
    task = task_of(doc)
    for r in doc.get("runs") or []:
        undefined = (r.get("eval") or {}).get("undefined")  # mixft.metrics.task.undefined_reasons
        if isinstance(undefined, dict) and undefined:
            by_reason: dict[str, list[str]] = {}
            for m, why in undefined.items():
                by_reason.setdefault(str(why), []).append(metric_label(str(m), task))
            said = "; ".join(f"{' and '.join(names)} undefined: {why}" for why, names in by_reason.items())
            notes.append(f"**{r.get('precision')}** seed {r.get('seed')}: {said}; shown as n/a in the tables.")
        if r.get("stopped_early"):
            notes.append(f"**{r.get('precision')}** seed {r.get('seed')} stopped early: {r['stopped_early']}.")
    devices = distinct(doc.get("runs") or [], "device_name")
    if len(devices) > 1:
        notes.append("Runs ran on different devices, so times and memory are not directly comparable.")
    return notes


def _label(run: dict, seeds: set) -> str:
    return f"{run.get('precision')}" + (f" seed {run.get('seed')}" if len(seeds) > 1 else "")


def best_model_notes(runs: Sequence[dict]) -> list[str]:
    """Say which evaluation each run's figures come from (``--load-best``) and what checkpoints cost.

    Usage: ``best_model_notes([{"precision": "bf16", "best": {...}, "steps": 63}])``
    """
    notes: list[str] = []
    seeds = {r.get("seed") for r in runs}
    loaded = [r for r in runs if (r.get("best") or {}).get("loaded")]
    if loaded:
        metric = loaded[0]["best"].get("metric")
        where = ", ".join(f"{_label(r, seeds)} at step {r['best'].get('step')} of {r.get('steps')}" for r in loaded)
        notes.append(
            f"Each precision is compared at its best evaluation by {metric} (`--load-best`): {where}; "
            "its eval figures are that evaluation's, and so are the saved model and predictions."
        )
    stopped = [_label(r, seeds) for r in runs if r.get("stop_kind") == "early_stopping"]
    if stopped:
        notes.append(f"Early stopping ended {', '.join(stopped)} before the budget (see below).")
    writes = [(r, r.get("checkpoint_time_s")) for r in runs if isinstance(r.get("checkpoint_time_s"), (int, float))]
    if writes:
        figures = ", ".join(f"{_label(r, seeds)} {t:.1f} s" for r, t in writes)
        notes.append(f"Writing checkpoints took {figures}: not part of the training time, nor of samples/s.")
    return notes
