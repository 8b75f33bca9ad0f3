"""recipes/mlp_synthetic: the seed's MLP workload as a recipe, at tiny sizes."""

import json

import pytest
import torch

from mixft.amp.precision import PRECISIONS
from mixft.cli.main import main as finetune_main
from mixft.config.run_config import RunConfig
from mixft.errors import UsageError
from mixft.runs.runner import run
from recipes import mlp_synthetic

TINY = {"width": 64, "batches": 2, "eval_batches": 1}


def _cfg(tmp_path, **kw):
    base = dict(
        recipe="mlp-synthetic",
        device="cpu",
        batch_size=16,
        epochs=2,
        extra=dict(TINY),
        output_dir=str(tmp_path / "out"),
    )
    base.update(kw)
    return RunConfig(**base).with_defaults(mlp_synthetic.DEFAULTS).validate()


def test_trains_through_run_at_tiny_size(tmp_path):
    results = run(_cfg(tmp_path, precisions=["fp32", "bf16"]))
    assert [r.precision for r in results] == ["fp32", "bf16"]
    for r in results:
        assert r.steps == 2 * 2 and r.skipped_steps == 0  # 2 batches x 2 epochs, SGD never skips here
        assert r.train_time_s > 0 and r.train_samples_per_s > 0
        assert "accuracy" not in r.eval and torch.isfinite(torch.tensor(r.eval["loss"]))
        assert [e["epoch"] for e in r.eval_history] == [1, 2]
        assert "scaled down" in r.dataset and "Linear(64, 64)" in r.model
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    assert len(doc["runs"]) == 2 and doc["runs"][0]["eval"]["loss"] is not None
    assert (tmp_path / "out" / "report.md").is_file()  # --compare writes a report, even without accuracy


def test_sgd_lowers_the_training_loss(tmp_path):
    # Re-scoring the first batch after 20 passes over it: plain SGD on a fixed batch must
    # reduce MSE (a broken loss sign, optimizer or data replay would not).
    cfg = _cfg(tmp_path, epochs=20, lr=0.05, extra={"width": 32, "batches": 1, "eval_batches": 1})
    results = run(cfg)
    losses = [e["loss"] for e in results[0].eval_history]
    assert losses[-1] < losses[0] * 0.98


def test_identical_initial_weights_across_precisions(tmp_path):
    cfg = _cfg(tmp_path)
    prepared = mlp_synthetic.prepare(cfg)
    device = torch.device("cpu")
    states = [
        mlp_synthetic.build(cfg, prepared, PRECISIONS[p], device, seed=3).model.state_dict()
        for p in ("fp32", "bf16", "fp16")
    ]
    for other in states[1:]:
        assert states[0].keys() == other.keys()
        assert all(torch.equal(states[0][k], other[k]) for k in states[0])
    different = mlp_synthetic.build(cfg, prepared, PRECISIONS["fp32"], device, seed=4).model.state_dict()
    assert not torch.equal(states[0]["0.weight"], different["0.weight"])


def test_model_shape_and_data_are_the_seeds():
    model = mlp_synthetic.build_model(64, 3, seed=0)
    kinds = [type(m).__name__ for m in model]
    assert kinds == ["Linear", "ReLU", "Linear", "ReLU", "Linear"]  # no ReLU after the last Linear
    assert mlp_synthetic.linear_weight_count(model) == 3 * 64 * 64


def test_data_is_fixed_and_generated_once(tmp_path):
    a = mlp_synthetic.prepare(_cfg(tmp_path))
    b = mlp_synthetic.prepare(_cfg(tmp_path, seeds=[7]))  # the training seed does not change the data
    assert len(a.inputs) == 2 and a.inputs[0].shape == (16, 64)
    assert all(torch.equal(x, y) for x, y in zip(a.inputs + a.targets, b.inputs + b.targets))
    parts = mlp_synthetic.build(_cfg(tmp_path), a, PRECISIONS["fp32"], torch.device("cpu"), seed=0)
    assert parts.train_loader[1][0] is a.on_device["cpu"][0][1]  # moved once, not copied per run


def test_scale_note():
    assert mlp_synthetic.scale_note(4096, 3, 50, 512) is None
    note = mlp_synthetic.scale_note(1024, 3, 10, 512)
    assert "scaled down" in note and "width 1024 (seed 4096)" in note


@pytest.mark.parametrize("extra", [{"width": 0}, {"batches": "3"}, {"depth": 2}, {"layers": True}])
def test_bad_sizes_are_usage_errors(tmp_path, extra):
    with pytest.raises(UsageError):
        mlp_synthetic.prepare(_cfg(tmp_path, extra=extra))


def test_finetune_cli_compare_with_sizes_from_a_config_file(tmp_path, capsys):
    # The CLI has no --extra: a config file's `extra` gives the recipe its sizes (at the seed's, 50M
    # parameters, this ran 13 s in emulated bf16 on an AVX2-only CPU).
    config = tmp_path / "sizes.yaml"
    config.write_text("extra:\n" + "".join(f"  {key}: {value}\n" for key, value in TINY.items()))
    out = tmp_path / "cli"
    code = finetune_main(
        [
            "--recipe",
            "mlp-synthetic",
            "--config",
            str(config),
            "--compare",
            "fp32,bf16",
            "--batch-size",
            "4",
            "--max-steps",
            "2",
            "--device",
            "cpu",
            "--output-dir",
            str(out),
            "--no-progress",
        ]
    )
    assert code == 0
    printed = capsys.readouterr()
    assert "[fp32] eval loss" in printed.out and "[bf16] eval loss" in printed.out
    assert "width 64 (seed 4096)" in printed.out + printed.err  # the file's sizes, said as a scale-down
    runs = json.loads((out / "results.json").read_text())["runs"]
    assert [r["steps"] for r in runs] == [2, 2]
    assert [r["parameters"]["total"] for r in runs] == [3 * (64 * 64 + 64)] * 2
