"""The README example: its bugs, its autocast trap, the corrected loops, and the script.

Everything runs on tiny config-built BERTs (hidden 32, one layer) so the file takes
seconds on a CPU; the script test runs examples/readme_example.py in-process.
"""

from __future__ import annotations

import inspect
import json
import math
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import mixft
from examples.readme_example import (
    BUGS,
    ReadmeModelAsWritten,
    RecordingLoss,
    TupleOutputs,
    cuda_autocast_bce_verdict,
    demonstrate_bce_trap,
    format_trap,
    loop_diff,
    mixed_precision_loop,
    reproduce_readme_bugs,
    single_precision_loop,
)
from mixft.data.synthetic.sentiment import generate_sentiment
from mixft.models.classifiers import BertClassifier
from mixft.models.hub import shipped_model_dir
from mixft.report.frames import compare_frame, results_frame
from mixft.results import RunResult

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "readme_example.py"
ENTRY_POINT = ROOT / "scripts" / "readme_example.py"  # the same main, from scripts/
HIDDEN = 32  # anything but 512, so the README's Linear(512, 1) must fail
TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def tiny_config(**overrides):
    from transformers import BertConfig

    kwargs = dict(
        hidden_size=HIDDEN,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        vocab_size=30522,
        max_position_embeddings=128,
    )
    kwargs.update(overrides)
    return BertConfig(**kwargs)


@pytest.fixture
def tiny_encoder():
    from transformers import BertModel

    torch.manual_seed(0)
    return BertModel(tiny_config(vocab_size=100))


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A tiny random BERT saved with the shipped model's (bert-base-uncased) tokenizer."""
    from transformers import BertModel

    out = tmp_path_factory.mktemp("tiny-bert")
    torch.manual_seed(0)
    BertModel(tiny_config()).save_pretrained(out)
    for name in TOKENIZER_FILES:
        src = shipped_model_dir() / name
        if src.is_file():
            shutil.copy(src, out / name)
    return out


