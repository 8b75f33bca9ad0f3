"""mixft.report.markdown: summary numbers, report.md contents, write_report's files.

Expected values are computed here from the fixture with plain Python, never copied
from the function's output.
"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from types import SimpleNamespace

import pytest

from mixft.report.markdown import render_markdown, summarize, write_report
from mixft.report.plots import write_plots

FIXTURE = Path(__file__).parents[1] / "fixtures" / "results_compare.json"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture()
def doc() -> dict:
    return json.loads(FIXTURE.read_text(encoding="utf-8"))


def runs_of(doc: dict, precision: str) -> list[dict]:
    return [r for r in doc["runs"] if r["precision"] == precision]


def values(doc: dict, precision: str, get) -> list[float]:
    return [get(r) for r in runs_of(doc, precision) if get(r) is not None]


def acc(r):
    return r["eval"]["accuracy"]


def tables(md: str) -> list[list[str]]:
    """The report's markdown tables, each as its lines, in order."""
    found: list[list[str]] = []
    previous = ""
    for ln in md.splitlines():
        if ln.startswith("|"):
            if not previous.startswith("|"):
                found.append([])
            found[-1].append(ln)
        previous = ln
    return found


def table_rows(md: str, index: int = 0) -> dict[str, dict[str, str]]:
    """The report's ``index``-th table (0: the comparison) as {first cell: {header: cell}}."""
    lines = tables(md)[index]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert set(lines[1].replace("|", "").replace("-", "").replace(":", "")) == set()
    rows = {}
    for ln in lines[2:]:
        cells = [c.strip() for c in ln.strip().strip("|").split("|")]
        assert len(cells) == len(header), ln
        rows[cells[0]] = dict(zip(header, cells))
    return rows


def pm(values_: list[float], fmt: str) -> str:
    m = statistics.mean(values_)
    if len(values_) > 1:
        return f"{m:{fmt}} ± {statistics.stdev(values_):{fmt}}"
    return f"{m:{fmt}}"


# ---------------------------------------------------------------------------- summarize


def test_summarize_one_row_per_precision_in_order(doc):
    rows = summarize(doc)
    assert [r["precision"] for r in rows] == ["fp32", "bf16", "fp16"]
    assert [r["n_seeds"] for r in rows] == [2, 2, 2]
    assert rows[0]["seeds"] == [0, 1]
    assert rows[0]["is_baseline"] and not rows[2]["is_baseline"]


def test_summarize_means_std_delta_speedup(doc):
    rows = {r["precision"]: r for r in summarize(doc)}
    for p in ("fp32", "bf16", "fp16"):
        accs = values(doc, p, acc)
        assert rows[p]["accuracy_mean"] == pytest.approx(sum(accs) / len(accs))
        assert rows[p]["accuracy_std"] == pytest.approx(statistics.stdev(accs))
        times = values(doc, p, lambda r: r["train_time_s"])
        assert rows[p]["train_time_s_mean"] == pytest.approx(sum(times) / len(times))
        sps = values(doc, p, lambda r: r["train_samples_per_s"])
        assert rows[p]["samples_per_s_mean"] == pytest.approx(sum(sps) / len(sps))
        assert rows[p]["steps"] == pytest.approx(statistics.mean(values(doc, p, lambda r: r["steps"])))

    base_acc = statistics.mean(values(doc, "fp32", acc))
    base_time = statistics.mean(values(doc, "fp32", lambda r: r["train_time_s"]))
    fp16_acc = statistics.mean(values(doc, "fp16", acc))
    fp16_time = statistics.mean(values(doc, "fp16", lambda r: r["train_time_s"]))
    assert rows["fp16"]["delta_accuracy_pts"] == pytest.approx((fp16_acc - base_acc) * 100)
    assert rows["fp16"]["speedup"] == pytest.approx(base_time / fp16_time)
    assert rows["fp16"]["speedup"] > 1  # the fixture's AMP runs are faster
    assert rows["fp32"]["speedup"] == pytest.approx(1.0)
    assert rows["fp32"]["delta_accuracy_pts"] == pytest.approx(0.0)


def test_a_run_that_trained_fewer_steps_is_not_called_faster_for_it(doc):
    """Was: speedup = fp32's mean train time ÷ fp16's even when fp16 collapsed after 3 of 40 steps, so a run ~5x
    slower per sample read "2.73x faster" in the table and the Hardware section; and its GradScaler note called
    the skips before the collapse normal calibration."""
    from mixft.report.hardware_section import measured_speed_sentence

    for r in runs_of(doc, "fp16"):
        r["steps"], r["train_time_s"], r["train_samples_per_s"] = 3, 0.05, 10.0
        r["stop_kind"], r["stopped_early"] = "collapse", "the loss scale fell below 1"
        r["history"]["skipped"] = [True] * len(r["history"]["skipped"])
        r["skipped_steps"] = 3
    base_sps = statistics.mean(values(doc, "fp32", lambda r: r["train_samples_per_s"]))
    assert base_sps > 10.0  # per sample, fp16 is the slower one here
    rows = {r["precision"]: r for r in summarize(doc)}
    assert rows["fp16"]["speedup"] == pytest.approx(10.0 / base_sps)
    assert rows["fp16"]["speedup_basis"] == "samples_per_s" and rows["bf16"]["speedup_basis"] == "train_time"
    md = render_markdown(doc)
    assert table_rows(md)["fp16"]["speedup"] == f"{10.0 / base_sps:.2f}×"
    assert "**fp16** trained 3 optimizer steps per run" in md and "samples/s ÷ fp32's" in md
    sentence = measured_speed_sentence(list(rows.values()))
    assert "fp16 trained at" in sentence and "samples/s ratio" in sentence
    scaler_note = next(ln for ln in md.splitlines() if "the GradScaler skipped" in ln)
    assert "until the run collapsed" in scaler_note and "calibrates" not in scaler_note


def test_summarize_memory_skips_null_runs(doc):
    # bf16 seed 1 has peak_memory_bytes null: the mean is over the run that has it.
    assert [r["peak_memory_bytes"] for r in runs_of(doc, "bf16")].count(None) == 1
    rows = {r["precision"]: r for r in summarize(doc)}
    bf16_mem = values(doc, "bf16", lambda r: r["peak_memory_bytes"])
    fp32_mem = values(doc, "fp32", lambda r: r["peak_memory_bytes"])
    assert rows["bf16"]["peak_memory_n"] == 1
    assert rows["bf16"]["peak_memory_bytes_mean"] == pytest.approx(bf16_mem[0])
    assert rows["bf16"]["peak_memory_mib_mean"] == pytest.approx(bf16_mem[0] / 2**20)
    assert rows["bf16"]["memory_ratio"] == pytest.approx(bf16_mem[0] / statistics.mean(fp32_mem))
    assert rows["bf16"]["peak_memory_kind"] == "cuda_max_allocated"


