"""mixft.runs.probe and mixft.report.probe_result: the real probe on a tiny BERT, the recommendation, what --amp makes of it, the cache, the renderers."""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import re
import statistics
from dataclasses import replace

import pytest
import torch
from conftest import make_data_dir
from fake_probes import NO_AMX, fake_hardware, fake_result, row

from mixft.amp.hardware import CPU_FLAGS
from mixft.amp.precision import choose_precision
from mixft.atomic import WriteFailed
from mixft.config.run_config import RunConfig
from mixft.errors import UsageError
from mixft.report.probe_result import (
    CacheProblem,
    ProbeResult,
    cached_probe,
    check_cache_dir,
    default_cache_dir,
    keep_probe,
    probe_cache_path,
    probe_key,
    probe_line,
    probe_markdown,
    read_cached_probe,
    render_probe_table,
    save_probe,
)
from mixft.runs.probe import (
    MAX_TIMED_STEPS,
    MIN_TIMED_STEPS,
    WARMUP_STEPS,
    _fill_ratios,  # the ratios probe() fills in, for hand-made rows
    probe,
    recommend,
)

NATIVE_BF16 = {"bf16": True, "fp16": True, "via": "oneDNN", "cpu_capability": "AVX512", "compute_capability": None}


def amp_with(result: ProbeResult, requested: str = "amp", option: str | None = None):
    """What a run of ``requested`` makes of ``result`` on a CPU with native bf16 (mixft.runs.runner does the same)."""
    return choose_precision(
        requested,
        "cpu",
        NATIVE_BF16,
        probe_ratios=result.step_ratios(),
        probe_date=result.measured_at[:10],
        option=option,
    )


# ------------------------------------------------------------------- recommendation
def test_slower_amp_recommends_fp32_and_amp_chooses_fp32_citing_the_ratio():
    result = fake_result(bf16_step_s=0.5 / 0.62)
    bf16 = result.row("bf16")
    assert bf16.speedup_vs_fp32 == pytest.approx(0.62)
    assert bf16.matmul_ratio_vs_fp32 == pytest.approx(26 / 50)
    assert result.recommended == "fp32"
    assert "bf16 measured 0.62x fp32" in result.reason
    assert result.step_ratios() == {"fp32": 1.0, "bf16": pytest.approx(0.62)}
    # Was: "--amp keeps bf16 as asked". --amp now chooses fp32 and says why, with the figure and its date.
    choice = amp_with(result)
    assert choice.precision == "fp32"
    assert choice.notice == (
        "notice: --amp chose fp32: the probe of 2026-11-22 measured bf16 at 0.62x fp32 per training step on this "
        "CPU; --precision bf16 forces bf16"
    )
    # Asked by name, bf16 is kept, and the notice says what would be faster.
    asked = amp_with(result, "bf16", option="--precision bf16")
    assert asked.precision == "bf16"
    assert asked.notice.endswith("--precision bf16 keeps bf16 as asked; --precision fp32 would be faster")


def test_faster_amp_is_recommended_and_amp_keeps_it_without_a_notice():
    result = fake_result(bf16_step_s=0.5 / 1.6, flags=dict.fromkeys(CPU_FLAGS, True))
    assert result.recommended == "bf16"
    assert result.reason == "bf16: 1.60x fp32 per training step"
    choice = amp_with(result)
    assert choice.precision == "bf16" and choice.notice is None
    assert "measured bf16 at 1.60x fp32" in choice.reason


def test_only_a_measured_slower_precision_changes_anything():
    result = fake_result(bf16_step_s=1.0)
    assert amp_with(result, "fp32").notice is None
    fp16 = amp_with(result, "fp16")  # not timed: nothing measured to warn about, but its speed is unknown
    assert fp16.precision == "fp16" and "not known until measured" in fp16.notice
    assert choose_precision("amp", "cpu", NATIVE_BF16).precision == "bf16"  # never probed here