@pytest.fixture(scope="module")
def tiny_data_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tiny-sst2")
    for name, n, seed in (("train.tsv", 24, 1), ("dev.tsv", 8, 2)):
        rows = generate_sentiment(n, seed=seed)
        lines = ["sentence\tlabel"] + [f"{r['sentence']}\t{r['label']}" for r in rows]
        (out / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


# ------------------------------------------------------------------ the autocast trap


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_uncorrected_pattern_cpu_autocast_runs_but_saturates(dtype):
    """torch 2.13's CPU autocast does not refuse sigmoid + BCELoss (CUDA's does): it runs
    BCELoss in fp32 on a sigmoid already rounded to exactly 1.0, so the confidently wrong
    example's gradient is lost: NaN in fp16, zero in bf16."""
    head = nn.Linear(1, 1)
    with torch.no_grad():
        head.weight.fill_(1.0)
        head.bias.zero_()
    z = torch.tensor([[9.0], [2.0]], requires_grad=True)
    labels = torch.tensor([0.0, 1.0])
    with torch.autocast("cpu", dtype=dtype):
        probs = nn.Sigmoid()(head(z)).squeeze(-1)
        loss = nn.BCELoss()(probs, labels)  # no RuntimeError on CPU
    assert probs.dtype == dtype
    assert probs[0].item() == 1.0  # sigmoid(9) rounds to exactly 1 in 16 bits
    (grad,) = torch.autograd.grad(loss, z)
    if dtype == torch.float16:
        assert math.isnan(grad[0].item())
    else:
        assert grad[0].item() == 0.0
    # The true gradient of the mean loss w.r.t. that logit is sigmoid(9)/2 ~ 0.5.
    assert math.isclose(torch.sigmoid(torch.tensor(9.0)).item() / 2, 0.49994, rel_tol=1e-3)


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_demonstrate_bce_trap_on_cpu(precision):
    demo = demonstrate_bce_trap("cpu", precision)
    assert demo.refused is None  # CPU autocast lets it through...
    assert demo.probabilities[0] == 1.0
    assert demo.bce_is_wrong  # ...and the numbers are wrong
    assert demo.bce_loss > 10 * demo.reference_loss  # the clamped log(0) = -100 term dominates
    # The fix matches the fp32 truth, loss and gradients alike.
    assert demo.logits_loss == pytest.approx(demo.reference_loss, rel=1e-2)
    assert demo.logits_grads == pytest.approx(demo.reference_grads, rel=2e-2, abs=1e-3)
    assert all(math.isfinite(g) for g in demo.logits_grads)
    text = format_trap(demo)
    assert "BCELoss = " in text and "BCEWithLogitsLoss" in text


def test_cuda_autocast_policy_refuses_bce():
    """What torch 2.13's CUDA autocast says, from its own kernel (no GPU needed)."""
    message = cuda_autocast_bce_verdict()
    assert message is not None
    assert "unsafe to autocast" in message
    assert "BCEWithLogitsLoss" in message


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_autocast_refuses_bce_live():
    demo = demonstrate_bce_trap("cuda", "fp16")
    assert demo.refused is not None and "unsafe to autocast" in demo.refused
    assert demo.logits_loss == pytest.approx(demo.reference_loss, rel=1e-2)


def test_trap_needs_a_mixed_precision():
    with pytest.raises(mixft.UsageError, match="fp16 or bf16"):
        demonstrate_bce_trap("cpu", "fp32")


# ------------------------------------------------------------------ the README's bugs


def test_hidden_size_bug_is_a_shape_error(tiny_encoder):
    """With outputs as tuples (so the README's unpacking works), Linear(512, 1) meets a
    32-wide pooled vector."""
    model = ReadmeModelAsWritten(TupleOutputs(tiny_encoder))
    ids = torch.ones(2, 5, dtype=torch.long)
    with pytest.raises(RuntimeError, match=rf"shapes cannot be multiplied \(2x{HIDDEN} and 512x1\)"):
        model(ids, torch.ones_like(ids))


def test_model_output_unpacking_bug(tiny_encoder):
    """Today's ModelOutput unpacks to its keys: `pooled` is the string 'pooler_output'."""
    ids = torch.ones(2, 5, dtype=torch.long)
    _, pooled = tiny_encoder(ids, torch.ones_like(ids))
    assert pooled == "pooler_output"
    with pytest.raises(TypeError, match="must be Tensor, not str"):
        ReadmeModelAsWritten(tiny_encoder)(ids, torch.ones_like(ids))


def test_reproduce_readme_bugs_reports_each(tiny_encoder):
    reports = reproduce_readme_bugs(tiny_encoder)
    assert [r.bug for r in reports] == list(BUGS)
    hidden, outputs, loss = (r.observed for r in reports)
    assert hidden.startswith("RuntimeError") and f"x{HIDDEN} and 512x1" in hidden
    assert outputs.startswith("TypeError")
    assert loss == "AttributeError: module 'torch' has no attribute 'loss'"
    assert tiny_encoder.training  # restored


def test_corrected_model_returns_logits(tiny_encoder):
    model = BertClassifier(tiny_encoder)
    ids = torch.ones(3, 5, dtype=torch.long)
    logits = model(input_ids=ids, attention_mask=torch.ones_like(ids))
    assert logits.shape == (3,)
    assert model.classifier.in_features == HIDDEN


# ------------------------------------------------------------------ the corrected loops


def _batches(n_batches=2, batch=4, length=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n_batches):
        ids = torch.randint(1, 100, (batch, length), generator=g)
        out.append(
            {
                "input_ids": ids,
                "attention_mask": torch.ones_like(ids),
                "labels": torch.tensor([0.0, 1.0] * (batch // 2)),
            }
        )
    return out


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_corrected_loops_train(tiny_encoder, precision):
    torch.manual_seed(0)
    model = BertClassifier(tiny_encoder)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    criterion = RecordingLoss()
    device = torch.device("cpu")
    loader = _batches()
    epochs = 6
    if precision == "fp32":
        single_precision_loop(model, loader, optimizer, criterion, epochs, device)
        scaler = None
    else:
        p = mixft.resolve_precision(precision, device)
        scaler = mixed_precision_loop(
            model, loader, optimizer, criterion, epochs, device, p.autocast_dtype, p.grad_scaler
        )
        assert scaler.is_enabled() == (precision == "fp16")
    losses = torch.stack(criterion.values).tolist()
    assert len(losses) == epochs * len(loader)
    assert all(math.isfinite(v) for v in losses)
    # Same two batches every epoch: the last epoch's loss is below the first's.
    assert sum(losses[-2:]) < sum(losses[:2])
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_loop_diff_is_the_source_that_runs():
    diff = loop_diff()
    assert diff.startswith("--- single precision (fp32)\n+++ mixed precision (AMP)")
    single = inspect.getsource(single_precision_loop)
    mixed = inspect.getsource(mixed_precision_loop)
    removed = [line[1:] for line in diff.splitlines()[2:] if line.startswith("-")]
    added = [line[1:] for line in diff.splitlines()[2:] if line.startswith("+")]
    assert removed and added
    assert all(line in single.splitlines() for line in removed)
    assert all(line in mixed.splitlines() for line in added)
    assert "            loss.backward()" in removed
    assert any("scaler.scale(loss).backward()" in line for line in added)
    assert any("torch.autocast(device.type, dtype=amp_dtype)" in line for line in added)


# ------------------------------------------------------------------ the script


def _run_script(monkeypatch, capsys, *args):
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), *args])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(SCRIPT), run_name="__main__")
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def test_script_end_to_end(monkeypatch, capsys, tmp_path, tiny_model_dir, tiny_data_dir):
    code, out, err = _run_script(
        monkeypatch,
        capsys,
        "--model",
        str(tiny_model_dir),
        "--data-dir",
        str(tiny_data_dir),
        "--batch-size",
        "8",
        "--max-length",
        "32",
        "--device",
        "cpu",
        "--output-dir",
        str(tmp_path / "out"),
    )
    assert code == 0, err
    # The bugs, seen live on the tiny encoder.
    assert f"raises here: RuntimeError: mat1 and mat2 shapes cannot be multiplied (1x{HIDDEN} and 512x1)" in out
    assert "raises here: AttributeError: module 'torch' has no attribute 'loss'" in out
    # The trap and the diff.
    assert "unsafe to autocast" in out
    assert "+++ mixed precision (AMP)" in out
    # Both columns, side by side.
    header = next(line for line in out.splitlines() if "AMP vs fp32" in line)
    assert "fp32" in header and "bf16 (AMP)" in header
    for metric in ("accuracy", "train time (s)", "samples/s", "peak memory", "skipped steps", "final loss scale"):
        assert any(line.startswith(metric) for line in out.splitlines()), metric
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    runs = doc["runs"]
    assert [r["precision"] for r in runs] == ["fp32", "bf16"]
    assert [r["steps"] for r in runs] == [3, 3]  # 24 sentences / batch 8, one epoch
    assert all(r["skipped_steps"] == 0 for r in runs)
    assert all(0.0 <= r["eval"]["accuracy"] <= 1.0 for r in runs)
    assert runs[0]["dataset"].endswith("(24 train / 8 eval)")
    report = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    assert "](loss.png)" in report and (tmp_path / "out" / "loss.png").is_file()  # the charts came along