def test_summarize_scaler_fields(doc):
    rows = {r["precision"]: r for r in summarize(doc)}
    skipped = values(doc, "fp16", lambda r: r["skipped_steps"])
    scales = values(doc, "fp16", lambda r: r["final_loss_scale"])
    assert rows["fp16"]["grad_scaler"] is True
    assert rows["fp16"]["skipped_steps_total"] == sum(skipped) > 0
    assert rows["fp16"]["skipped_steps_mean"] == pytest.approx(sum(skipped) / len(skipped))
    assert rows["fp16"]["final_loss_scale_min"] == min(scales)
    assert rows["fp16"]["final_loss_scale_max"] == max(scales)
    for p in ("fp32", "bf16"):
        assert rows[p]["grad_scaler"] is False
        assert rows[p]["final_loss_scale"] is None
        assert rows[p]["skipped_steps_total"] == 0


def test_summarize_single_seed_std_is_none(doc):
    doc["runs"] = [r for r in doc["runs"] if r["seed"] == 0]
    for row in summarize(doc):
        assert row["n_seeds"] == 1
        assert row["accuracy_std"] is None and row["train_time_s_std"] is None
        assert row["samples_per_s_std"] is None


def test_summarize_without_baseline_gives_none(doc):
    doc["runs"] = [r for r in doc["runs"] if r["precision"] != "fp32"]
    rows = summarize(doc)
    assert [r["precision"] for r in rows] == ["bf16", "fp16"]
    for r in rows:
        assert r["delta_accuracy_pts"] is None
        assert r["speedup"] is None
        assert r["memory_ratio"] is None
        assert r["accuracy_mean"] is not None


def test_summarize_accuracy_falls_back_to_eval_history(doc):
    run = runs_of(doc, "fp32")[0]
    run["eval"] = {}
    rows = {r["precision"]: r for r in summarize(doc)}
    expected = [run["eval_history"][-1]["accuracy"], acc(runs_of(doc, "fp32")[1])]
    assert rows["fp32"]["accuracy_mean"] == pytest.approx(statistics.mean(expected))


# ---------------------------------------------------------------------------- markdown


def test_table_cells_trace_to_results(doc):
    md = render_markdown(doc)
    rows = table_rows(md)
    assert list(rows) == ["fp32", "bf16", "fp16"]
    headers = list(rows["fp32"])
    assert headers == [
        "precision",
        "accuracy",
        "Δacc vs fp32 (pts)",
        "train time (s)",
        "speedup",
        "samples/s",
        "peak memory (MiB, allocated)",
        "memory ratio",
        "skipped steps",
        "final loss scale",
    ]
    base_acc = statistics.mean(values(doc, "fp32", acc))
    base_time = statistics.mean(values(doc, "fp32", lambda r: r["train_time_s"]))
    base_mem = statistics.mean(values(doc, "fp32", lambda r: r["peak_memory_bytes"]))
    for p, cells in rows.items():
        accs = values(doc, p, acc)
        times = values(doc, p, lambda r: r["train_time_s"])
        mems = values(doc, p, lambda r: r["peak_memory_bytes"])
        assert cells["accuracy"] == pm(accs, ".4f")
        assert cells["train time (s)"] == pm(times, ".2f")
        assert cells["samples/s"] == pm(values(doc, p, lambda r: r["train_samples_per_s"]), ".1f")
        assert cells["speedup"] == f"{base_time / statistics.mean(times):.2f}×"
        assert cells["peak memory (MiB, allocated)"] == f"{statistics.mean(mems) / 2**20:.1f}"
        assert cells["memory ratio"] == f"{statistics.mean(mems) / base_mem:.2f}×"
        if p == "fp32":
            assert cells["Δacc vs fp32 (pts)"] == "baseline"
        else:
            assert cells["Δacc vs fp32 (pts)"] == f"{(statistics.mean(accs) - base_acc) * 100:+.2f}"
    skipped = values(doc, "fp16", lambda r: r["skipped_steps"])
    assert rows["fp16"]["skipped steps"].split()[0] == str(sum(skipped))
    scales = values(doc, "fp16", lambda r: r["final_loss_scale"])
    assert rows["fp16"]["final loss scale"] == f"{min(scales):.0f}–{max(scales):.0f}"
    assert rows["fp32"]["final loss scale"] == "—"
    assert rows["fp32"]["skipped steps"] == "0"


def test_every_table_number_is_derivable(doc):
    """Each numeric token in the table equals a formatted summarize value (no invented numbers)."""
    md = render_markdown(doc)
    allowed = set()
    for r in summarize(doc):
        for val in r.values():
            if isinstance(val, (int, float)) and not isinstance(val, bool):
                for fmt in (".4f", ".2f", ".1f", ".0f", "+.2f", "g"):
                    allowed.add(f"{val:{fmt}}")
        if r["peak_memory_mib_mean"] is not None:
            allowed.add(f"{r['peak_memory_mib_mean']:.1f}")
    table = "\n".join(tables(md)[0][2:])  # the comparison table's body
    table = re.sub(r"\b(fp32|bf16|fp16|tf32)\b", "", table)
    numbers = re.findall(r"[+-]?\d+(?:\.\d+)?", table)
    assert numbers
    for n in numbers:
        assert n in allowed, f"{n} is not derived from results.json"


def test_header_line_names_model_dataset_device_seeds_created(doc):
    md = render_markdown(doc)
    lines = md.splitlines()
    assert lines[0].startswith("# ")
    meta = lines[2]
    run = doc["runs"][0]
    for text in (run["model"], run["dataset"], run["device_name"], doc["created"], "0, 1"):
        assert text in meta


