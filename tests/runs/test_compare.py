"""--compare: every precision starts from the same weights and sees the same data order."""

from __future__ import annotations

import hashlib
import json

import torch

from mixft.cli.main import main
from mixft.config.run_config import RunConfig
from mixft.runs.runner import RunObserver, run
from mixft.train.hooks import Callback


def _digest(module: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for name, tensor in module.state_dict().items():
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


class Recorder(RunObserver):
    def __init__(self):
        self.seen = []

    def callbacks(self, cfg, precision, seed):
        seen = self.seen

        class Capture(Callback):
            def on_train_begin(self, trainer):
                sampler = trainer.train_loader.batch_sampler
                orders = []
                for epoch in range(2):
                    sampler.set_epoch(epoch)
                    orders.append(list(sampler))
                seen.append(
                    {"precision": precision.name, "seed": seed, "weights": _digest(trainer.module), "order": orders}
                )

        return [Capture()]


def test_compare_runs_share_initial_weights_and_data_order(tmp_path, tiny_bert_dir, tiny_data_dir):
    rec = Recorder()
    cfg = RunConfig(
        recipe="bert-sst2",
        precisions=["fp32", "bf16"],
        seeds=[0, 1],
        model=str(tiny_bert_dir),
        data_dir=str(tiny_data_dir),
        batch_size=4,
        epochs=1,
        max_steps=2,
        output_dir=str(tmp_path / "o"),
    )
    results = run(cfg, rec)
    assert [(r.precision, r.seed) for r in results] == [("fp32", 0), ("bf16", 0), ("fp32", 1), ("bf16", 1)]
    by_seed = {}
    for entry in rec.seen:
        by_seed.setdefault(entry["seed"], []).append(entry)
    for entries in by_seed.values():
        fp32, bf16 = entries
        assert fp32["weights"] == bf16["weights"]
        assert fp32["order"] == bf16["order"]
        assert fp32["order"][0] != fp32["order"][1]  # reshuffled per epoch
    # A different seed is a different head init and a different order: the check can fail.
    assert by_seed[0][0]["weights"] != by_seed[1][0]["weights"]
    assert by_seed[0][0]["order"] != by_seed[1][0]["order"]


def test_compare_cli_writes_results_report_and_plots(tmp_path, tiny_bert_dir, tiny_data_dir, capsys):
    out = tmp_path / "cmp"
    code = main(
        [
            "--recipe",
            "bert-sst2",
            "--compare",
            "fp32,bf16",
            "--model",
            str(tiny_bert_dir),
            "--data-dir",
            str(tiny_data_dir),
            "--batch-size",
            "4",
            "--epochs",
            "2",
            "--output-dir",
            str(out),
            "--no-progress",
        ]
    )
    assert code == 0
    doc = json.loads((out / "results.json").read_text())
    assert [r["precision"] for r in doc["runs"]] == ["fp32", "bf16"]
    report = (out / "report.md").read_text()
    for run_ in doc["runs"]:
        assert f"{run_['eval']['accuracy']:.4f}" in report  # every accuracy traces to results.json
    for png in ("loss.png", "eval_accuracy.png", "time_memory.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "comparison report" in capsys.readouterr().out


def test_compare_default_on_cpu_is_fp32_and_bf16(tmp_path):
    from mixft.cli.main import build_parser, config_from_args

    cfg = config_from_args(build_parser().parse_args(["--recipe", "bert-sst2", "--compare", "--device", "cpu"]))
    assert cfg.precisions == ["fp32", "bf16"]