def test_ratios_within_noise_are_called_about_the_same():
    assert "about the same" in fake_result(bf16_step_s=0.5 / 1.03).reason
    assert "about the same" in fake_result(bf16_step_s=0.5 / 0.97).reason
    assert "about the same" not in fake_result(bf16_step_s=0.5 / 1.2).reason


def test_unsteady_steps_are_called_rough():
    steady = [row("fp32", 0.5, 50.0), row("bf16", 0.4, 60.0)]
    unsteady = [row("fp32", 0.5, 50.0), replace(row("bf16", 0.4, 60.0), step_times_s=[0.9, 0.4, 0.2, 0.6])]
    for rows in (steady, unsteady):
        _fill_ratios(rows)
    assert unsteady[1].spread == pytest.approx((0.6 - 0.2) / 0.4)
    assert "varied" not in recommend(steady)[1]
    assert recommend(unsteady) == (
        "bf16",
        "bf16: 1.25x fp32 per training step; steps varied by up to 100% of their "
        "median (a busy machine?): probe again when idle",
    )


def test_recommend_needs_a_timed_precision():
    with pytest.raises(ValueError):
        recommend([row("fp32", None, 1.0)])
    assert recommend([row("fp32", 0.3, 1.0)]) == ("fp32", "fp32: no other precision was timed")


# ------------------------------------------------------------------------ renderers
def test_renderers_carry_the_figures():
    result = fake_result(bf16_step_s=0.5 / 0.62)
    table = render_probe_table(result)
    for figure in (
        "500.0",
        "806.5",
        "0.62x",
        "50.0",
        "26.0",
        "0.52x",
        "4.0",
        "0.08x",
        "3 (+1 warm-up)",
        "not timed: budget",
        "fp16 not timed: about 70 s",
        "flags: none of amx_bf16",
        "32 x 25",
        "recommendation: fp32: bf16 measured 0.62x",
    ):
        assert figure in table, figure
    markdown = probe_markdown(result)
    assert "| bf16 | 806.5 | 0.62x | 26.0 | 0.52x | 20% | 3 (+1 warm-up) |" in markdown
    assert "800x384->1536 (x6)" in markdown
    assert markdown.startswith("## ")
    assert probe_markdown(result, heading="###").startswith("### ")
    assert probe_line(result) == (
        "probe: bf16 step 0.62x fp32, matmul 0.52x; fp16 step not timed, matmul 0.08x (this CPU has no AMX); "
        "fastest: fp32"
    )


def test_to_dict_is_json_and_round_trips():
    result = fake_result(bf16_step_s=0.8)
    data = json.loads(json.dumps(result.to_dict()))
    assert data["key"] == result.key
    assert data["rows"][1]["precision"] == "bf16"
    assert ProbeResult.from_dict(data) == result


# ---------------------------------------------------------------------------- cache
def test_cache_round_trip_and_key(tmp_path):
    result = fake_result(bf16_step_s=0.8)
    path = save_probe(result, tmp_path)
    assert path == probe_cache_path(result.hardware, "bert-sst2", "tiny-bert", tmp_path)
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left behind
    back = cached_probe("bert-sst2", "tiny-bert", hardware=result.hardware, cache_dir=tmp_path)
    assert back == result

    amx = fake_hardware(flags={**NO_AMX, "amx_bf16": True})
    assert cached_probe("bert-sst2", "tiny-bert", hardware=amx, cache_dir=tmp_path) is None
    newer_torch = fake_hardware(torch_version="2.14.0+cpu")
    assert cached_probe("bert-sst2", "tiny-bert", hardware=newer_torch, cache_dir=tmp_path) is None
    assert cached_probe("bert-sst2", "other-model", hardware=result.hardware, cache_dir=tmp_path) is None
    assert cached_probe("mlp-synthetic", "tiny-bert", hardware=result.hardware, cache_dir=tmp_path) is None
    # Only what identifies the machine counts: a different thread count still hits.
    busy = {**result.hardware, "torch_threads": 16}
    assert cached_probe("bert-sst2", "tiny-bert", hardware=busy, cache_dir=tmp_path) == result
    assert probe_key(result.hardware, "bert-sst2", "tiny-bert") != probe_key(amx, "bert-sst2", "tiny-bert")