def test_multi_seed_notes_compare_gap_with_spread(doc):
    md = render_markdown(doc)
    assert "## How to read this" in md
    assert "within 2× the seed spread" in md
    assert "--seeds 0,1,2" not in md
    # pooled std of the fp16/fp32 pair, in points, computed here
    a, b = values(doc, "fp16", acc), values(doc, "fp32", acc)
    pooled = ((statistics.stdev(a) ** 2 + statistics.stdev(b) ** 2) / 2) ** 0.5 * 100
    assert f"pooled std {pooled:.2f} pts" in md


def test_gap_beyond_noise_is_called_out(doc):
    for r in runs_of(doc, "fp16"):
        r["eval"]["accuracy"] -= 0.05
    md = render_markdown(doc)
    assert "**fp16** vs fp32" in md and "more than 2× the seed spread" in md


def test_single_seed_note_and_no_plus_minus(doc):
    doc["runs"] = [r for r in doc["runs"] if r["seed"] == 0]
    md = render_markdown(doc)
    assert "--seeds 0,1,2" in md
    assert "within 2× the seed spread" not in md
    for cells in table_rows(md).values():
        assert "±" not in " ".join(cells.values())


def test_baseline_missing_renders_na(doc):
    doc["runs"] = [r for r in doc["runs"] if r["precision"] != "fp32"]
    md = render_markdown(doc)
    rows = table_rows(md)
    for cells in rows.values():
        assert cells["Δacc vs fp32 (pts)"] == "n/a"
        assert cells["speedup"] == "n/a"
        assert cells["memory ratio"] == "n/a"
    assert "No `fp32` run" in md


def test_other_baseline(doc):
    md = render_markdown(doc, baseline="bf16")
    rows = table_rows(md)
    assert rows["bf16"]["Δacc vs bf16 (pts)"] == "baseline"
    assert rows["bf16"]["speedup"] == "1.00×"


def test_skipped_steps_note_lists_steps(doc):
    md = render_markdown(doc)
    note = next(ln for ln in md.splitlines() if "GradScaler skipped" in ln)
    total = sum(values(doc, "fp16", lambda r: r["skipped_steps"]))
    steps_total = sum(values(doc, "fp16", lambda r: r["steps"]))
    assert f"skipped {total} of {steps_total} optimizer steps" in note
    assert "inf/NaN" in note and "calibrates" in note
    for r in runs_of(doc, "fp16"):
        at = [s for s, k in zip(r["history"]["step"], r["history"]["skipped"]) if k]
        assert ", ".join(map(str, at)) in note


def test_precisions_on_differently_shaped_batches_are_said_beside_the_speedup(doc):
    # --batch-shapes auto on a CPU with native bf16: bf16 on the ladder, fp32 (and fp16 here) exact.
    for r in doc["runs"]:
        r["batch_shapes"] = "ladder" if r["precision"] == "bf16" else "exact"
    md = render_markdown(doc)
    assert "differently shaped batches (exact: fp32, fp16; ladder: bf16;" in md
    assert "`--batch-shapes exact` to compare the precisions alone" in md
    for r in doc["runs"]:  # the same shapes everywhere (or none recorded, as before the option): no note
        r["batch_shapes"] = "exact"
    assert "differently shaped" not in render_markdown(doc)
    for r in doc["runs"]:
        r.pop("batch_shapes")
    assert "differently shaped" not in render_markdown(doc)


def test_no_scaler_runs_say_so(doc):
    doc["runs"] = [r for r in doc["runs"] if r["precision"] != "fp16"]
    md = render_markdown(doc)
    assert "No GradScaler in these runs" in md
    assert "GradScaler skipped" not in md
    assert "loss_scale.png" not in md


def test_cpu_rss_note(doc):
    for r in doc["runs"]:
        r["peak_memory_kind"] = "cpu_rss"
    md = render_markdown(doc)
    assert "peak memory (MiB, RSS)" in md
    assert "resident set" in md and "not tensor memory" in md
    assert "run order affects it" in md  # a later run's RSS carries what earlier runs left


def with_start_memory(doc: dict) -> dict:
    """The fixture as a CPU run would record it: RSS peaks and the RSS at each run's start."""
    for i, r in enumerate(doc["runs"]):
        r["peak_memory_kind"] = "cpu_rss"
        if r["peak_memory_bytes"] is not None:
            r["start_memory_bytes"] = r["peak_memory_bytes"] - (i + 1) * 3 * 2**20
    return doc


def test_memory_increase_over_start_beside_the_peak(doc):
    doc = with_start_memory(doc)
    rows = {r["precision"]: r for r in summarize(doc)}
    md = render_markdown(doc)
    table = table_rows(md)
    headers = list(table["fp32"])
    assert headers.index("increase over start (MiB)") == headers.index("peak memory (MiB, RSS)") + 1
    for p in ("fp32", "bf16", "fp16"):
        increases = values(
            doc,
            p,
            lambda r: (
                r["peak_memory_bytes"] - r["start_memory_bytes"] if r.get("start_memory_bytes") is not None else None
            ),
        )
        assert rows[p]["memory_increase_n"] == len(increases)
        assert rows[p]["memory_increase_bytes_mean"] == pytest.approx(statistics.mean(increases))
        assert table[p]["increase over start (MiB)"] == f"{statistics.mean(increases) / 2**20:.1f}"
    assert "run order affects it" in md and "increase over start" in md.split("## How to read this")[1]


def test_results_without_start_memory_have_no_increase_column(doc):
    # Results files written before start_memory_bytes existed (the fixture) render as before.
    assert not any("start_memory_bytes" in r for r in doc["runs"])
    rows = summarize(doc)
    assert all(r["memory_increase_n"] == 0 and r["memory_increase_bytes_mean"] is None for r in rows)
    assert "increase over start" not in render_markdown(doc)
    doc["runs"][0]["start_memory_bytes"] = None  # a device that could not tell: n/a, not a crash
    doc["runs"][1]["start_memory_bytes"] = doc["runs"][1]["peak_memory_bytes"] - 2**20
    table = table_rows(render_markdown(doc))
    assert table["fp32"]["increase over start (MiB)"] == "1.0"
    assert table["bf16"]["increase over start (MiB)"] == "n/a"


def test_mixed_memory_kinds_no_ratio(doc):
    for r in runs_of(doc, "fp16"):
        r["peak_memory_kind"] = "cpu_rss"
    rows = table_rows(render_markdown(doc))
    assert rows["fp16"]["memory ratio"] == "n/a"
    assert rows["fp16"]["peak memory (MiB)"].endswith("(RSS)")


