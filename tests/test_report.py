"""mixft.report: summary numbers, report.md contents, write_report's files.

Expected values are computed here from the fixture with plain Python, never copied
from the function's output.
"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest

from mixft.report import render_markdown, summarize, write_report

FIXTURE = Path(__file__).parent / "fixtures" / "results_compare.json"
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


def table_rows(md: str) -> dict[str, dict[str, str]]:
    """The report's table as {precision: {header: cell}}."""
    lines = [ln for ln in md.splitlines() if ln.startswith("|")]
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
        "precision", "accuracy", "Δacc vs fp32 (pts)", "train time (s)", "speedup", "samples/s",
        "peak memory (MiB, allocated)", "memory ratio", "skipped steps", "final loss scale",
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
        for key, val in r.items():
            if isinstance(val, (int, float)) and not isinstance(val, bool):
                for fmt in (".4f", ".2f", ".1f", ".0f", "+.2f", "g"):
                    allowed.add(f"{val:{fmt}}")
        if r["peak_memory_mib_mean"] is not None:
            allowed.add(f"{r['peak_memory_mib_mean']:.1f}")
    table = "\n".join(ln for ln in md.splitlines() if ln.startswith("| ") and not ln.startswith("| precision"))
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
    assert md.startswith("# ") and "No runs" in md
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
    written = write_report(doc, out)
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