@pytest.mark.parametrize("script", [SCRIPT, ENTRY_POINT])
def test_scripts_run_from_any_directory(tmp_path, script):
    done = subprocess.run(
        [sys.executable, str(script), "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: readme_example.py") and "--output-dir" in done.stdout


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--epochs", "0"], "--epochs"),
        (["--amp", "fp8"], "--amp"),
        (["--lr", "nan"], "--lr"),
        (["--model", "/nonexistent/model"], "/nonexistent/model"),
        (["--data-dir", "/nonexistent/data"], "/nonexistent/data"),
        (["--max-length", "4"], "--max-length"),
    ],
)
def test_script_bad_input_exits_2_with_one_line(monkeypatch, capsys, tiny_model_dir, tiny_data_dir, args, fragment):
    base = ["--model", str(tiny_model_dir), "--data-dir", str(tiny_data_dir)]
    code, out, err = _run_script(monkeypatch, capsys, *base, *args)
    assert code == 2
    assert out == ""  # nothing printed, nothing trained
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("readme_example.py: error: ")
    assert fragment in lines[0]


# ------------------------------------------------------------------ public API used above


def _result(precision, accuracy, time_s, mem, scale=None, seed=0):
    return RunResult(
        precision=precision,
        autocast_dtype=None,
        grad_scaler=scale is not None,
        device="cpu",
        device_name="cpu",
        steps=10,
        skipped_steps=1 if scale else 0,
        final_loss_scale=scale,
        train_time_s=time_s,
        train_samples_per_s=320 / time_s,
        peak_memory_bytes=mem,
        peak_memory_kind="cpu_rss",
        eval={"accuracy": accuracy, "loss": 0.5},
        seed=seed,
    )