def test_null_memory_everywhere_does_not_crash(doc):
    for r in doc["runs"]:
        r["peak_memory_bytes"] = None
    md = render_markdown(doc)
    for cells in table_rows(md).values():
        assert cells["memory ratio"] == "n/a"
        assert "n/a" in [v for k, v in cells.items() if k.startswith("peak memory")]
    assert "not measured for" in md


def test_null_memory_run_is_noted(doc):
    md = render_markdown(doc)
    assert "not measured for bf16 seed 1" in md


def test_empty_document_renders():
    md = render_markdown({"mixft_version": "0.1.0", "created": None, "runs": []})
    assert md.startswith("# ") and "No training runs" in md
    assert summarize({"runs": []}) == []


def test_plot_links_follow_given_list(doc):
    md = render_markdown(doc, plots=["loss.png"])
    assert "](loss.png)" in md and "time_memory.png" not in md
    md = render_markdown(doc)  # default: every chart the data supports
    for name in ("loss.png", "loss_scale.png", "eval_accuracy.png", "time_memory.png"):
        assert f"]({name})" in md


# ---------------------------------------------------------------------------- write_report


def test_write_report_writes_report_and_pngs(doc, tmp_path):
    out = tmp_path / "cmp"
    written = write_report(doc, out, charts=write_plots)
    names = [p.name for p in written]
    assert names[0] == "report.md"
    assert sorted(names[1:]) == sorted(["loss.png", "loss_scale.png", "eval_accuracy.png", "time_memory.png"])
    assert all(p.parent == out and p.is_file() for p in written)
    md = (out / "report.md").read_text(encoding="utf-8")
    assert md == render_markdown(doc, plots=written[1:])
    for p in written[1:]:
        assert p.read_bytes()[:8] == PNG_SIGNATURE
        assert f"]({p.name})" in md
    from PIL import Image

    with Image.open(out / "time_memory.png") as im:
        im.verify()
    with Image.open(out / "time_memory.png") as im:
        w, h = im.size
        assert im.format == "PNG" and w >= 400 and h >= 200
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]  # atomic writes left no temp files


def test_write_report_without_a_chart_writer_links_no_charts(doc, tmp_path):
    written = write_report(doc, tmp_path)
    assert written == [tmp_path / "report.md"]
    md = written[0].read_text(encoding="utf-8")
    assert md == render_markdown(doc, plots=[]) and "## Charts" not in md and ".png" not in md


# ---------------------------------------------------------------------------- every task's metrics

FIXTURES = Path(__file__).parents[1] / "fixtures"