@pytest.mark.parametrize(
    "spoil,cause",
    [
        (
            lambda path, text: path.write_text(text[:200]),
            r"^not valid JSON, cut short or edited: .*\(line \d+, column \d+\)$",
        ),
        (lambda path, text: path.write_text("{not json"), r"^not valid JSON"),
        (lambda path, text: path.write_text('{"format": 999}'), r"^format 999, where this mixft reads format 1$"),
        (lambda path, text: path.write_text(json.dumps({**json.loads(text), "format": 0})), r"^format 0, "),
        (lambda path, text: path.write_text('{"format": 1}'), r"^no 'rows' field$"),
        (lambda path, text: path.write_text("[1, 2]"), r"^a JSON list, not a probe result$"),
        (lambda path, text: path.write_bytes(b"\xff\xfe{"), r"^not UTF-8 text$"),
        (lambda path, text: (path.unlink(), path.mkdir()), r"^Is a directory$"),
        (
            lambda path, text: path.write_text(json.dumps({**json.loads(text), "model": "another-model"})),
            r"another machine, torch, recipe or model than its name says$",
        ),
    ],
    ids=["cut-short", "bad-json", "format-999", "format-0", "no-rows", "a-list", "not-utf8", "a-folder", "edited"],
)
def test_an_unreadable_cache_file_is_named_with_its_cause(tmp_path, caplog, spoil, cause):
    # Was: any of these was logged at debug level and read as "never probed": an --amp run then
    # decided differently from the probe without a word.
    result = fake_result(bf16_step_s=0.8)
    path = save_probe(result, tmp_path)
    spoil(path, path.read_text())
    back, problem = read_cached_probe("bert-sst2", "tiny-bert", hardware=result.hardware, cache_dir=tmp_path)
    assert back is None and problem is not None and not problem.folder
    assert problem.path == str(path) and re.search(cause, problem.cause), problem.cause
    assert (
        problem.line()
        == f"the cached probe at {path} is unreadable ({problem.cause}) and is ignored; --probe measures it again"
    )
    assert CacheProblem.from_dict(json.loads(json.dumps(problem.to_dict()))) == problem  # results.json round trip
    with caplog.at_level(logging.WARNING, logger="mixft"):
        assert cached_probe("bert-sst2", "tiny-bert", hardware=result.hardware, cache_dir=tmp_path) is None
    assert [r.getMessage() for r in caplog.records] == [f"warning: {problem.line()}"]


def test_a_missing_cache_file_is_simply_not_probed(tmp_path, caplog):
    result = fake_result(bf16_step_s=0.8)
    with caplog.at_level(logging.DEBUG, logger="mixft"):
        assert read_cached_probe("bert-sst2", "tiny-bert", hardware=result.hardware, cache_dir=tmp_path) == (None, None)
        assert read_cached_probe("bert-sst2", "tiny-bert", hardware=result.hardware, cache_dir=tmp_path / "no") == (
            None,
            None,
        )
    assert caplog.records == []


def test_a_cache_folder_under_a_file_is_a_notice_when_read_and_refused_before_a_probe(tmp_path, monkeypatch):
    plain = tmp_path / "plainfile"
    plain.write_text("x")
    result = fake_result(bf16_step_s=0.8)
    for setting in (plain, plain / "sub"):
        monkeypatch.setenv("MIXFT_CACHE", str(setting))
        back, problem = read_cached_probe("bert-sst2", "tiny-bert", hardware=result.hardware)
        assert back is None and problem.folder and problem.path == str(plain)
        assert problem.cause == f"MIXFT_CACHE={setting} cannot hold the probe cache: {plain} is a file, not a folder"
        assert problem.warning().startswith("notice: not probed: MIXFT_CACHE=")
        with pytest.raises(UsageError) as refused:
            check_cache_dir()
        assert str(refused.value) == (
            f"MIXFT_CACHE={setting} cannot hold the probe cache: {plain} is a file, not a folder; "
            "set MIXFT_CACHE to a folder mixft can write"
        )
    assert plain.read_text() == "x"


