"""mixft.report.plots: which charts are written, that they are real PNGs, and that writes are atomic."""

from __future__ import annotations

import ast
import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import matplotlib
import matplotlib.figure
import pytest

from mixft.report import plots

FIXTURE = Path(__file__).parents[1] / "fixtures" / "results_compare.json"
PACKAGE = Path(plots.__file__).resolve().parents[1]  # mixft/
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
ALL = ["loss.png", "loss_scale.png", "eval_accuracy.png", "time_memory.png"]


@pytest.fixture(scope="module")
def base_doc() -> dict:
    return json.loads(FIXTURE.read_text(encoding="utf-8"))


@pytest.fixture()
def doc(base_doc) -> dict:
    return copy.deepcopy(base_doc)


@pytest.fixture(scope="module")
def written(base_doc, tmp_path_factory) -> list[Path]:
    return plots.write_plots(base_doc, tmp_path_factory.mktemp("plots"))


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env={**os.environ, **env}
    )


def test_importing_plots_does_not_import_matplotlib():
    done = _python(
        "import sys, mixft, mixft.report.plots, mixft.report.markdown, mixft.report.summary\n"
        "assert not [m for m in sys.modules if m.startswith('matplotlib')], 'matplotlib imported'"
    )
    assert done.returncode == 0, done.stderr


def test_writing_plots_forces_no_backend(tmp_path):
    # A notebook's backend (here: svg, through MPLBACKEND) must survive write_plots: no
    # matplotlib.use("Agg"), no pyplot (which would pick and lock a backend).
    code = (
        "import json, sys\n"
        "from mixft.report.plots import write_plots\n"
        f"written = write_plots(json.load(open({str(FIXTURE)!r})), {str(tmp_path)!r})\n"
        "assert len(written) == 4, written\n"
        "assert 'matplotlib.pyplot' not in sys.modules, 'pyplot imported'\n"
        "import matplotlib\n"
        "assert matplotlib.get_backend() == 'svg', matplotlib.get_backend()\n"
    )
    done = _python(code, MPLBACKEND="svg")
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(ALL)


def _imports(path: Path) -> set[str]:
    """The mixft modules a mixft module imports (absolute names; relative ones resolved), at any level."""
    package = "mixft." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts[:-1])
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = (
                package.rsplit(".", node.level - 1)[0] + (f".{node.module}" if node.module else "")
                if node.level
                else (node.module or "")
            )
            if base.startswith("mixft"):
                found |= {f"{base}.{a.name}" for a in node.names} | {base}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("mixft.")}
    return found


def test_markdown_and_plots_share_summary_and_import_neither_each_other():
    markdown, plots_ = _imports(PACKAGE / "report" / "markdown.py"), _imports(PACKAGE / "report" / "plots.py")
    assert "mixft.report.summary" in markdown and "mixft.report.summary" in plots_
    assert not any(m.startswith("mixft.report.plots") for m in markdown)
    assert not any(m.startswith("mixft.report.markdown") for m in plots_)
    assert not any(m.startswith("mixft.report") for m in _imports(PACKAGE / "results.py"))


def test_writes_four_valid_pngs(written):
    assert [p.name for p in written] == ALL
    import matplotlib.image as mpimg

    for p in written:
        data = p.read_bytes()
        assert data[:8] == PNG_SIGNATURE, p
        img = mpimg.imread(p)
        h, w = img.shape[:2]
        assert w >= 400 and h >= 250, (p.name, w, h)
        assert img.std() > 0.01  # not a blank canvas
    assert not [q for q in written[0].parent.iterdir() if q.name.endswith(".tmp")]


def test_figures_are_closed(written):
    import matplotlib.pyplot as plt

    assert plt.get_fignums() == []


