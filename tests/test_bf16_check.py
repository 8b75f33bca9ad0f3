"""benchmarks.bf16_check: every part on a tiny BERT on this CPU, the goals' verdicts, the refusal where bf16 is emulated."""

from __future__ import annotations

import json

import pytest

from benchmarks import bf16_check
from benchmarks.bf16_check import FLOOR, MAIN, PARTS, accuracy_against_trainer, goals_table


@pytest.fixture
def tiny_check(tmp_path):
    """``python -m benchmarks.bf16_check OUT --tiny --seeds 0,1`` in this process: (exit code, JSON, markdown, folder).

    Function-scoped, so that conftest's in-process CPU memory figure applies to its --compare runs."""
    out = tmp_path / "bf16-check"
    code = bf16_check.main([str(out), "--tiny", "--seeds", "0,1", "--budget-s", "600"])
    doc = json.loads((out / "bf16_check.json").read_text(encoding="utf-8"))
    return code, doc, (out / "bf16_check.md").read_text(encoding="utf-8"), out


def test_every_part_runs_on_a_tiny_bert_and_the_goals_read_its_figures(tiny_check):
    code, doc, markdown, out = tiny_check
    assert code == 0, [(p["name"], p["status"], p["note"]) for p in doc["parts"]]
    parts = {p["name"]: p for p in doc["parts"]}
    assert list(parts) == list(PARTS) and all(p["status"] == "ok" for p in parts.values())
    # main: the --compare's own results.json, each bf16 run against fp32 of its seed.
    runs = json.loads((out / "main_results.json").read_text(encoding="utf-8"))["runs"]
    assert [(r["precision"], r["seed"]) for r in runs] == [("fp32", 0), ("bf16", 0), ("fp32", 1), ("bf16", 1)]
    time = {(r["precision"], r["seed"]): r["train_time_s"] for r in runs}
    per_seed = [time[("fp32", s)] / time[("bf16", s)] for s in (0, 1)]
    assert parts["main"]["figures"]["bf16_vs_fp32_per_seed"] == pytest.approx(per_seed)
    assert parts["main"]["figures"]["bf16_vs_fp32"] == pytest.approx(sum(per_seed) / 2)  # the median of two
    base = json.loads((out / "bert_base_results.json").read_text(encoding="utf-8"))["runs"]
    assert [r["precision"] for r in base] == ["fp32", "bf16"]
    # peers: the four frameworks (in bf16 only, --tiny), the two ratios the goals read, accuracy over both seeds.
    peers = parts["peers"]["figures"]
    assert [(r["framework"], r["precision"]) for r in peers["rows"]] == [
        (f, "bf16") for f in bf16_check.PEER_FRAMEWORKS
    ]
    packed = next(r for r in peers["rows"] if r["framework"] == "hf-trainer-packed" and r["precision"] == "bf16")
    assert peers["mixft_vs_trainer_packed_bf16"] == packed["mixft_ratio"] > 0
    assert peers["accuracy"]["seeds"] == 2 and peers["accuracy"]["two_se_pts"] is not None
    # floor: each precision's stream step over its floor.
    floors = parts["floor"]["figures"]["floors"]
    assert set(floors) == {"fp32", "bf16"}
    for f in floors.values():
        assert f["above_floor"] == pytest.approx(f["step_s"] / (f["matmul_s"] + f["memory_s"]))
    ladder = parts["floor"]["figures"]["ladder_speedup"]
    assert set(ladder) == {"fp32", "bf16"} and all(v > 0 for v in ladder.values())
    assert f"- bf16: the shape ladder's step {ladder['bf16']:.2f}x as fast as exact shapes'" in markdown
    # Each CPU step change left out in turn over the same stream, per precision, with its rounds' range.
    changes = parts["floor"]["figures"]["step_changes"]
    assert set(changes) == {"fp32", "bf16"} and all(set(c) == set(bf16_check.STEP_CHANGES) for c in changes.values())
    for p, by_change in changes.items():
        for change, c in by_change.items():
            low, high = c["rounds"]
            assert 0 < low <= high and c["speedup"] > 0 and c["every_round"] == (low > 1)
            assert f"- {p}: {change} {c['speedup']:.3f}x (all ÷ -{change}; rounds {low:.3f}-{high:.3f}: " in markdown
    # The goals' table, under the parts' one: every goal with its figure.
    goals = markdown.split("## Goals", 1)[1].split("\n## ", 1)[0]
    assert f"| {MAIN.what} | >= 1.8x | {parts['main']['figures']['bf16_vs_fp32']:.2f}x |" in goals
    assert f"| {FLOOR['fp32'].what} | <= 2x | {floors['fp32']['above_floor']:.2f}x |" in goals
    assert goals.count("\n| ") == 1 + 7  # the header and seven goals
    assert "not measured" not in goals
    native = doc["hardware"]["native"]["bf16"]
    assert ("native bf16: no (emulated)" in goals) is (native is not True)