def test_check_cache_dir_makes_the_folder_and_leaves_nothing_else(tmp_path, monkeypatch):
    monkeypatch.setenv("MIXFT_CACHE", str(tmp_path / "new" / "cache"))
    folder = check_cache_dir()
    assert folder == tmp_path / "new" / "cache" / "probes" and folder.is_dir() and list(folder.iterdir()) == []
    monkeypatch.delenv("MIXFT_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-file"))
    (tmp_path / "xdg-file").write_text("x")
    with pytest.raises(
        UsageError, match=r"^\S+xdg-file/mixft \(\$XDG_CACHE_HOME/mixft; MIXFT_CACHE is not set\) cannot"
    ):
        check_cache_dir()


def test_a_cache_write_that_fails_warns_and_keeps_the_result(tmp_path, monkeypatch, caplog):
    import mixft.report.probe_result as probe_result

    def disk_full(target, obj):
        raise WriteFailed(target, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))

    monkeypatch.setattr(probe_result, "write_json", disk_full)
    monkeypatch.setenv("MIXFT_CACHE", str(tmp_path / "c"))
    with caplog.at_level(logging.WARNING, logger="mixft"):
        assert keep_probe(fake_result(bf16_step_s=0.8), kept_in="out/probe.json") is None
    (message,) = [r.getMessage() for r in caplog.records]
    assert message.startswith(f"warning: the probe could not be cached (MIXFT_CACHE={tmp_path / 'c'}): cannot write ")
    assert "No space left on device (errno ENOSPC); it is kept in out/probe.json" in message


def test_cache_directory_comes_from_mixft_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MIXFT_CACHE", str(tmp_path / "c"))
    assert default_cache_dir() == tmp_path / "c"
    result = fake_result(bf16_step_s=0.8)
    assert save_probe(result).is_relative_to(tmp_path / "c")
    assert cached_probe("bert-sst2", "tiny-bert", hardware=result.hardware) == result
    monkeypatch.delenv("MIXFT_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "mixft"


# ------------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"time_budget_s": 0}, "time budget"),
        ({"time_budget_s": float("nan")}, "time budget"),
        ({"precisions": ["fp8"]}, "unknown precision"),
        ({"precisions": ["tf32"], "device": "cpu"}, "tf32 needs a CUDA GPU"),
    ],
)
def test_bad_input_fails_before_any_work(monkeypatch, kwargs, match):
    from recipes import bert_sst2

    def no_work(*a, **k):
        raise AssertionError("the probe started work before validating its input")

    monkeypatch.setattr(bert_sst2, "prepare", no_work)
    with pytest.raises(UsageError, match=match):
        probe(RunConfig(recipe="bert-sst2", device="cpu"), save=False, **kwargs)


def test_a_probe_that_saves_checks_its_cache_folder_before_any_work(tmp_path, monkeypatch):
    from recipes import bert_sst2

    def no_work(*a, **k):
        raise AssertionError("the probe started work before checking its cache folder")

    monkeypatch.setattr(bert_sst2, "prepare", no_work)
    (tmp_path / "plainfile").write_text("x")
    with pytest.raises(
        UsageError, match=r"plainfile cannot hold the probe cache: \S+plainfile is a file, not a folder"
    ):
        probe(RunConfig(recipe="bert-sst2", device="cpu"), cache_dir=tmp_path / "plainfile")


def test_unknown_recipe_is_a_usage_error():
    with pytest.raises(UsageError, match="unknown recipe"):
        probe(RunConfig(recipe="no-such-recipe"), save=False)