def test_planned_plots_matches_data(doc):
    assert plots.planned_plots(doc) == ALL
    no_scaler = {**doc, "runs": [r for r in doc["runs"] if not r["grad_scaler"]]}
    assert plots.planned_plots(no_scaler) == ["loss.png", "eval_accuracy.png", "time_memory.png"]
    for r in doc["runs"]:
        r["history"] = {}
        r["eval_history"] = []
    assert plots.planned_plots(doc) == ["time_memory.png"]
    assert plots.planned_plots({"runs": []}) == []


def test_missing_data_skips_charts_and_tolerates_nulls(doc, tmp_path):
    # No GradScaler runs, no eval history, all memory unknown, a NaN-turned-null loss.
    doc["runs"] = [r for r in doc["runs"] if not r["grad_scaler"]]
    for r in doc["runs"]:
        r["eval_history"] = []
        r["peak_memory_bytes"] = None
    doc["runs"][0]["history"]["loss"][3] = None
    out = plots.write_plots(doc, tmp_path)
    assert [p.name for p in out] == ["loss.png", "time_memory.png"]
    for p in out:
        assert p.read_bytes()[:8] == PNG_SIGNATURE
    assert not (tmp_path / "loss_scale.png").exists()


def test_single_seed_and_no_baseline(doc, tmp_path):
    doc["runs"] = [r for r in doc["runs"] if r["seed"] == 0 and r["precision"] != "fp32"]
    out = plots.write_plots(doc, tmp_path)
    assert [p.name for p in out] == ALL