def test_results_frame_one_row_per_run():
    runs = [_result("fp32", 0.80, 10.0, 200 * 2**20), _result("fp16", 0.79, 5.0, 100 * 2**20, scale=32768.0)]
    frame = results_frame(runs)
    assert list(frame["precision"]) == ["fp32", "fp16"]
    assert list(frame["accuracy"]) == [0.80, 0.79]
    assert list(frame["peak_memory_mib"]) == [200.0, 100.0]
    assert list(frame["skipped_steps"]) == [0, 1]
    assert frame["final_loss_scale"].iloc[1] == 32768.0
    assert frame["train_samples_per_s"].iloc[1] == pytest.approx(64.0)
    # The same from results.json dicts, or a whole document.
    doc = {"runs": [r.to_dict() for r in runs]}
    assert results_frame(doc).equals(frame)
    assert results_frame([]).empty and "precision" in results_frame([]).columns


def test_compare_frame_speedup_against_fp32():
    runs = [_result("fp32", 0.80, 10.0, 200 * 2**20), _result("bf16", 0.79, 4.0, 150 * 2**20)]
    frame = compare_frame(runs)
    assert frame.loc["bf16", "speedup"] == pytest.approx(2.5)
    assert frame.loc["bf16", "memory_ratio"] == pytest.approx(0.75)
    assert frame.loc["bf16", "delta_accuracy_pts"] == pytest.approx(-1.0)


def test_public_exports():
    from mixft.amp.precision import resolve_precision
    from mixft.runs.plan import RunPlan, make_plan
    from mixft.train.trainer import Trainer

    assert mixft.Trainer is Trainer and mixft.resolve_precision is resolve_precision
    assert mixft.make_plan is make_plan and mixft.RunPlan is RunPlan  # the notebook's "what would it do?"
    assert mixft.BertClassifier is BertClassifier and mixft.RunResult is RunResult
    missing = [name for name in mixft.__all__ if not hasattr(mixft, name)]
    assert not missing
    with pytest.raises(AttributeError):
        mixft.no_such_name  # noqa: B018


def test_run_stays_the_function_after_importing_its_module():
    # Accessed first, mixft.run is the function itself.
    code = (
        "import sys, mixft; assert 'torch' not in sys.modules, 'import mixft pulled in torch'\n"
        "import inspect; assert inspect.isfunction(mixft.run), mixft.run\n"
        "import mixft.runs.runner\nfrom mixft.runs.runner import RunObserver\n"
        "assert inspect.isfunction(mixft.run), mixft.run\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_run_is_still_the_function_when_the_run_layer_was_imported_first():
    # The run layer is the package mixft.runs, so importing it (the reports and the CLI do)
    # cannot shadow the function mixft.run: there is no package of that name.
    code = (
        "import inspect, mixft, mixft.runs.outdir, mixft.runs.runner as runner\n"
        "assert inspect.isfunction(mixft.run) and mixft.run is runner.run, mixft.run\n"
        "assert 'mixft.run' not in sys.modules\n"
        "runner.run = lambda cfg, observer=None: ('ran', cfg, observer)\n"
        "from mixft.runs import run; assert run('cfg', 'obs') == ('ran', 'cfg', 'obs')\n"
    )
    done = subprocess.run([sys.executable, "-c", "import sys\n" + code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