# ------------------------------------------------------------- the real probe, tiny
@pytest.fixture(scope="module")
def tiny_cfg(tiny_bert_dir, tmp_path_factory):
    data = make_data_dir(tmp_path_factory.mktemp("probe") / "sst2", 16, 8)
    return RunConfig(
        recipe="bert-sst2", model=str(tiny_bert_dir), data_dir=str(data), batch_size=8, max_length=32, device="cpu"
    )


@pytest.fixture(scope="module")
def tiny_probe(tiny_cfg, tmp_path_factory):
    cache = tmp_path_factory.mktemp("probe-cache")
    rng_before = torch.random.get_rng_state()
    matmul_before = torch.get_float32_matmul_precision()
    result = probe(tiny_cfg, time_budget_s=600, cache_dir=cache)
    return result, cache, rng_before, matmul_before


def test_tiny_probe_times_every_precision_on_one_batch(tiny_probe):
    result, _, _, _ = tiny_probe
    assert [r.precision for r in result.rows] == ["fp32", "bf16", "fp16"]  # fp16 fits a 600 s budget
    for r in result.rows:
        assert r.warmup_steps == WARMUP_STEPS
        assert MIN_TIMED_STEPS <= r.timed_steps <= MAX_TIMED_STEPS
        assert all(math.isfinite(t) and t > 0 for t in r.step_times_s)
        assert r.step_s == statistics.median(r.step_times_s[WARMUP_STEPS:])  # the warm-up step is left out
        assert math.isfinite(r.matmul_flops_per_s) and r.matmul_flops_per_s > 0
        assert r.speedup_vs_fp32 == pytest.approx(result.row("fp32").step_s / r.step_s)
        assert r.matmul_ratio_vs_fp32 == pytest.approx(r.matmul_flops_per_s / result.row("fp32").matmul_flops_per_s)
    assert result.row("fp32").speedup_vs_fp32 == 1.0
    fastest = min(result.rows, key=lambda r: r.step_s)
    assert result.recommended == fastest.precision
    assert result.batch["samples"] == 8 and len(result.batch["shape"]) == 2
    assert result.hardware["device"] == "cpu" and result.device == "cpu"
    assert result.wall_s > 0 and result.recipe == "bert-sst2"


def test_tiny_probe_records_the_models_own_linear_shapes(tiny_probe):
    result, _, _, _ = tiny_probe
    rows, seq = result.batch["shape"]  # bert-sst2 packs its batches: fewer rows than sentences
    sentences = result.batch["samples"]
    assert rows < sentences
    shapes = {(s["rows"], s["in"], s["out"]): s["calls"] for s in result.matmul_shapes}
    # The conftest BERT: 1 layer, hidden 32, intermediate 37; the head is Linear(32, 1) on the pooled [CLS].
    # That layer is the last, which computes keys and values for every token and the rest for the
    # [CLS] tokens only (mixft.models.first_token_encoder).
    assert shapes[(rows * seq, 32, 32)] == 2  # key, value
    assert shapes[(sentences, 32, 32)] == 3  # query, attention output, pooler: one [CLS] per sentence
    assert shapes[(sentences, 32, 37)] == 1  # intermediate
    assert shapes[(sentences, 37, 32)] == 1  # output
    assert shapes[(sentences, 32, 1)] == 1  # classifier head
    assert len(shapes) == 5, sorted(shapes.items())


def test_tiny_probe_is_cached_and_leaves_global_state(tiny_probe, tiny_cfg):
    result, cache, rng_before, matmul_before = tiny_probe
    assert torch.equal(torch.random.get_rng_state(), rng_before)
    assert torch.get_float32_matmul_precision() == matmul_before
    back = cached_probe("bert-sst2", result.model, device="cpu", cache_dir=cache)
    assert back == result