def test_a_cpu_without_native_bf16_is_refused_in_one_line_unless_asked(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(
        bf16_check, "native_precisions", lambda device: {"bf16": False, "via": "oneDNN", "cpu_capability": "AVX2"}
    )
    assert bf16_check.main([str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [err] and err.startswith("bf16_check: error: this CPU has no native bf16 (torch: CPU")
    assert "give --emulated" in err and not (tmp_path / "out").exists()
    # --emulated runs it (here with no budget: every part skipped, the files still written).
    assert bf16_check.main([str(tmp_path / "out"), "--emulated", "--budget-s", "0"]) == 0
    doc = json.loads((tmp_path / "out" / "bf16_check.json").read_text(encoding="utf-8"))
    assert [p["status"] for p in doc["parts"]] == ["skipped"] * len(PARTS)
    assert "| bert-sst2 main job, bf16 ÷ fp32 train speed (median over seeds) | >= 1.8x |  | not measured |" in (
        tmp_path / "out" / "bf16_check.md"
    ).read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "options, message",
    [
        (["--seeds", "0,0"], "--seeds must list distinct integers"),
        (["--seeds", "a"], "--seeds"),
        (["--parts", "main,nope"], "--parts must list some of main, bert-base, peers, floor"),
        (["--data-dir", "no-such-folder"], "--data-dir no-such-folder is not a folder"),
        (["--budget-s", "-1"], "--budget-s"),
    ],
)
def test_bad_options_are_one_line_exit_2(tmp_path, capsys, options, message):
    assert bf16_check.main([str(tmp_path / "out"), "--tiny", *options]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [err] and err.startswith("bf16_check: error:") and message in err
    assert not (tmp_path / "out").exists()


def doc_with(native: bool, main=None, packed=None, grouped=None, base=None, floors=None, accuracy=None) -> dict:
    parts = [
        {"name": "main", "figures": {"bf16_vs_fp32": main}},
        {"name": "bert-base", "figures": {"bf16_vs_fp32": base}},
        {
            "name": "peers",
            "figures": {
                "mixft_vs_trainer_packed_bf16": packed,
                "mixft_vs_trainer_grouped_bf16": grouped,
                "accuracy": accuracy,
            },
        },
        {"name": "floor", "figures": {"floors": floors or {}}},
    ]
    return {"device": "cpu", "hardware_line": "a CPU", "hardware": {"native": {"bf16": native}}, "parts": parts}


def test_each_goal_is_met_or_not_by_its_own_direction_and_emulation_is_said_on_bf16_figures_only():
    floors = {"fp32": {"above_floor": 1.9}, "bf16": {"above_floor": 2.4}}
    accuracy = {"gap_pts": -0.3, "two_se_pts": 0.5, "within_noise": True, "seeds": 3}
    rows = goals_table(doc_with(True, 1.85, 1.2, 2.0, None, floors, accuracy)).splitlines()
    assert rows[0] == "a CPU; native bf16: yes"
    verdicts = [row.rsplit("|", 2)[1].strip() for row in rows[4:]]
    assert verdicts == ["met", "not met", "met", "not measured", "met", "not met", "met"]
    emulated = goals_table(doc_with(False, 1.85, floors=floors)).splitlines()
    assert emulated[0] == "a CPU; native bf16: no (emulated)"
    assert emulated[4].endswith("| met (bf16 emulated: not the goal's CPU) |")
    assert emulated[8].endswith("| 1.90x | met |")  # fp32's floor is fp32's, whatever the CPU does with bf16


def test_accuracy_against_trainer_is_the_gap_against_two_standard_errors_of_the_difference():
    mixft = {"accuracy_per_seed": [0.90, 0.92, 0.94]}
    trainer = {"accuracy_per_seed": [0.88, 0.90, 0.92]}
    found = accuracy_against_trainer(mixft, trainer)
    # Each sample's variance 0.0004 over 3 seeds: 2 x sqrt(2 x 0.0004 / 3) = 0.03266 -> 3.27 points.
    assert found["gap_pts"] == pytest.approx(2.0) and found["two_se_pts"] == pytest.approx(3.266, abs=1e-3)
    assert found["within_noise"] is True and found["seeds"] == 3
    far = accuracy_against_trainer(mixft, {"accuracy_per_seed": [0.80, 0.81, 0.82]})
    assert far["within_noise"] is False
    assert accuracy_against_trainer(mixft, None) is None
    assert accuracy_against_trainer({"accuracy_per_seed": [0.9]}, {"accuracy_per_seed": [0.8]})["within_noise"] is None


def test_a_step_change_pays_only_when_every_rotated_round_says_so():
    # Round k of "all" and of the variant ran side by side: the per-round ratios are what the noise is read from.
    all_on = {"all": [1.0, 1.0, 2.0, 2.0], "rounds": [[1.0, 1.0], [2.0, 2.0]]}
    mixed = {"all": [1.2, 1.2, 1.8, 1.8], "rounds": [[1.2, 1.2], [1.8, 1.8]]}  # 1.2x in one round, 0.9x in the other
    c = bf16_check.step_change_speedup(all_on, mixed)
    assert c["rounds"] == pytest.approx([0.9, 1.2]) and not c["every_round"]
    assert c["speedup"] == pytest.approx(1.5 / 1.5)  # the medians over every step
    slower_without = {"all": [1.1, 1.1, 2.4, 2.4], "rounds": [[1.1, 1.1], [2.4, 2.4]]}
    c = bf16_check.step_change_speedup(all_on, slower_without)
    assert c["every_round"] and c["rounds"] == pytest.approx([1.1, 1.2]) and c["speedup"] == pytest.approx(1.75 / 1.5)