def load(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


def metric(name: str):
    return lambda r: r["eval"].get(name)


def history_values(doc: dict, precision: str, epoch: int, name: str) -> list[float]:
    return [e[name] for r in runs_of(doc, precision) for e in r["eval_history"] if e["epoch"] == epoch]


def test_multiclass_table_has_accuracy_and_macro_f1_with_deltas_in_points():
    doc = load("results_multiclass.json")
    rows = table_rows(render_markdown(doc))
    assert list(rows["fp32"]) == [
        "precision",
        "accuracy",
        "Δacc vs fp32 (pts)",
        "macro-F1",
        "ΔF1 vs fp32 (pts)",
        "train time (s)",
        "speedup",
        "samples/s",
        "peak memory (MiB, RSS)",
        "increase over start (MiB)",
        "memory ratio",
        "skipped steps",
        "final loss scale",
    ]
    for name, header, delta in (
        ("accuracy", "accuracy", "Δacc vs fp32 (pts)"),
        ("f1", "macro-F1", "ΔF1 vs fp32 (pts)"),
    ):
        base = statistics.mean(values(doc, "fp32", metric(name)))
        for p in ("fp32", "bf16"):
            assert rows[p][header] == pm(values(doc, p, metric(name)), ".4f")
        assert rows["fp32"][delta] == "baseline"
        assert rows["bf16"][delta] == f"{(statistics.mean(values(doc, 'bf16', metric(name))) - base) * 100:+.2f}"
    # The fixture's bf16 F1 is lower than fp32's: the Δ is a real, negative number.
    assert rows["bf16"]["ΔF1 vs fp32 (pts)"].startswith("-")


def test_summarize_gives_every_metric_and_its_delta():
    doc = load("results_multiclass.json")
    rows = {r["precision"]: r for r in summarize(doc)}
    f1 = {p: values(doc, p, metric("f1")) for p in ("fp32", "bf16")}
    assert rows["bf16"]["f1_n"] == 2
    assert rows["bf16"]["f1_mean"] == pytest.approx(statistics.mean(f1["bf16"]))
    assert rows["bf16"]["f1_std"] == pytest.approx(statistics.stdev(f1["bf16"]))
    assert rows["bf16"]["delta_f1_pts"] == pytest.approx(
        (statistics.mean(f1["bf16"]) - statistics.mean(f1["fp32"])) * 100
    )
    for r in rows.values():  # eval keys that are not metrics get no columns
        assert not {f"{k}_{s}" for k in ("loss", "time_s", "samples_per_s") for s in ("n", "pts")} & set(r)
        assert not {"loss_mean", "time_s_mean", "delta_loss", "delta_time_s", "delta_samples_per_s"} & set(r)


def test_task_line_names_kind_labels_in_id_order_and_columns():
    doc = load("results_multiclass.json")
    md = render_markdown(doc)
    line = next(ln for ln in md.splitlines() if ln.startswith("**task**"))
    assert "multi-class classification" in line and "3 labels" in line
    assert "negative, neutral, positive" in line  # id order, as results.json lists them
    assert "`text`" in line and "label column: `label`" in line
    doc["runs"][0]["task"]["names"] = ["positive", "negative", "neutral"]  # another order is shown as is
    assert "positive, negative, neutral" in render_markdown(doc)


def test_regression_table_has_correlations_and_no_accuracy():
    doc = load("results_regression.json")
    assert not any("accuracy" in r["eval"] for r in doc["runs"])
    md = render_markdown(doc)
    rows = table_rows(md)
    headers = list(rows["fp32"])
    assert headers[:5] == ["precision", "Pearson r", "ΔPearson vs fp32", "Spearman ρ", "ΔSpearman vs fp32"]
    assert "accuracy" not in headers and not any(h.startswith("Δacc") for h in headers)
    for name, header, delta in (
        ("pearsonr", "Pearson r", "ΔPearson vs fp32"),
        ("spearmanr", "Spearman ρ", "ΔSpearman vs fp32"),
    ):
        base = statistics.mean(values(doc, "fp32", metric(name)))
        bf16 = statistics.mean(values(doc, "bf16", metric(name)))
        assert rows["bf16"][header] == pm(values(doc, "bf16", metric(name)), ".4f")
        assert rows["bf16"][delta] == f"{bf16 - base:+.4f}"  # correlations keep their units, not points
    summary = {r["precision"]: r for r in summarize(doc)}
    assert summary["bf16"]["accuracy_mean"] is None and summary["bf16"]["delta_accuracy_pts"] is None
    assert summary["bf16"]["delta_pearsonr"] == pytest.approx(
        statistics.mean(values(doc, "bf16", metric("pearsonr")))
        - statistics.mean(values(doc, "fp32", metric("pearsonr")))
    )
    line = next(ln for ln in md.splitlines() if ln.startswith("**task**"))
    assert "regression" in line and "`stsb`" in line and "`sentence1`, `sentence2`" in line


def test_an_undefined_final_correlation_is_not_replaced_by_an_earlier_evaluations():
    """Was: a run whose final Pearson/Spearman was null (constant predictions, said in eval.undefined) showed its
    last defined evaluation's figure in the table and its Δ, under a note saying it was shown as n/a."""
    doc = load("results_regression.json")
    for r in runs_of(doc, "fp32"):
        r["eval"].update(pearsonr=None, spearmanr=None)
        r["eval"]["undefined"] = {
            "pearsonr": "the predictions are constant",
            "spearmanr": "the predictions are constant",
        }
    rows = {r["precision"]: r for r in summarize(doc)}
    assert rows["fp32"]["pearsonr_mean"] is None and rows["fp32"]["pearsonr_n"] == 0
    assert rows["bf16"]["delta_pearsonr"] is None and rows["bf16"]["pearsonr_mean"] is not None
    cells = table_rows(render_markdown(doc))["fp32"]
    assert cells["Pearson r"] == "n/a", cells
    # A run whose eval lacks the key (nothing evaluated at the end) still reads its last evaluation.
    for r in runs_of(doc, "fp32"):
        del r["eval"]["pearsonr"]
    assert summarize(doc)[0]["pearsonr_mean"] == pytest.approx(
        statistics.mean(r["eval_history"][-1]["pearsonr"] for r in runs_of(doc, "fp32"))
    )


def test_binary_f1_names_the_class_it_scores():
    """Was: "f1" everywhere, while binary F1 scores label id 1, the name that sorts second: for Positive/negative
    that is negative's F1, which nothing said."""
    from mixft.report.summary import metric_label
    from recipes.text_classification import describe_task

    assert metric_label("f1", {"names": ["Positive", "negative"]}) == "F1 (negative)"
    assert metric_label("f1", {"names": ["a", "b", "c"]}) == "macro-F1" and metric_label("f1") == "F1"
    task = SimpleNamespace(
        kind="classification", text_columns=("text",), label_names=("Positive", "negative"), num_labels=2
    )
    assert describe_task(task).endswith("; F1 scores 'negative'")
    doc = load("results_multiclass.json")
    for r in doc["runs"]:
        r["task"]["names"] = ["Positive", "negative"]
    assert "F1 (negative)" in tables(render_markdown(doc))[0][0]


def test_regression_noise_note_uses_the_first_correlation():
    doc = load("results_regression.json")
    md = render_markdown(doc)
    a, b = values(doc, "bf16", metric("pearsonr")), values(doc, "fp32", metric("pearsonr"))
    pooled = ((statistics.stdev(a) ** 2 + statistics.stdev(b) ** 2) / 2) ** 0.5
    assert f"ΔPearson {statistics.mean(a) - statistics.mean(b):+.4f} is within 2× the seed spread" in md
    assert f"pooled std {pooled:.4f}, 2 vs 2 seeds" in md
    assert "Δacc" not in md


@pytest.mark.parametrize(
    "fixture, metrics, headers",
    [
        ("results_multiclass.json", ["accuracy", "f1"], ["accuracy", "macro-F1"]),
        ("results_regression.json", ["pearsonr", "spearmanr"], ["Pearson r", "Spearman ρ"]),
        ("results_compare.json", ["accuracy"], ["accuracy"]),
    ],
)
def test_eval_history_table_every_metric_per_precision_per_epoch(fixture, metrics, headers):
    doc = load(fixture)
    md = render_markdown(doc)
    assert "## Eval per epoch" in md
    history = tables(md)[1]
    header = [c.strip() for c in history[0].strip("|").split("|")]
    assert header == ["epoch", "precision", "step", *headers, "eval loss"]
    body = [[c.strip() for c in ln.strip("|").split("|")] for ln in history[2:]]
    precisions = list(dict.fromkeys(r["precision"] for r in doc["runs"]))
    epochs = sorted({e["epoch"] for r in doc["runs"] for e in r["eval_history"]})
    assert [(row[0], row[1]) for row in body] == [(str(e), p) for e in epochs for p in precisions]
    for row in body:
        epoch, p = int(row[0]), row[1]
        for name, cell in zip(metrics + ["loss"], row[3:]):
            assert cell == pm(history_values(doc, p, epoch, name), ".4f"), (epoch, p, name)


def test_eval_history_absent_means_no_history_section(doc):
    for r in doc["runs"]:
        r["eval_history"] = []
    assert "## Eval per epoch" not in render_markdown(doc)


def test_old_documents_without_task_or_hardware_render_as_before(doc):
    assert "task" not in doc["runs"][0] and "hardware" not in doc
    md = render_markdown(doc)
    assert "**task**" not in md and "## Hardware" not in md and "(probe)" not in md
    assert list(table_rows(md)["fp32"])[:3] == ["precision", "accuracy", "Δacc vs fp32 (pts)"]
    for r in doc["runs"]:  # a recipe without labels (mlp-synthetic) records task: null
        r["task"] = None
    assert "**task**" not in render_markdown(doc)


def test_runs_without_any_metric_keep_an_accuracy_column(doc):
    for r in doc["runs"]:
        r["eval"] = {"loss": 0.5}
        r["eval_history"] = []
    cells = table_rows(render_markdown(doc))["bf16"]
    assert cells["accuracy"] == "n/a" and cells["Δacc vs fp32 (pts)"] == "n/a"


# ---------------------------------------------------------------------------- hardware and probe


def cpu_hardware(amx: bool | None, **extra) -> dict:
    flags = {"amx_bf16": amx, "avx512_bf16": amx, "avx512_fp16": False if amx is not None else None}
    return {
        "device": "cpu",
        "cpu": {
            "model": "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz",
            "cores": 2,
            "flags": flags,
            "source": "/proc/cpuinfo",
        },
        "gpu": None,
        "torch": "2.13.0+cpu",
        "torch_threads": 2,
        "cuda": None,
        "python": "3.11.9",
        "os": "Linux",
        **extra,
    }


def probe_dict(hw: dict) -> dict:
    from mixft.report.probe_result import PrecisionProbe, ProbeResult

    rows = [
        PrecisionProbe(
            "fp32",
            step_s=0.2,
            step_times_s=[0.31, 0.2, 0.21, 0.2],
            warmup_steps=1,
            speedup_vs_fp32=1.0,
            matmul_flops_per_s=2.45e11,
            matmul_ratio_vs_fp32=1.0,
        ),
        PrecisionProbe(
            "bf16",
            step_s=0.125,
            step_times_s=[0.2, 0.125, 0.126, 0.125],
            warmup_steps=1,
            speedup_vs_fp32=1.6,
            matmul_flops_per_s=1.162e12,
            matmul_ratio_vs_fp32=4.74,
        ),
    ]
    result = ProbeResult(
        recipe="bert-sst2",
        model="tiny-bert",
        dataset="sst2",
        device="cpu",
        hardware=hw,
        batch={"shape": [32, 25], "samples": 32, "tokens": 640},
        matmul_shapes=[{"rows": 800, "in": 384, "out": 384, "bias": True, "calls": 24}],
        rows=rows,
        recommended="bf16",
        reason="bf16: 1.60x fp32 per training step",
        measured_at="2026-11-22T12:00:00+00:00",
        wall_s=21.3,
        time_budget_s=30.0,
    )
    return json.loads(json.dumps(result.to_dict()))  # as results.json stores it


def section(md: str, heading: str) -> str:
    """The text of a ``## heading`` section, up to the next ``## ``."""
    start = md.index(heading)
    end = md.find("\n## ", start + len(heading))
    return md[start:] if end < 0 else md[start:end]


@pytest.mark.parametrize("amx", [True, False, None])
def test_hardware_section_names_machine_and_flags_as_context(doc, amx):
    from mixft.amp.hardware import hardware_line

    hw = cpu_hardware(amx)
    doc["hardware"] = hw
    text = section(render_markdown(doc), "## Hardware")
    assert hardware_line(hw) in text
    yes_no = {True: "yes", False: "no", None: "unknown"}
    for flag, value in hw["cpu"]["flags"].items():
        assert f"`{flag}` {yes_no[value]}" in text
    assert "torch 2.13.0+cpu (2 threads)" in text
    # Nothing derived from the flags: no forecast, whatever they are.
    for rule in ("expect", "likely", "has no AMX", "has AMX", "pay off"):
        assert rule not in text


def test_hardware_section_shows_torchs_native_check_when_recorded(doc):
    hw = cpu_hardware(False)
    doc["hardware"] = hw
    assert "Native in torch's check" not in section(render_markdown(doc), "## Hardware")  # older records: nothing
    doc["hardware"] = {**hw, "native": {"bf16": False, "fp16": False, "via": "oneDNN", "cpu_capability": "AVX2"}}
    text = section(render_markdown(doc), "## Hardware")
    assert (
        "- Native in torch's check: bf16: no (emulated: CPU capability AVX2, oneDNN has no bf16 here), "
        "fp16: no (emulated)"
    ) in text


def _times(doc: dict, precision: str, seconds: float) -> None:
    for r in runs_of(doc, precision):
        r["train_time_s"] = seconds


@pytest.mark.parametrize(
    "amx, bf16_s, says, never",
    [
        (False, 2.0, "bf16 trained 2.00x faster than fp32", "slower"),  # no AMX, measured faster: says faster
        (True, 8.0, "bf16 trained at 0.50x fp32's speed, slower", "faster than fp32"),  # AMX, measured slower
    ],
)
def test_hardware_words_follow_the_measured_ratio_not_the_flags(doc, amx, bf16_s, says, never):
    _times(doc, "fp32", 4.0)
    _times(doc, "bf16", bf16_s)
    doc["runs"] = [r for r in doc["runs"] if r["precision"] in ("fp32", "bf16")]
    doc["hardware"] = cpu_hardware(amx)
    md = render_markdown(doc)
    text = section(md, "## Hardware")
    assert says in text and never not in text
    # The sentence agrees with the table's speedup cell.
    assert table_rows(md)["bf16"]["speedup"] == f"{4.0 / bf16_s:.2f}×"


def test_hardware_without_any_measurement_offers_probe():
    from mixft.report.markdown import measured_speed_sentence

    assert "`--probe`" in measured_speed_sentence([])
    assert "Nothing in these results measured" in measured_speed_sentence(
        [{"precision": "fp32", "is_baseline": True, "speedup": None}]
    )
    assert "the probe below" in measured_speed_sentence([], probe={"format": 1})


def test_gpu_hardware_lists_the_gpu(doc):
    from mixft.amp.hardware import hardware_line

    hw = cpu_hardware(
        False,
        device="cuda:0",
        cuda="12.4",
        gpu={
            "name": "NVIDIA H100 80GB HBM3",
            "compute_capability": "9.0",
            "tf32": True,
            "bf16": True,
            "memory_bytes": 80 * 2**30,
        },
    )
    doc["hardware"] = hw
    text = section(render_markdown(doc), "## Hardware")
    assert hardware_line(hw) in text and "NVIDIA H100 80GB HBM3" in text
    assert "compute capability 9.0 · TF32 yes · bf16 yes · 80 GiB" in text and "CUDA 12.4" in text
    assert "Measured in these runs: bf16 trained" in text


def test_probe_section_renders_from_the_stored_dict(doc):
    from mixft.report.probe_result import ProbeResult, probe_markdown

    hw = cpu_hardware(True)
    doc["hardware"] = {**hw, "probe": probe_dict(hw)}
    md = render_markdown(doc)
    expected = probe_markdown(ProbeResult.from_dict(doc["hardware"]["probe"])).rstrip("\n")
    assert expected in md
    probe_text = section(md, "(probe)")
    assert "bf16: 1.60x fp32 per training step" in probe_text and "1162.0" in probe_text
    # Hardware first, then the probe, then the charts.
    assert md.index("## Hardware") < md.index("(probe)") < md.index("## Charts")


def test_probe_only_document_renders_hardware_and_probe():
    hw = cpu_hardware(False)
    md = render_markdown(
        {"created": "2026-11-22T12:00:00+00:00", "runs": [], "hardware": {**hw, "probe": probe_dict(hw)}}
    )
    assert "No training runs" in md and "probe below" in md
    assert "## Hardware" in md and "the probe below measured one" in md
    assert "| bf16 | 125.0 | 1.60x |" in md


def test_unreadable_probe_and_partial_hardware_do_not_crash(doc):
    doc["hardware"] = {"device": "cpu", "probe": {"format": 99, "rows": "?"}}
    md = render_markdown(doc)
    assert "## Hardware" in md and "`amx_bf16` unknown" in md
    assert "cannot read" in section(md, "(probe)") and "format 99" in md


def test_results_document_puts_hardware_at_the_top_level():
    from mixft.results import results_document

    run = load("results_multiclass.json")["runs"][0]
    hw = cpu_hardware(True)
    doc = results_document([run], hardware=hw)
    assert doc["hardware"] == hw and doc["runs"] == [run]
    assert "hardware" not in results_document([run])  # older shape when no hardware is given
    assert "## Hardware" in render_markdown(doc)


# ---------------------------------------------------------------------------- frames


def test_results_frame_and_compare_frame_carry_every_metric():
    from mixft.report.frames import compare_frame, results_frame

    doc = load("results_regression.json")
    frame = results_frame(doc)
    cols = list(frame.columns)
    assert cols[cols.index("accuracy") + 1 : cols.index("accuracy") + 3] == ["pearsonr", "spearmanr"]
    assert list(frame["pearsonr"]) == [r["eval"]["pearsonr"] for r in doc["runs"]]
    assert frame["accuracy"].isna().all()
    cmp = compare_frame(doc)
    assert cmp.loc["bf16", "spearmanr_mean"] == pytest.approx(statistics.mean(values(doc, "bf16", metric("spearmanr"))))
    assert cmp.loc["bf16", "delta_spearmanr"] == pytest.approx(
        statistics.mean(values(doc, "bf16", metric("spearmanr")))
        - statistics.mean(values(doc, "fp32", metric("spearmanr")))
    )
    multi = compare_frame(load("results_multiclass.json"))
    assert {"f1_mean", "f1_std", "delta_f1_pts", "accuracy_mean", "delta_accuracy_pts"} <= set(multi.columns)


# ---------------------------------------------------------------------------- memory breakdown, agreement


def _memory(saved: int, *, device: int | None = 900 * 2**20, dtype_bf16: int = 0) -> dict:
    return {
        "parameters": 90 * 2**20,
        "gradients": 90 * 2**20,
        "optimizer_state": 180 * 2**20,
        "saved_activations_peak": saved,
        "saved_by_dtype": {"bfloat16": dtype_bf16, "float32": saved - dtype_bf16} if dtype_bf16 else {"float32": saved},
        "saved_by_op": [["linear", saved // 2], ["layer_norm", saved // 4]],
        "device_figure": device,
        "device_figure_kind": "cpu_rss",
    }


def test_lighter_sentence_in_words():
    from mixft.report.markdown import lighter_sentence

    assert lighter_sentence("bf16", 83, 100) == "bf16 saved 0.83x the activation bytes of fp32: 17% lighter"
    assert lighter_sentence("fp16", 110, 100).endswith("10% heavier")
    assert lighter_sentence("bf16", 100, 100).endswith("the same within 1%")


def test_memory_section_table_and_words(doc):
    for r in doc["runs"]:
        saved = {"fp32": 200 * 2**20, "bf16": 166 * 2**20, "fp16": 150 * 2**20}[r["precision"]]
        r["memory"] = _memory(saved, dtype_bf16=0 if r["precision"] == "fp32" else 100 * 2**20)
    md = render_markdown(doc)
    text = section(md, "## Memory breakdown")
    rows = table_rows(text, 0)
    assert rows["fp32"]["saved activations (peak) (MiB)"] == "200.0"
    assert rows["bf16"]["saved vs fp32"] == "0.83×" and rows["fp32"]["saved vs fp32"] == "baseline"
    assert rows["bf16"]["optimizer state (MiB)"] == "180.0"
    assert rows["bf16"]["device figure (MiB, RSS)"] == "900.0"
    assert "bf16 saved 0.83x the activation bytes of fp32: 17% lighter" in text
    assert "fp16 saved 0.75x the activation bytes of fp32: 25% lighter" in text
    # 100 of 166 MiB in bfloat16: 60%.
    assert "**bf16** saved by dtype: bfloat16 100.0 MiB (60%), float32 66.0 MiB (40%)" in text
    assert "top ops: linear 83.0 MiB (50%)" in text


def test_memory_section_absent_without_records(doc):
    assert "## Memory breakdown" not in render_markdown(doc)
    doc["runs"][0]["memory"] = _memory(100, device=None)  # fp32 only, no device figure: no ratio, no crash
    text = section(render_markdown(doc), "## Memory breakdown")
    assert "Lighter?" not in text and table_rows(text, 0)["fp32"]["device figure (MiB, device)"] == "n/a"


def test_agreement_section(doc):
    from mixft.report.agreement import agreement_vs_fp32

    labels = [0] * 10 + [0] * 3 + [1] + [2] * 6
    fp32 = [0] * 10 + [1, 1, 1] + [1] + [0] * 6
    bf16 = [0] * 10 + [1, 1, 2] + [0] + [2] * 6
    for r in doc["runs"]:
        if r["precision"] == "bf16":
            r["agreement_vs_fp32"] = agreement_vs_fp32("bf16", bf16, fp32, labels)
    md = render_markdown(doc)
    text = section(md, "## Agreement with fp32")
    rows = table_rows(text, 0)
    row = rows["bf16"]
    assert row["flipped labels"] == "8 (40.0%)" and row["Δaccuracy vs fp32 (pts)"] == "+25.00"
    assert row["only this right / only fp32 right"] == "6 / 1" and row["McNemar p"] == "0.125"
    assert "not distinguishable from noise" in text
    assert "## Agreement with fp32" not in render_markdown(
        {**doc, "runs": [{k: v for k, v in r.items() if k != "agreement_vs_fp32"} for r in doc["runs"]]}
    )


def test_agreement_section_regression(doc):
    from mixft.report.agreement import agreement_vs_fp32

    doc["runs"][2]["agreement_vs_fp32"] = agreement_vs_fp32("bf16", [1.0, 2.0], [1.5, 2.0], regression=True)
    text = section(render_markdown(doc), "## Agreement with fp32")
    assert "| 0.25 | 0.5 |" in text


def with_pure_bf16(doc: dict) -> dict:
    """The fixture's fp16 runs relabelled as bf16-pure runs (bf16 autocast, the model held in bf16)."""
    for r in runs_of(doc, "fp16"):
        r.update(precision="bf16-pure", autocast_dtype="bfloat16", param_dtype="bfloat16", grad_scaler=False)
    return doc


def test_what_holding_the_model_in_bf16_cost_is_said_against_amp_seed_by_seed(doc):
    doc = with_pure_bf16(doc)
    pure, amp = runs_of(doc, "bf16-pure"), runs_of(doc, "bf16")
    pure[0]["eval"]["accuracy"] = amp[0]["eval"]["accuracy"] - 0.004  # seed 0: 0.4 pt below AMP
    pure[1]["eval"]["accuracy"] = amp[1]["eval"]["accuracy"] + 0.001  # seed 1: 0.1 pt above
    md = render_markdown(doc)
    note = next(line for line in md.splitlines() if line.startswith("- **bf16-pure** against **bf16**"))
    assert "Δacc -0.15 pts (mean over 2 seed(s), lower on 1)" in note
    speed = statistics.mean(r["train_time_s"] for r in amp) / statistics.mean(r["train_time_s"] for r in pure)
    assert f"at {speed:.2f}× AMP's training speed" in note
    assert "residual stream" in note and "docs/pure_bf16.md" in note  # why, where it is measured


def test_bf16_pure_without_amp_beside_it_says_how_to_see_its_cost(doc):
    doc = with_pure_bf16(doc)
    doc["runs"] = [r for r in doc["runs"] if r["precision"] != "bf16"]
    md = render_markdown(doc)
    assert "**bf16-pure** has no AMP run in bfloat16 beside it here" in md
    assert "against **bf16**" not in md
    assert "has no AMP run" not in render_markdown(json.loads(FIXTURE.read_text(encoding="utf-8")))  # no pure run


def test_evaluations_inside_an_epoch_get_a_row_each_and_only_seeds_are_averaged():
    # Was: with --eval-steps, a run's evaluations at steps 5 and 10 of epoch 1 were averaged into one "epoch 1"
    # row at "step 7.5" with a ± between them, captioned "over seeds"; the chart kept only the epoch's last.
    doc = load("results_compare.json")
    for r in doc["runs"]:
        r["eval_history"] = [
            {**e, "epoch": epoch, "step": step, "accuracy": 0.5 + step / 100 + r["seed"] / 1000}
            for e, (epoch, step) in zip(r["eval_history"] * 2, [(1, 5), (1, 10), (2, 15), (2, 20)])
        ]
    md = render_markdown(doc)
    assert "## Eval per evaluation" in md and "## Eval per epoch" not in md
    history = next(t for t in tables(md) if t[0].startswith("| step | precision | epoch |"))
    body = [[c.strip() for c in ln.strip("|").split("|")] for ln in history[2:]]
    assert [(row[0], row[1], row[2]) for row in body] == [
        (str(step), p, str(epoch))
        for epoch, step in [(1, 5), (1, 10), (2, 15), (2, 20)]
        for p in ("fp32", "bf16", "fp16")
    ]
    fp32_at_5 = next(row for row in body if row[:2] == ["5", "fp32"])
    assert fp32_at_5[3] == pm([0.55, 0.551], ".4f")  # seeds 0 and 1 at step 5, nothing else
    from mixft.report.summary import chart_titles, eval_series

    assert eval_series(doc["runs"][0], "accuracy", "step") == {5: 0.55, 10: 0.6, 15: 0.65, 20: 0.7}
    assert chart_titles(doc)["eval_accuracy.png"] == "Eval accuracy per evaluation"


def test_steps_per_run_are_the_runs_own_counts_not_a_mean_over_seeds():
    # Was: seeds stopped early at 6, 6 and 4 steps said "steps/run 5" (the mean 5.33, cut to an int).
    doc = load("results_compare.json")
    doc["runs"] = [r for r in doc["runs"] if r["precision"] == "fp32"]
    doc["runs"][1]["steps"] = 14
    md = render_markdown(doc)
    assert "**steps/run** 14, 20" in md


def test_steps_skipped_without_a_grad_scaler_are_not_blamed_on_one():
    # Was: fp32 with --inject-nonfinite: "the GradScaler skipped 4 of 8 optimizer steps ..., lowering the loss
    # scale each time", beside "no GradScaler".
    doc = load("results_compare.json")
    for r in doc["runs"]:
        if r["precision"] == "fp32":
            r["skipped_steps"] = 2
            r["history"]["skipped"] = [i in (3, 7) for i in range(len(r["history"]["step"]))]
    md = render_markdown(doc)
    fp32 = next(ln for ln in md.splitlines() if ln.startswith("- **fp32**:"))
    assert "GradScaler skipped" not in fp32 and "loss scale each time" not in fp32
    assert "optimizer steps were skipped for inf/NaN gradients" in fp32 and "no GradScaler" in fp32
    fp16 = next(ln for ln in md.splitlines() if ln.startswith("- **fp16**:"))
    assert "the GradScaler skipped 5 of 40 optimizer steps" in fp16 and "calibrates" in fp16


def test_skips_that_inject_nonfinite_put_there_are_not_called_calibration():
    # Was: "That is normal early in fp16 training while the scale calibrates" of skips every one injected.
    doc = load("results_compare.json")
    for r in doc["runs"]:
        r["config"] = {**(r.get("config") or {}), "inject_nonfinite": 0.4}
    md = render_markdown(doc)
    fp16 = next(ln for ln in md.splitlines() if ln.startswith("- **fp16**:"))
    assert "the GradScaler skipped 5 of 40 optimizer steps" in fp16
    assert "--inject-nonfinite put inf/NaN into these runs' gradients on purpose" in fp16
    assert "calibrates" not in fp16
