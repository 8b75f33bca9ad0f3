"""--probe through the CLI, and what later runs do with the cached answer."""

from __future__ import annotations

import json

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
    printed = capsys.readouterr().out
    assert code == 0
    assert "recommendation" in printed and "fp32" in printed and "bf16" in printed
    doc = json.loads((tmp_path / "p" / "probe.json").read_text())
    assert doc["runs"] == [] and doc["hardware"]["probe"]["recipe"] == "bert-sst2"
    assert {"amx_bf16", "avx512_bf16", "avx512_fp16"} <= set(doc["hardware"]["cpu"]["flags"])
    assert "probe" in (tmp_path / "p" / "probe.md").read_text().lower()

    # Pretend this machine measured bf16 at half the fp32 rate: an --amp run then trains in
    # fp32 and says why in one line, citing the probe's figure and date; --precision bf16
    # keeps bf16 as asked and says what would be faster.
    (cached,) = (tmp_path / "cache").rglob("*.json")
    data = json.loads(cached.read_text())
    for row in data["rows"]:
        if row["precision"] == "bf16":
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