def test_failed_save_keeps_old_file(doc, tmp_path, monkeypatch):
    target = tmp_path / "loss.png"
    target.write_bytes(b"old")

    def boom(self, *a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", boom)
    monkeypatch.setattr(plots, "planned_plots", lambda d: ["loss.png"])
    with pytest.raises(RuntimeError):
        plots.write_plots(doc, tmp_path)
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["loss.png"]
    import matplotlib.pyplot as plt

    assert plt.get_fignums() == []


@pytest.mark.parametrize(
    "fixture, eval_charts",
    [
        ("results_multiclass.json", ["eval_accuracy.png", "eval_f1.png"]),
        ("results_regression.json", ["eval_pearsonr.png", "eval_spearmanr.png"]),
    ],
)
def test_one_eval_chart_per_metric(fixture, eval_charts, tmp_path):
    doc = json.loads((FIXTURE.parent / fixture).read_text(encoding="utf-8"))
    out = plots.write_plots(doc, tmp_path)
    assert [p.name for p in out] == ["loss.png", *eval_charts, "time_memory.png"]
    import matplotlib.image as mpimg

    images = [mpimg.imread(tmp_path / name) for name in eval_charts]
    for img in images:
        assert img.std() > 0.01
    # Two metrics with different values draw different charts (not one chart copied).
    assert images[0].shape != images[1].shape or (images[0] != images[1]).any()
    from mixft.report.markdown import render_markdown

    md = render_markdown(doc, plots=out)
    for name in eval_charts:
        assert f"]({name})" in md
    assert ("Eval macro-F1 per epoch" in md) == (fixture == "results_multiclass.json")


def test_eval_chart_titles_name_the_metric(monkeypatch):
    doc = json.loads((FIXTURE.parent / "results_regression.json").read_text(encoding="utf-8"))
    titles = []
    real = plots._eval_figure

    def spy(doc_, metric):
        fig = real(doc_, metric)
        titles.append((metric, fig.axes[0].get_title(), fig.axes[0].get_ylabel()))
        return fig

    monkeypatch.setattr(plots, "_eval_figure", spy)
    monkeypatch.setattr(plots, "_save", lambda fig, path: None)
    plots.write_plots(doc, Path("/nonexistent"))
    assert titles == [
        ("pearsonr", "Eval Pearson r per epoch", "Pearson r"),
        ("spearmanr", "Eval Spearman ρ per epoch", "Spearman ρ"),
    ]


# ---------------------------------------------------------------------------- loss difference, memory breakdown


def test_loss_difference_is_zero_for_identical_curves(doc):
    from mixft.report.summary import loss_difference_series

    for r in doc["runs"]:
        if r["precision"] != "fp32":
            base = next(b for b in doc["runs"] if b["precision"] == "fp32" and b["seed"] == r["seed"])
            r["history"] = copy.deepcopy(base["history"])
    diffs = loss_difference_series(doc)
    assert set(diffs) == {"bf16", "fp16"}
    steps, diff = diffs["bf16"]
    assert steps and all(d == 0 for d in diff)


def test_loss_difference_pairs_same_seed_and_smooths(doc):
    from mixft.report.summary import loss_difference_series, smooth

    assert smooth([0, 3, 0, 3, 0], 3) == [1.5, 1.0, 2.0, 1.0, 1.5]
    runs = [r for r in doc["runs"] if r["precision"] in ("fp32", "bf16")]
    for r in runs:
        r["history"] = {"step": [1, 2, 3], "loss": [1.0, 1.0, 1.0]}
    # bf16 seed 0 sits 0.2 above fp32 seed 0, seed 1 0.4 above: mean 0.3 at every step.
    for r in runs:
        if r["precision"] == "bf16":
            r["history"]["loss"] = [1.2, 1.2, 1.2] if r["seed"] == 0 else [1.4, 1.4, 1.4]
    steps, diff = loss_difference_series({"runs": runs})["bf16"]
    assert steps == [1, 2, 3] and diff == pytest.approx([0.3, 0.3, 0.3])


def test_loss_chart_has_a_difference_panel_with_a_baseline(doc):
    fig = plots._loss_figure(doc, "fp32")
    assert len(fig.axes) == 2
    labels = [ln.get_label() for ln in fig.axes[1].get_lines()]
    assert "bf16 − fp32" in labels and "fp16 − fp32" in labels
    no_base = {"runs": [r for r in doc["runs"] if r["precision"] != "fp32"]}
    assert len(plots._loss_figure(no_base, "fp32").axes) == 1


def _memory(saved: int, device: int | None = 900 * 2**20) -> dict:
    return {
        "parameters": 90 * 2**20,
        "gradients": 90 * 2**20,
        "optimizer_state": 180 * 2**20,
        "saved_activations_peak": saved,
        "saved_by_dtype": {"bfloat16": saved // 2, "float32": saved // 2},
        "saved_by_op": [["linear", saved // 2]],
        "device_figure": device,
        "device_figure_kind": "cpu_rss",
    }


def test_memory_breakdown_chart_written_only_with_memory(doc, tmp_path):
    assert "memory_breakdown.png" not in plots.planned_plots(doc)
    for r in doc["runs"]:
        r["memory"] = _memory(200 * 2**20 if r["precision"] == "fp32" else 160 * 2**20)
    assert plots.planned_plots(doc)[-1] == "memory_breakdown.png"
    fig = plots._memory_breakdown_figure(doc, "fp32")
    ax = fig.axes[0]
    # Four stacked parts per precision, the top of fp32's stack = the sum of its parts.
    stacks = [p for p in ax.patches]
    assert len(stacks) == 4 * 3
    fp32_top = max(p.get_y() + p.get_height() for p in stacks if abs(p.get_x() + p.get_width() / 2) < 1e-9)
    assert fp32_top == pytest.approx(90 + 90 + 180 + 200)
    assert any(t.get_text() == "saved 0.80× fp32" for t in ax.texts)
    out = plots.write_plots(doc, tmp_path)
    assert (tmp_path / "memory_breakdown.png").read_bytes()[:8] == PNG_SIGNATURE
    assert out[-1].name == "memory_breakdown.png"


def test_memory_breakdown_tolerates_missing_device_figure(doc):
    doc["runs"][0]["memory"] = _memory(100, device=None)
    fig = plots._memory_breakdown_figure(doc, "fp32")
    assert len(fig.axes[0].patches) == 4
