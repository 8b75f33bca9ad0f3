"""--probe through the CLI, and what later runs do with the cached answer."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from mixft.cli.main import main


def _args(tiny_bert_dir, tiny_data_dir, out):
    return [
        "--recipe",
        "bert-sst2",
        "--model",
        str(tiny_bert_dir),
        "--data-dir",
        str(tiny_data_dir),
        "--output-dir",
        str(out),
        "--no-progress",
    ]


def test_probe_writes_hardware_and_later_amp_runs_are_told(
    tmp_path, tiny_bert_dir, tiny_data_dir, capsys, monkeypatch, native_bf16_cpu
):
    monkeypatch.setenv("MIXFT_CACHE", str(tmp_path / "cache"))
    code = main(_args(tiny_bert_dir, tiny_data_dir, tmp_path / "p") + ["--probe"])
    captured = capsys.readouterr()
    printed = captured.out
    assert code == 0
    assert "recommendation" in printed and "fp32" in printed and "bf16" in printed
    # probe.md is named once, on the last line: no "wrote probe.md and 0 chart(s)" before the table.
    assert printed.splitlines()[-1].endswith("report: " + str(tmp_path / "p" / "probe.md")), printed
    assert "probe.md" not in captured.err and "chart(s)" not in captured.err + printed
    doc = json.loads((tmp_path / "p" / "probe.json").read_text())
    assert doc["runs"] == [] and doc["hardware"]["probe"]["recipe"] == "bert-sst2"
    assert {"amx_bf16", "avx512_bf16", "avx512_fp16"} <= set(doc["hardware"]["cpu"]["flags"])
    assert "probe" in (tmp_path / "p" / "probe.md").read_text().lower()

    # Pretend this machine measured bf16 (and fp16) at half the fp32 rate: an --amp run then trains in
    # fp32 and says why in one line, citing the probe's figure and date; --precision bf16
    # keeps bf16 as asked and says what would be faster.
    (cached,) = (tmp_path / "cache").rglob("*.json")
    data = json.loads(cached.read_text())
    for row in data["rows"]:
        if row["precision"] != "fp32":  # fp16 too: its measured ratio (near 1 here) would name it the faster one
            row["speedup_vs_fp32"] = 0.5
    cached.write_text(json.dumps(data))
    code = main(_args(tiny_bert_dir, tiny_data_dir, tmp_path / "r") + ["--amp", "--max-steps", "1"])
    captured = capsys.readouterr()
    assert code == 0
    notices = [line for line in captured.err.splitlines() if "measured bf16 at 0.50x fp32" in line]
    date = data["measured_at"][:10]
    assert notices == [
        f"notice: --amp chose fp32: the probe of {date} measured bf16 at 0.50x fp32 per training "
        "step on this CPU; --precision bf16 forces bf16"
    ], captured.err
    assert "  speed      probe: bf16 step 0.50x fp32" in captured.out
    assert "  precision  fp32 (--amp)" in captured.out
    run = json.loads((tmp_path / "r" / "results.json").read_text())
    assert run["hardware"]["probe"] is not None
    assert (run["runs"][0]["precision"], run["runs"][0]["precision_requested"]) == ("fp32", "amp")
    assert run["runs"][0]["precision_reason"] == notices[0].removeprefix("notice: ")

    code = main(_args(tiny_bert_dir, tiny_data_dir, tmp_path / "b") + ["--precision", "bf16", "--max-steps", "1"])
    captured = capsys.readouterr()
    assert code == 0
    notices = [line for line in captured.err.splitlines() if "measured bf16 at 0.50x fp32" in line]
    assert len(notices) == 1 and notices[0].endswith(
        "--precision bf16 keeps bf16 as asked; --precision fp32 would be faster"
    ), captured.err
    run = json.loads((tmp_path / "b" / "results.json").read_text())["runs"][0]
    assert (run["precision"], run["precision_requested"]) == ("bf16", "bf16")


def test_an_unprobed_machine_says_how_to_probe(tmp_path, tiny_bert_dir, tiny_data_dir, capsys, monkeypatch):
    import mixft.amp.hardware

    # A CPU without native bf16, where --amp trains fp32 without measuring (one with it measures first:
    # tests/runs/test_amp_run.py).
    avx2 = {"bf16": False, "fp16": False, "via": "oneDNN", "cpu_capability": "AVX2", "compute_capability": None}
    monkeypatch.setattr(mixft.amp.hardware, "native_precisions", lambda device: dict(avx2))
    monkeypatch.setenv("MIXFT_CACHE", str(tmp_path / "empty-cache"))
    code = main(_args(tiny_bert_dir, tiny_data_dir, tmp_path / "r") + ["--amp", "--max-steps", "1"])
    captured = capsys.readouterr()
    assert code == 0
    assert "not probed on this machine yet (--probe" in captured.out
    assert "measured" not in captured.err
    doc = json.loads((tmp_path / "r" / "results.json").read_text())
    assert "probe" not in doc["hardware"] and doc["hardware"]["cpu"]["model"]


def test_a_probe_leaves_the_runs_in_its_directory_alone(tmp_path, tiny_bert_dir, tiny_data_dir, capsys, monkeypatch):
    # Was: --probe into a directory holding a comparison rewrote results.json with 0 runs and replaced report.md.
    monkeypatch.setenv("MIXFT_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "shared"
    assert main(_args(tiny_bert_dir, tiny_data_dir, out) + ["--compare", "fp32,bf16", "--max-steps", "1"]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.suffix in (".json", ".md", ".png")}
    assert main(_args(tiny_bert_dir, tiny_data_dir, out) + ["--probe"]) == 0
    capsys.readouterr()
    after = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.name in before}
    assert after == before  # results.json, report.md and every chart untouched
    assert json.loads((out / "probe.json").read_text())["hardware"]["probe"]["recipe"] == "bert-sst2"


def test_an_unreadable_cached_probe_is_named_in_the_warning_the_header_and_amps_notice(
    tmp_path, tiny_bert_dir, tiny_data_dir, capsys, monkeypatch, native_bf16_cpu
):
    # Was (issue 40, class C): a cut-short cache file read as "not probed on this machine yet", and --amp
    # switched from the probe's fp32 to bf16 without a word.
    import torch

    from mixft.amp.hardware import describe_hardware
    from mixft.report.probe_result import probe_cache_path

    monkeypatch.setenv("MIXFT_CACHE", str(tmp_path / "cache"))
    path = probe_cache_path(describe_hardware(torch.device("cpu")), "bert-sst2", str(tiny_bert_dir))
    path.parent.mkdir(parents=True)
    for name, text, cause in [
        ("cut", '{"recipe": "bert-sst2", "model": "', "not valid JSON, cut short or edited: "),
        ("format", '{"format": 999}', "format 999, where this mixft reads format 1"),
    ]:
        path.write_text(text)
        out = tmp_path / name
        assert main(_args(tiny_bert_dir, tiny_data_dir, out) + ["--amp", "--max-steps", "1"]) == 0
        captured = capsys.readouterr()
        warnings = [line for line in captured.err.splitlines() if str(path) in line]
        assert len(warnings) == 2, captured.err  # the file's warning, and --amp's notice
        assert warnings[0].startswith(f"warning: the cached probe at {path} is unreadable ({cause}")
        assert warnings[0].endswith(") and is ignored; --probe measures it again")
        assert warnings[1].startswith("notice: --amp chose bf16: this CPU runs bf16 natively")
        assert warnings[1].endswith(f"; no usable probe (the cached one at {path} is unreadable)")
        assert f"  speed      {warnings[0].removeprefix('warning: ')}" in captured.out.splitlines()
        assert "not probed" not in captured.out
        doc = json.loads((out / "results.json").read_text())
        assert doc["hardware"]["probe_cache_problem"]["path"] == str(path) and "probe" not in doc["hardware"]
        assert doc["runs"][0]["precision_reason"] == warnings[1].removeprefix("notice: ")
        assert path.read_text() == text  # ignored, not replaced: --probe does that


@pytest.mark.parametrize("where", ["a-file", "under-a-file", "proc"])
def test_probe_refuses_a_cache_it_cannot_write_before_measuring(
    where, tmp_path, tiny_bert_dir, tiny_data_dir, capsys, monkeypatch
):
    # Was: the probe measured, then failed writing the cache with exit 4, and OUTPUT_DIR held only its lock file.
    import mixft.runs.probe

    plain = tmp_path / "plainfile"
    plain.write_text("x")
    setting = {"a-file": plain, "under-a-file": plain / "sub", "proc": Path("/proc/mixft-cache")}[where]
    if where == "proc" and not Path("/proc/self").is_dir():
        pytest.skip("no /proc here")
    monkeypatch.setenv("MIXFT_CACHE", str(setting))

    def no_work(*args, **kwargs):
        raise AssertionError("the probe started measuring before checking its cache folder")

    monkeypatch.setattr(mixft.runs.probe, "_warmed_up", no_work)
    out = tmp_path / "out"
    assert main(_args(tiny_bert_dir, tiny_data_dir, out) + ["--probe"]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert line.startswith(f"finetune.py: error: MIXFT_CACHE={setting} cannot hold the probe cache: ")
    assert line.endswith("; set MIXFT_CACHE to a folder mixft can write")
    assert (f"{plain} is a file, not a folder" in line) == (where != "proc")
    assert not out.exists() and plain.read_text() == "x"


def test_a_cache_write_that_fails_after_measuring_keeps_probe_json(
    tmp_path, tiny_bert_dir, tiny_data_dir, capsys, monkeypatch
):
    # Was: exit 4 after the measurement, and the measurement lost. Now OUTPUT_DIR/probe.json comes first,
    # and a cache that fails afterwards (a full disk, a race) is a warning.
    import mixft.report.probe_result
    import mixft.runs.probe
    from mixft.atomic import WriteFailed

    real_probe = mixft.runs.probe.probe
    monkeypatch.setattr(mixft.runs.probe, "probe", lambda cfg, **kw: real_probe(cfg, **kw, time_budget_s=0.001))

    def disk_full(target, obj):
        raise WriteFailed(target, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))

    monkeypatch.setattr(mixft.report.probe_result, "write_json", disk_full)  # the cache's writer only
    cache = tmp_path / "cache"
    monkeypatch.setenv("MIXFT_CACHE", str(cache))
    out = tmp_path / "p"
    assert main(_args(tiny_bert_dir, tiny_data_dir, out) + ["--probe"]) == 0
    captured = capsys.readouterr()
    assert "recommendation" in captured.out
    doc = json.loads((out / "probe.json").read_text())
    assert doc["hardware"]["probe"]["recipe"] == "bert-sst2" and doc["hardware"]["probe"]["rows"]
    (warning,) = [line for line in captured.err.splitlines() if "could not be cached" in line]
    assert warning.startswith(f"warning: the probe could not be cached (MIXFT_CACHE={cache}): cannot write {cache}/")
    assert f"No space left on device (errno ENOSPC); it is kept in {out}/probe.json" in warning
    assert list(cache.rglob("*.json")) == []
