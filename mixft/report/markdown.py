"""Turn a results document (see :mod:`mixft.results`) into a comparison table and ``report.md``.

This module only *reads* results: every number it prints is taken from, or computed
from, the document it is given by :mod:`mixft.report.summary` (means, sample standard
deviations, differences and ratios; its docstring states the conventions). Nothing is
measured here and nothing is invented. The charts are drawn by :mod:`mixft.report.plots`,
which this module does not import: ``write_report`` takes the chart writer as an argument.

Usage::

    doc = json.loads(Path("runs/cmp/results.json").read_text())
    print(render_markdown(doc))
    write_report(doc, "runs/cmp", charts=write_plots)   # report.md + PNG charts beside results.json
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from mixft.amp.hardware import CPU_FLAGS, hardware_line, native_line
from mixft.atomic import write_text
from mixft.log import logger
from mixft.report import REPORT_NAME
from mixft.report.summary import (
    MEMORY_PARTS,
    MIB,
    NA,
    chart_titles,
    delta_key,
    distinct,
    eval_history_rows,
    fmt_delta,
    fmt_mean_std,
    fmt_ratio,
    fmt_scale,
    group_runs,
    is_points,
    memory_label,
    memory_rows,
    metric_label,
    metric_short,
    number,
    planned_charts,
    reported_metric_names,
    summarize,
    task_of,
)

__all__ = [
    "lighter_sentence",
    "measured_speed_sentence",
    "render_agreement",
    "render_eval_history",
    "render_hardware",
    "render_markdown",
    "render_memory",
    "render_preflight",
    "render_probe",
    "render_table",
    "summarize",
    "task_line",
    "write_report",
]

#: A train cell of an ``--eval-only`` row beside trained ones.
NO_TRAINING = "no training"

#: ``write_report``'s chart writer: ``charts(doc, out_dir, baseline) -> [png paths]`` (``mixft.report.plots.write_plots``).
ChartWriter = Callable[[dict, Path, str], list[Path]]


def _fmt_count(value: float) -> str:
    return f"{value:.0f}" if value == int(value) else f"{value:.1f}"


def _seed_list(seeds: Sequence[Any]) -> str:
    return ", ".join(str(s) for s in seeds) if seeds else NA


def _mib(value: float | None) -> str:
    return NA if value is None else f"{value:.1f}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


# ---------------------------------------------------------------------------- markdown


def table_metrics(rows: list[dict]) -> list[str]:
    """The metrics ``summarize``'s rows hold a value of, in their order; ``["accuracy"]``
    when none has any (the table keeps its accuracy column, n/a)."""
    if not rows:
        return ["accuracy"]
    found = []
    for key in rows[0]:
        m = key[:-2]
        if key.endswith("_n") and f"{m}_mean" in rows[0] and delta_key(m) in rows[0]:
            if any(r[key] for r in rows):
                found.append(m)
    return found or ["accuracy"]


def fmt_metric_delta(metric: str, value: float | None) -> str:
    """A Δ vs the baseline: points with two decimals for [0, 1] scores, four decimals otherwise."""
    if value is None or is_points(metric):
        return fmt_delta(value)
    return f"{value:+.4f}"


def _delta_header(metric: str, baseline: str) -> str:
    return f"Δ{metric_short(metric)} vs {baseline}" + (" (pts)" if is_points(metric) else "")


def render_table(rows: list[dict], baseline: str = "fp32", *, task: dict | None = None) -> str:
    """The comparison table (GitHub markdown) for ``summarize``'s rows: a column and a Δ
    column per task metric (accuracy, macro-F1, Matthews, Pearson/Spearman: those the
    rows hold), then speed, memory and GradScaler columns. ``task`` (a run's ``task``)
    names F1 "macro-F1" for multi-class tasks.

    Usage: ``render_table(summarize(doc), task=doc["runs"][0].get("task"))``
    """
    metrics = table_metrics(rows)
    mem_kinds = {r["peak_memory_kind"] for r in rows if r["peak_memory_kind"] is not None}
    one_kind = len(mem_kinds) <= 1
    mem_header = "peak memory (MiB"
    if one_kind and mem_kinds:
        mem_header += f", {memory_label(next(iter(mem_kinds)))}"
    mem_header += ")"
    # Results written before start_memory_bytes existed have no increase: no column then.
    show_increase = any(r["memory_increase_n"] for r in rows)
    # --eval-only runs trained nothing: their speed is inference, and train columns would only say 0.
    evaluated = _only_evaluated(rows)
    speed = (
        ["eval time (s)", "inference speedup", "inference samples/s"]
        if evaluated
        else ["train time (s)", "speedup", "samples/s"]
    )
    header = [
        "precision",
        *(h for m in metrics for h in (metric_label(m, task), _delta_header(m, baseline))),
        *speed,
        mem_header,
        *(["increase over start (MiB)"] if show_increase else []),
        "memory ratio",
        *([] if evaluated else ["skipped steps", "final loss scale"]),
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    for r in rows:
        scores = []
        for m in metrics:
            scores.append(fmt_mean_std(r[f"{m}_mean"], r[f"{m}_std"], ".4f"))
            scores.append("baseline" if r["is_baseline"] else fmt_metric_delta(m, r[delta_key(m)]))
        mem = NA if r["peak_memory_mib_mean"] is None else f"{r['peak_memory_mib_mean']:.1f}"
        if mem != NA and not one_kind:
            mem += f" ({memory_label(r['peak_memory_kind'])})"
        if r["skipped_steps_total"] is None:
            skipped = NA
        elif r["n_seeds"] > 1 and r["skipped_steps_total"]:
            skipped = f"{r['skipped_steps_total']} ({_fmt_count(r['skipped_steps_mean'])}/seed)"
        else:
            skipped = str(r["skipped_steps_total"])
        if r["final_loss_scale_min"] is not None and r["final_loss_scale_min"] != r["final_loss_scale_max"]:
            scale = f"{fmt_scale(r['final_loss_scale_min'])}–{fmt_scale(r['final_loss_scale_max'])}"
        else:
            scale = fmt_scale(r["final_loss_scale"])
        if evaluated:
            speeds = [
                fmt_mean_std(r["eval_time_s_mean"], r["eval_time_s_std"], ".2f"),
                fmt_ratio(r["inference_speedup"]),
                fmt_mean_std(r["inference_samples_per_s_mean"], r["inference_samples_per_s_std"], ".1f"),
            ]
        elif r.get("eval_only"):  # beside trained runs: say why its train cells are empty
            speeds, skipped, scale = [NO_TRAINING] * 3, NO_TRAINING, NO_TRAINING
        else:
            speeds = [
                fmt_mean_std(r["train_time_s_mean"], r["train_time_s_std"], ".2f"),
                fmt_ratio(r["speedup"]),
                fmt_mean_std(r["samples_per_s_mean"], r["samples_per_s_std"], ".1f"),
            ]
        cells = [
            r["precision"],
            *scores,
            *speeds,
            mem,
            *([_mib(r["memory_increase_mib_mean"])] if show_increase else []),
            fmt_ratio(r["memory_ratio"]),
            *([] if evaluated else [skipped, scale]),
        ]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)


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


def _only_evaluated(rows: list[dict]) -> bool:
    """Every row only evaluated a saved model (``--eval-only``): nothing trained."""
    return bool(rows) and all(r.get("eval_only") for r in rows)


def _notes(doc: dict, rows: list[dict], baseline: str) -> list[str]:
    """The report's notes, in order: seed noise, eval-only runs, speed, GradScaler, memory, best model, the unusual."""
    base = next((r for r in rows if r["is_baseline"]), None)
    evaluated = _only_evaluated(rows)
    return [
        *_seed_noise_notes(doc, rows, base, baseline),
        *_eval_only_notes(rows, base, baseline, evaluated),
        *_speed_notes(rows, base, baseline),
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
    return notes


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
        notes.append(
            f"**{r['precision']}**: the GradScaler skipped {r['skipped_steps_total']}{steps} optimizer "
            f"steps for inf/NaN gradients" + (f" ({where})" if where else "") + ", lowering the loss "
            "scale each time. That is normal early in fp16 training while the scale calibrates; "
            "skips throughout training would mean gradients keep overflowing."
        )
    if evaluated:  # nothing trained: no scaler to speak of
        pass
    elif rows and not any(r["grad_scaler"] for r in rows):
        notes.append("No GradScaler in these runs (fp32 and bf16 need none), so there are no skipped steps to watch.")
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
        fresh = _fresh_rss_steps(doc.get("runs") or [])
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


def task_line(task: dict | None) -> str | None:
    """What the model predicts, in one line: kind, label names in id order, text columns.

    Usage: ``task_line(run["task"])`` -> ``"multi-class classification, 3 labels in id order:
    negative, neutral, positive · text columns: `text` · label column: `label`"``
    """
    if not isinstance(task, dict):
        return None
    kind = str(task.get("kind") or "unknown task")
    names = [str(n) for n in task.get("names") or []]
    if kind == "classification" and names:
        kind = "binary classification" if len(names) == 2 else "multi-class classification"
        parts = [f"{kind}, {len(names)} labels in id order: {', '.join(names)}"]
    else:
        parts = [kind]
    if task.get("glue_task"):
        parts.append(f"GLUE task `{task['glue_task']}`")
    columns = [str(c) for c in task.get("text_columns") or []]
    if columns:
        parts.append(f"text column{'s' if len(columns) > 1 else ''}: {', '.join(f'`{c}`' for c in columns)}")
    if task.get("label_column"):
        parts.append(f"label column: `{task['label_column']}`")
    return " · ".join(parts)


def _task_lines(runs: list[dict]) -> list[str]:
    """One ``**task**`` line per distinct task in the runs (normally one); none for older documents."""
    lines: list[str] = []
    for r in runs:
        line = task_line(r.get("task"))
        if line is not None and f"**task** {line}" not in lines:
            lines.append(f"**task** {line}")
    return lines


def render_eval_history(doc: dict) -> str | None:
    """The per-epoch eval table: every metric (and the eval loss) per precision per epoch,
    mean ± std over seeds. None when no run recorded an eval history.

    Usage: ``print(render_eval_history(doc))``
    """
    rows = eval_history_rows(doc)
    if not rows:
        return None
    task = task_of(doc)
    metrics = [m for m in reported_metric_names(doc) if any(r.get(f"{m}_mean") is not None for r in rows)]
    at = "epoch" if all(r["at"] == "epoch" for r in rows) else "epoch / step"
    header = [at, "precision", "step", *(metric_label(m, task) for m in metrics), "eval loss"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---", "---"] + ["---:"] * (len(header) - 2)) + "|"]
    for r in rows:
        where = _fmt_count(r["epoch"]) if r["at"] == "epoch" else f"step {_fmt_count(r['epoch'])}"
        cells = [
            where,
            r["precision"],
            NA if r["step"] is None else _fmt_count(r["step"]),
            *(fmt_mean_std(r[f"{m}_mean"], r[f"{m}_std"], ".4f") for m in metrics),
            fmt_mean_std(r["loss_mean"], r["loss_std"], ".4f"),
        ]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)


def _yes_no(value: Any) -> str:
    return "unknown" if value is None else ("yes" if value else "no")


def measured_speed_sentence(rows: Sequence[dict], baseline: str = "fp32", probe: dict | None = None) -> str:
    """What was measured about speed on this machine, in words: the runs' own speedups (the
    table's), and whether a probe is below. Where nothing was measured it says so and offers
    ``--probe``. Never a rule about CPU flags: a CPU without AMX has measured bf16 faster
    than fp32, so flags do not settle it.

    Usage: ``measured_speed_sentence(summarize(doc), probe=doc["hardware"].get("probe"))``
    -> ``"Measured in these runs: bf16 trained 1.78x faster than fp32 (the table's speedup)."``
    """
    said = []
    if _only_evaluated(list(rows)):  # --eval-only measured inference, not training
        for r in rows:
            s = number(r.get("inference_speedup"))
            if r.get("is_baseline") or s is None:
                continue
            how = (
                f"{s:.2f}x faster than"
                if round(s, 2) > 1
                else f"at {s:.2f}x the speed of"
                if round(s, 2) < 1
                else "as fast as"
            )
            said.append(f"{r['precision']} evaluated {how} {baseline}")
        if said:
            return (
                f"Measured in these runs: {'; '.join(said)} (inference on the eval set, the table's inference "
                "speedup; nothing was trained)."
            )
    for r in rows:
        s = number(r.get("speedup"))
        if r.get("is_baseline") or s is None:
            continue
        if round(s, 2) > 1:
            said.append(f"{r['precision']} trained {s:.2f}x faster than {baseline}")
        elif round(s, 2) < 1:
            said.append(f"{r['precision']} trained at {s:.2f}x {baseline}'s speed, slower")
        else:
            said.append(f"{r['precision']} trained as fast as {baseline} (1.00x)")
    probed = isinstance(probe, dict) and bool(probe)
    if said:
        text = f"Measured in these runs: {'; '.join(said)} (the table's speedup, mean train time ratio)."
        return text + (" The probe below timed single training steps on this machine." if probed else "")
    if probed:
        return "These runs have no speed ratio to compare; the probe below measured one on this machine."
    return (
        "Nothing in these results measured one precision's speed against another on this machine: "
        "`--probe` measures it (about 30 s), or `--compare fp32,bf16` trains both."
    )


def render_hardware(hw: dict | None, rows: Sequence[dict] = (), baseline: str = "fp32") -> str | None:
    """The "Hardware" section: the machine in one line, its CPU flags as context, and what was
    measured about speed here (``rows``: ``summarize``'s, for the runs' own speedups; the
    record's ``probe``). None without a ``hardware`` record (older documents).

    Usage: ``render_hardware(doc.get("hardware"), summarize(doc))``
    """
    if not isinstance(hw, dict) or not hw:
        return None
    lines = ["## Hardware", ""]
    cpu = hw.get("cpu") if isinstance(hw.get("cpu"), dict) else {}
    try:
        lines += [hardware_line(hw), ""]
    except (KeyError, TypeError, AttributeError):  # a record from another version: say what is there
        lines += [str(cpu.get("model") or hw.get("device") or "machine not described"), ""]
    facts = []
    if hw.get("device"):
        facts.append(f"device `{hw['device']}`")
    if hw.get("torch"):
        threads = f" ({hw['torch_threads']} threads)" if hw.get("torch_threads") else ""
        facts.append(f"torch {hw['torch']}{threads}")
    if hw.get("cuda"):
        facts.append(f"CUDA {hw['cuda']}")
    if hw.get("python"):
        facts.append(f"Python {hw['python']}")
    if facts:
        lines.append("- " + " · ".join(facts))
    flags = cpu.get("flags") if isinstance(cpu.get("flags"), dict) else {}
    lines.append(
        "- CPU flags (context for the figures, not a forecast of them): "
        + " · ".join(f"`{f}` {_yes_no(flags.get(f))}" for f in CPU_FLAGS)
    )
    if isinstance(hw.get("native"), dict):  # torch's own check: is there a hardware path (not how fast it is)
        lines.append(f"- Native in torch's check: {native_line(hw['native'])}")
    gpu = hw.get("gpu")
    if isinstance(gpu, dict):
        mem = number(gpu.get("memory_bytes"))
        lines.append(
            f"- GPU {gpu.get('name', NA)}: compute capability {gpu.get('compute_capability', NA)} · "
            f"TF32 {_yes_no(gpu.get('tf32'))} · bf16 {_yes_no(gpu.get('bf16'))}"
            + (f" · {mem / 2**30:.0f} GiB" if mem else "")
        )
    lines.append("")
    lines.append(
        f"{measured_speed_sentence(rows, baseline, hw.get('probe'))} CPU flags alone do not settle whether "
        "mixed precision is faster, so only a measurement on this machine tells; a figure from one machine "
        "is not a fact about another."
    )
    return "\n".join(lines)


def lighter_sentence(precision: str, saved: float, base_saved: float, baseline: str = "fp32") -> str:
    """The headline "lighter" figure in words, from two measured saved-activation peaks.

    Usage: ``lighter_sentence("bf16", 83, 100)`` -> ``"bf16 saved 0.83x the activation bytes of fp32: 17% lighter"``
    """
    ratio = saved / base_saved
    pct = round(abs(1 - ratio) * 100)
    if pct == 0:
        how = "the same within 1%"
    else:
        how = f"{pct}% {'lighter' if ratio < 1 else 'heavier'}"
    return f"{precision} saved {ratio:.2f}x the activation bytes of {baseline}: {how}"


def held_sentence(precision: str, held: float, base_held: float, baseline: str = "fp32") -> str:
    """Parameters + gradients + optimizer state in words, from two measured sums of bytes.

    Usage: ``held_sentence("bf16-pure", 227e6, 363e6)`` -> ``"bf16-pure holds 216.5 MiB in parameters,
    gradients and optimizer state against fp32's 346.2 MiB (0.63x)"``
    """
    return (
        f"{precision} holds {held / MIB:.1f} MiB in parameters, gradients and optimizer state against "
        f"{baseline}'s {base_held / MIB:.1f} MiB ({held / base_held:.2f}x)"
    )


def _held(row: Mapping[str, Any] | None) -> float | None:
    """A memory row's parameters + gradients + optimizer state (None when one is missing)."""
    parts = [number((row or {}).get(key)) for key in ("parameters", "gradients", "optimizer_state")]
    return None if any(p is None for p in parts) else float(sum(parts))


def _mib_of(value: float | None) -> str:
    return NA if value is None else f"{value / MIB:.1f}"


def _shares(parts: Sequence[tuple[str, float]], total: float) -> str:
    return ", ".join(f"{name} {b / MIB:.1f} MiB" + (f" ({b / total:.0%})" if total else "") for name, b in parts)


def _fresh_rss_steps(runs: Sequence[dict]) -> int | None:
    """The steps every CPU run's fresh process trained (``memory.device_figure_steps``), when all
    CPU-RSS runs were measured that way with the same count; else None (in-process figures)."""
    cpu = [r for r in runs if r.get("peak_memory_kind") == "cpu_rss"]
    scopes = {
        ((r.get("memory") or {}).get("device_figure_scope"), (r.get("memory") or {}).get("device_figure_steps"))
        for r in cpu
    }
    if len(scopes) == 1:
        scope, steps = scopes.pop()
        if scope == "fresh_process" and steps:
            return int(steps)
    return None


def render_memory(doc: dict, baseline: str = "fp32") -> str | None:
    """The "Memory breakdown" section from the runs' ``memory`` records (see
    ``mixft.amp.memory``): a table per precision, the saved-activation ratio vs ``baseline`` in
    words, and the saved bytes by dtype and by op. None when no run has a record.

    Usage: ``render_memory(doc)``
    """
    rows = memory_rows(doc)
    if not rows:
        return None
    kinds = {r["device_figure_kind"] for r in rows if r["device_figure"] is not None}
    kind = memory_label(next(iter(kinds))) if len(kinds) == 1 and None not in kinds else "device"
    base = next((r for r in rows if r["precision"] == baseline), None)
    header = [
        "precision",
        *(f"{label} (MiB)" for _, label in MEMORY_PARTS),
        f"device figure (MiB, {kind})",
        f"saved vs {baseline}",
    ]
    lines = ["## Memory breakdown", "", "| " + " | ".join(header) + " |", "|---" + "|---:" * (len(header) - 1) + "|"]
    words = []
    for r in rows:
        ratio = NA
        if base is not None and r is not base and r["saved_activations_peak"] and base["saved_activations_peak"]:
            ratio = f"{r['saved_activations_peak'] / base['saved_activations_peak']:.2f}×"
            words.append(
                lighter_sentence(r["precision"], r["saved_activations_peak"], base["saved_activations_peak"], baseline)
            )
        elif r is base:
            ratio = "baseline"
        cells = [r["precision"], *(_mib_of(r[key]) for key, _ in MEMORY_PARTS), _mib_of(r["device_figure"]), ratio]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    lines.append("")
    held = [
        held_sentence(r["precision"], _held(r), _held(base), baseline)
        for r in rows
        if base is not None and r is not base and _held(r) and _held(base) and abs(_held(r) / _held(base) - 1) >= 0.01
    ]
    if words:
        lines += [
            f"**Lighter?** {'; '.join(words)} (peak bytes autograd saved for backward in one training "
            "step, the part of memory a precision changes).",
            "",
        ]
    if held:  # pure bf16 (mixft.train.pure_bf16) holds the weights, gradients and optimizer state themselves in bf16
        lines += [
            f"**Held?** {'; '.join(held)} (the bytes of those tensors as held after training, a "
            "compensation buffer included).",
            "",
        ]
    autocast = (
        "Autocast changes the dtype of what the forward computes, not of the parameters, gradients or "
        "optimizer state"
        + ("; the precisions under Held? keep those themselves in a lower precision." if held else ".")
    )
    lines.append(
        "- Measured on one forward + backward of a training batch: every storage autograd saved, "
        "counted once, autocast's cached low-precision weight copies included; the parameters' own "
        f"storages are under parameters. {autocast}"
    )
    for r in rows:
        dtypes = list(r["saved_by_dtype"].items())
        ops = [(str(op), float(b)) for op, b in r["saved_by_op"][:3] if number(b) is not None]
        total = r["saved_activations_peak"] or 0
        parts = []
        if dtypes:
            parts.append("by dtype: " + _shares(dtypes, total))
        if ops:
            parts.append("top ops: " + _shares(ops, total))
        if parts:
            lines.append(f"- **{r['precision']}** saved " + " · ".join(parts) + ".")
    if any(r["device_figure_kind"] == "cpu_rss" for r in rows):
        fresh = _fresh_rss_steps(doc.get("runs") or [])
        where = (
            f"the peak RSS of a fresh process that built the run's model and data and trained its first {fresh} steps"
            if fresh
            else "the run's peak RSS"
        )
        lines.append(
            f"- The device figure on CPU is {where}: the whole process (runtime, libraries, data), not tensors alone."
        )
    return "\n".join(lines)


def render_agreement(doc: dict) -> str | None:
    """The "Agreement with fp32" section from each run's ``agreement_vs_fp32`` (see
    ``mixft.report.agreement``): per run, the flip rate, the paired accuracy difference with its
    95% interval, McNemar's p and the verdict; for regression the mean |difference|.
    None when no run has one.

    Usage: ``render_agreement(doc)``
    """
    found = [r for r in doc.get("runs") or [] if isinstance(r.get("agreement_vs_fp32"), dict)]
    if not found:
        return None
    cls = [r for r in found if r["agreement_vs_fp32"].get("kind") != "regression"]
    reg = [r for r in found if r["agreement_vs_fp32"].get("kind") == "regression"]
    lines = [
        "## Agreement with fp32",
        "",
        "Each precision's predictions on the eval set, example by example, against fp32's of the same seed.",
        "",
    ]
    if cls:
        lines += [
            "| precision | seed | examples | flipped labels | Δaccuracy vs fp32 (pts) | 95% interval (pts) "
            "| only this right / only fp32 right | McNemar p |",
            "|---|---|---:|---:|---:|---:|---:|---:|",
        ]
        for r in cls:
            a = r["agreement_vs_fp32"]
            diff, ci = number(a.get("accuracy_diff")), a.get("accuracy_diff_ci95")
            flips, rate = a.get("flips"), number(a.get("flip_rate"))
            cells = [
                str(r.get("precision")),
                str(r.get("seed")),
                str(a.get("n", NA)),
                NA if rate is None else f"{flips} ({rate:.1%})",
                NA if diff is None else f"{100 * diff:+.2f}",
                NA if not ci else f"{100 * ci[0]:+.2f} to {100 * ci[1]:+.2f}",
                NA
                if a.get("precision_only_right") is None
                else f"{a['precision_only_right']} / {a['fp32_only_right']}",
                NA if number(a.get("mcnemar_p")) is None else f"{a['mcnemar_p']:.3g}",
            ]
            lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
        lines.append("")
    if reg:
        lines += [
            "| precision | seed | examples | mean abs. difference | largest abs. difference |",
            "|---|---|---:|---:|---:|",
        ]
        for r in reg:
            a = r["agreement_vs_fp32"]
            cells = [
                str(r.get("precision")),
                str(r.get("seed")),
                str(a.get("n", NA)),
                NA if number(a.get("mean_abs_diff")) is None else f"{a['mean_abs_diff']:.4g}",
                NA if number(a.get("max_abs_diff")) is None else f"{a['max_abs_diff']:.4g}",
            ]
            lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
        lines.append("")
    lines += [
        f"- seed {r.get('seed')}: {r['agreement_vs_fp32']['verdict']}"
        for r in found
        if r["agreement_vs_fp32"].get("verdict")
    ]
    if cls:
        interval = cls[0]["agreement_vs_fp32"].get("interval")
        lines.append(
            "- The interval is a " + (interval or "paired normal 95% interval") + "; McNemar's exact test "
            "counts only the examples one precision got right and the other wrong."
        )
    return "\n".join(lines).rstrip("\n")


def render_probe(probe: dict | None) -> str | None:
    """The probe's report section (``mixft.report.probe_result.probe_markdown``) from results.json's
    ``hardware.probe``; None without one. A record this version cannot read gets one line.

    Usage: ``render_probe(doc.get("hardware", {}).get("probe"))``
    """
    if not isinstance(probe, dict) or not probe:
        return None
    from mixft.report.probe_result import ProbeResult, probe_markdown

    try:
        return probe_markdown(ProbeResult.from_dict(probe)).rstrip("\n")
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        logger.debug("unreadable probe record: %s", exc)
        return (
            "## Is mixed precision faster here? (probe)\n\n"
            "This document holds a probe result this version of mixft cannot read "
            f"(format {probe.get('format', NA)}); run `--probe` again to measure."
        )


def render_preflight(pre: dict | None, top: int = 8) -> str | None:
    """The "Before the fp16 run" section from results.json's ``preflight`` (``mixft.amp.preflight``);
    None without one. Modules at risk most severe first, then the preflight's recommendations.

    Usage: ``render_preflight(doc.get("preflight"))``
    """
    if not isinstance(pre, dict) or not pre:
        return None
    seconds = number(pre.get("seconds"))
    how = (
        f"{pre.get('batches', NA)} training batch(es) forward and backward in fp32, "
        f"{pre.get('modules_checked', NA)} modules, initial loss scale {fmt_scale(number(pre.get('init_scale')))}"
        + (f", {seconds:.1f} s" if seconds is not None else "")
    )
    lines = ["## Before the fp16 run", ""]
    risks = [r for r in pre.get("modules_at_risk") or [] if isinstance(r, dict)]
    if not risks:
        big = pre.get("largest_activation") or {}
        value = number(big.get("value"))
        largest = f"; largest |activation| {value:.3g} in `{big.get('module')}`" if value is not None else ""
        lines.append(f"The preflight found no module at fp16 risk ({how}{largest}).")
        return "\n".join(lines)
    lines += [
        f"The preflight found {len(risks)} module(s) at fp16 risk ({how}), most severe first:",
        "",
        "| module | type | risk | value | × limit |",
        "|---|---|---|---:|---:|",
    ]
    for r in risks[:top]:
        label = "near overflow" if r.get("level") == "close" else r.get("kind", NA)
        risk = f"{label} ({r.get('tensor', NA)})" + (", starts here" if r.get("origin") else "")
        value, ratio = number(r.get("value")), number(r.get("ratio"))
        shown = NA if value is None else (f"{value:.1%}" if r.get("kind") == "underflow" else f"{value:.4g}")
        lines.append(
            f"| `{_cell(str(r.get('name')))}` | {_cell(str(r.get('module_type', NA)))} | {risk} | {shown} | "
            f"{'inf' if ratio is None else f'{ratio:.3g}'} |"
        )
    if len(risks) > top:
        lines += ["", f"{len(risks) - top} more in results.json (`preflight.modules_at_risk`)."]
    lines += [""] + [f"- {_cell(str(text))}" for text in pre.get("recommendations") or []]
    handled = pre.get("handled_by_fp32_modules") or []
    if handled:
        lines.append(
            f"- these runs kept `{','.join(pre.get('kept_in_fp32') or [])}` in fp32 (`--fp32-modules`): "
            f"{len(handled)} of the modules above run there"
        )
    return "\n".join(lines)


def render_markdown(doc: dict, baseline: str = "fp32", *, plots: Iterable[str | Path] | None = None) -> str:
    """``report.md``'s text for ``doc``.

    ``plots``: the chart files to link (names or paths; linked by file name, i.e. relative
    to report.md). Default: the charts ``doc`` has data for (:func:`mixft.report.summary.planned_charts`,
    what :func:`mixft.report.plots.write_plots` writes).

    Usage: ``IPython.display.Markdown(render_markdown(json.load(open("results.json"))))``
    """
    runs = doc.get("runs") or []
    rows = summarize(doc, baseline)
    precisions = [r["precision"] for r in rows]
    title = "# Mixed-precision comparison"
    if precisions:
        title += ": " + " vs ".join(precisions)
    out = [title, ""]

    seeds: list[Any] = []
    for r in runs:
        if r.get("seed") not in seeds:
            seeds.append(r.get("seed"))
    steps = sorted({int(r["steps"]) for r in rows if r["steps"] is not None})
    meta = [
        f"**model** `{', '.join(distinct(runs, 'model')) or NA}`",
        f"**dataset** `{', '.join(distinct(runs, 'dataset')) or NA}`",
        f"**device** {', '.join(distinct(runs, 'device_name')) or ', '.join(distinct(runs, 'device')) or NA}",
        f"**seeds** {_seed_list([s for s in seeds if s is not None])}",
        f"**steps/run** {', '.join(map(str, steps)) or NA}"
        + (" (`--eval-only`: no training)" if _only_evaluated(rows) else ""),
        f"**created** {doc.get('created') or NA}",
    ]
    out += [" · ".join(meta), ""]
    out += [line for task in _task_lines(runs) for line in (task, "")]

    hw = doc.get("hardware") if isinstance(doc.get("hardware"), dict) else None
    machine = [sec for sec in (render_hardware(hw, rows, baseline), render_probe((hw or {}).get("probe"))) if sec]
    if not rows:
        probed = isinstance((hw or {}).get("probe"), dict)
        out += ["No training runs in this results document" + (": it holds the probe below." if probed else "."), ""]
        out += [line for sec in machine for line in (sec, "")]
        return "\n".join(out).rstrip("\n") + "\n"

    out += [render_table(rows, baseline, task=task_of(doc)), ""]
    out += ["Scores and times are mean ± sample std over seeds (± only with more than one seed).", ""]

    notes = _notes(doc, rows, baseline)
    if notes:
        out += ["## How to read this", ""] + [f"- {n}" for n in notes] + [""]
    preflight = render_preflight(doc.get("preflight"))
    out += [preflight, ""] if preflight else []

    history = render_eval_history(doc)
    if history:
        out += ["## Eval per epoch", "", history, ""]
        out += ["Each row: the evaluation recorded at that epoch (step), mean ± sample std over seeds.", ""]

    out += [line for sec in (render_memory(doc, baseline), render_agreement(doc)) if sec for line in (sec, "")]
    out += [line for sec in machine for line in (sec, "")]

    titles = chart_titles(doc)
    names = planned_charts(doc) if plots is None else [Path(p).name for p in plots]
    if names:
        out += ["## Charts", ""]
        for name in names:
            out += [f"![{titles.get(name, name)}]({name})", ""]
    return "\n".join(out).rstrip("\n") + "\n"


def write_report(
    doc: dict,
    out_dir: str | Path,
    baseline: str = "fp32",
    *,
    charts: ChartWriter | None = None,
    name: str = REPORT_NAME,
) -> list[Path]:
    """Write ``report.md`` (or ``name``; and, with ``charts``, the charts it links) into ``out_dir``.

    Returns the files written, report.md first. ``charts`` is the chart writer,
    normally :func:`mixft.report.plots.write_plots`; it runs first so the report links only the
    charts that exist. Without it the report has no charts section. Each file is
    written atomically.

    Usage: ``write_report(results_document(results), "outputs/compare", charts=mixft.write_plots)``
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    pngs = list(charts(doc, out_dir, baseline)) if charts is not None else []
    report = out_dir / name
    write_text(report, render_markdown(doc, baseline, plots=pngs))
    logger.info("wrote %s and %d chart(s)", report, len(pngs))
    return [report, *pngs]


# ------------------------------------------------------------------------------------------
# The best model and checkpoint writes (was mixft/report_best.py)
#
# The report's sentences about the best model and checkpoint writes (``mixft.report.markdown`` places them in its notes).
#
# Usage: ``notes += best_model_notes(doc["runs"])``
# ------------------------------------------------------------------------------------------


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