def test_tiny_probe_over_budget_still_times_fp32_and_amp_but_skips_optional(tiny_cfg):
    result = probe(tiny_cfg, time_budget_s=0.001, save=False)
    assert [r.precision for r in result.rows] == ["fp32", "bf16", "fp16"]
    for name in ("fp32", "bf16"):  # a warm-up and one timed step each, whatever the budget
        assert result.row(name).timed_steps == 1 and result.row(name).step_s > 0
        assert "share of the budget" in result.row(name).note
    fp16 = result.row("fp16")
    assert fp16.step_times_s == [] and fp16.step_s is None and "budget" in fp16.skipped
    assert fp16.matmul_flops_per_s > 0  # the matmul figure is cheap and always there


def test_a_runs_options_with_the_recipes_defaults_applied_are_probed():
    # What --amp's first measurement hands the probe: the plan's options, the recipe's defaults in them
    # (mlp-synthetic's model "mlp", an option it does not read). Was: refused as "--model: not used by
    # recipe mlp-synthetic", so --amp chose on torch's word on every AVX-512 CPU and --probe exited 2.
    from recipes import mlp_synthetic

    options = RunConfig(
        recipe="mlp-synthetic", device="cpu", batch_size=8, extra={"width": 16, "batches": 1, "eval_batches": 1}
    )
    planned = options.for_recipe(mlp_synthetic)
    assert planned.model == mlp_synthetic.DEFAULTS["model"]
    result = probe(planned, precisions=["bf16"], time_budget_s=0.001, save=False)
    assert [r.precision for r in result.rows] == ["fp32", "bf16"]
    assert all(r.timed_steps >= 1 and r.step_s > 0 for r in result.rows)
    with pytest.raises(UsageError, match="--model: not used by recipe mlp-synthetic"):
        probe(replace(options, model="bert-base-uncased"), save=False)  # one the user gave is still refused


def test_explicit_precisions_always_include_the_fp32_baseline(tiny_cfg):
    result = probe(tiny_cfg, precisions=["amp"], time_budget_s=0.001, save=False)
    assert [r.precision for r in result.rows] == ["fp32", "bf16"]


def test_a_slow_precision_stops_once_its_share_of_the_budget_is_spent(tiny_cfg, monkeypatch):
    # bf16 emulated on an AVX2-only CPU runs ~25x fp32: simulated here by adding 20 s to each
    # of its recorded step times (no real wait). A 30 s budget gives each of fp32 and bf16 a
    # 15 s share: bf16's warm-up and first timed step spend it, fp32 goes on to its minimum.
    import mixft.amp.hardware
    from mixft.runs import probe as probe_module

    real_run = probe_module._Stepper.run

    def slow_bf16(self, steps):
        before = len(self.times)
        real_run(self, steps)
        if self.precision.name == "bf16":
            self.clock.times[before:] = [t + 20.0 for t in self.clock.times[before:]]

    monkeypatch.setattr(probe_module._Stepper, "run", slow_bf16)
    monkeypatch.setattr(
        mixft.amp.hardware,
        "native_precisions",
        lambda device: {
            "bf16": False,
            "fp16": False,
            "via": "oneDNN",
            "cpu_capability": "AVX2",
            "compute_capability": None,
        },
    )
    result = probe(tiny_cfg, precisions=["bf16"], time_budget_s=30, save=False)
    bf16, fp32 = result.row("bf16"), result.row("fp32")
    assert bf16.warmup_steps == 1 and bf16.timed_steps == 1  # two steps, not six: enough to show the gap
    assert bf16.speedup_vs_fp32 < 0.1 and result.recommended == "fp32"
    assert bf16.note == f"1 timed step: its steps took {sum(bf16.step_times_s):.0f} s of its 15 s share of the budget"
    assert fp32.timed_steps >= MIN_TIMED_STEPS and fp32.note is None
    table = render_probe_table(result)
    assert "bf16: 1 timed step: its steps took" in table
    assert (
        "bf16: no hardware path on this CPU (CPU capability AVX2, oneDNN has no bf16 here): torch emulates it" in table
    )
    assert "no hardware path" in probe_markdown(result)
