"""bert-sst2 through the real CLI, in-process, on a tiny model and tiny data."""

from __future__ import annotations

import json

import pytest
import torch
from fake_probes import fake_result
from torch import nn

from mixft.cli.main import main
from recipes import bert_sst2

CONTRACT_KEYS = {
    "precision",
    "eval",
    "train_time_s",
    "train_samples_per_s",
    "peak_memory_bytes",
    "skipped_steps",
    "steps",
    "final_loss_scale",
    "model",
    "dataset",
    "device",
}


def run_cli(tmp_path, tiny_bert_dir, tiny_data_dir, *extra):
    out = tmp_path / "out"
    code = main(
        [
            "--recipe",
            "bert-sst2",
            "--model",
            str(tiny_bert_dir),
            "--data-dir",
            str(tiny_data_dir),
            "--batch-size",
            "4",
            "--epochs",
            "1",
            "--max-steps",
            "2",
            "--output-dir",
            str(out),
            "--no-progress",
            *extra,
        ]
    )
    return code, out


@pytest.mark.parametrize("flags,precision", [([], "fp32"), (["--amp"], "bf16"), (["--precision", "fp16"], "fp16")])
def test_cli_trains_two_steps_and_writes_the_contract(
    tmp_path, tiny_bert_dir, tiny_data_dir, capsys, monkeypatch, flags, precision
):
    # --amp trains bf16 where torch reports native bf16 and bf16 measures faster (tests/runs/test_amp_run.py
    # has the other machines): both simulated, so the contract is checked alike on every CPU.
    import mixft.amp.hardware
    import mixft.runs.probe

    monkeypatch.setattr(
        mixft.amp.hardware,
        "native_precisions",
        lambda device: {
            "bf16": True,
            "fp16": True,
            "via": "oneDNN",
            "cpu_capability": "AVX512",
            "compute_capability": None,
        },
    )
    monkeypatch.setattr(
        mixft.runs.probe, "probe_in_fresh_process", lambda cfg, **kwargs: fake_result(bf16_step_s=0.25)
    )  # 2x fp32
    code, out = run_cli(tmp_path, tiny_bert_dir, tiny_data_dir, *flags)
    assert code == 0
    doc = json.loads((out / "results.json").read_text())
    (run,) = doc["runs"]
    assert CONTRACT_KEYS <= set(run)
    assert run["precision"] == precision
    assert run["steps"] == 2 and len(run["history"]["loss"]) == 2
    assert all(0.1 < loss < 2.0 for loss in run["history"]["loss"])  # BCE near log(2) at start
    assert 0.0 <= run["eval"]["accuracy"] <= 1.0
    assert run["device"] == "cpu"
    assert (run["final_loss_scale"] is not None) == (precision == "fp16")
    printed = capsys.readouterr().out
    assert "accuracy" in printed and "samples/s" in printed and "peak memory" in printed
    assert "4 x 1 accumulation = 4 effective" in printed


def test_same_seed_same_initial_weights(tiny_bert_dir):
    a = bert_sst2.build_model(str(tiny_bert_dir), seed=3)
    b = bert_sst2.build_model(str(tiny_bert_dir), seed=3)
    for (name, pa), (_, pb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(pa, pb), name


def test_recipe_loss_is_autocast_safe_where_sigmoid_bce_saturates():
    # Confident logits from an fp16 forward pass: the README's sigmoid saturates to exactly
    # 1.0 in fp16, so BCELoss for label 0 takes log(1 - 1) and clamps it to 100.
    logits = torch.tensor([12.0, -12.0, 0.5], dtype=torch.float16, requires_grad=True)
    labels = torch.tensor([0.0, 1.0, 1.0])
    exact = nn.functional.binary_cross_entropy_with_logits(logits.double(), labels.double())
    with torch.autocast("cpu", dtype=torch.float16):
        readme = nn.BCELoss()(torch.sigmoid(logits), labels)
        recipe = bert_sst2.loss_fn(logits, labels)
    assert abs(readme.item() - exact.item()) > 20  # saturated: 100-clamped terms
    assert recipe.item() == pytest.approx(exact.item(), rel=1e-3)
    recipe.backward()
    assert torch.isfinite(logits.grad).all()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA autocast's refusal needs a GPU")
def test_cuda_autocast_refuses_sigmoid_bce_and_accepts_recipe_loss():
    logits = torch.randn(8, device="cuda", requires_grad=True)
    labels = torch.randint(0, 2, (8,), device="cuda").float()
    with pytest.raises(RuntimeError, match="unsafe to autocast"):
        with torch.autocast("cuda", dtype=torch.float16):
            nn.BCELoss()(torch.sigmoid(logits), labels)
    with torch.autocast("cuda", dtype=torch.float16):
        loss = bert_sst2.loss_fn(logits, labels)
    assert loss.dtype == torch.float32 and torch.isfinite(loss)


@pytest.mark.parametrize(
    "argv,fragment",
    [
        (["--recipe", "nope"], "unknown recipe 'nope'"),
        (["--recipe", "bert-sst2", "--batch-size", "0"], "--batch-size"),
        (["--recipe", "bert-sst2", "--data-dir", "/does/not/exist"], "--data-dir"),
    ],
)
def test_bad_input_exits_2_with_one_line(argv, fragment, capsys, tmp_path):
    code = main([*argv, "--output-dir", str(tmp_path / "o"), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and fragment in err


def test_malformed_labels_exit_2_before_training(tmp_path, tiny_bert_dir, capsys):
    d = tmp_path / "bad"
    d.mkdir()
    (d / "train.tsv").write_text("sentence\tlabel\na fine film\t2\n", encoding="utf-8")
    (d / "dev.tsv").write_text("sentence\tlabel\na dull film\t0\n", encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_text('{"runs": ["good"]}')
    code = main(
        [
            "--recipe",
            "bert-sst2",
            "--model",
            str(tiny_bert_dir),
            "--data-dir",
            str(d),
            "--output-dir",
            str(out),
            "--no-progress",
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "label must be 0 or 1" in err
    assert (out / "results.json").read_text() == '{"runs": ["good"]}'


def test_optimizer_factory_updates_the_parameters_it_is_given(tiny_bert_dir, tiny_data_dir):
    # Peers and notebooks hand the factory another model's parameters: it must use those.
    from mixft.amp.precision import PRECISIONS
    from mixft.config.run_config import RunConfig

    cfg = RunConfig(model=str(tiny_bert_dir), data_dir=str(tiny_data_dir)).with_defaults(bert_sst2.DEFAULTS)
    prepared = bert_sst2.prepare(cfg)
    parts = bert_sst2.build(cfg, prepared, PRECISIONS["fp32"], torch.device("cpu"), seed=0)
    other = bert_sst2.build_model(str(tiny_bert_dir), seed=0)
    opt = parts.optimizer(other.parameters())
    owned = {id(p) for group in opt.param_groups for p in group["params"]}
    assert owned == {id(p) for p in other.parameters()}
    decay = {g["weight_decay"] for g in opt.param_groups}
    assert decay == {0.0, cfg.weight_decay}
    no_decay_group = next(g for g in opt.param_groups if g["weight_decay"] == 0.0)
    assert all(p.ndim == 1 for p in no_decay_group["params"])


def test_weights_missing_from_the_checkpoint_are_the_same_in_every_run(tmp_path):
    # A BERT saved without its pooler: from_pretrained initialises the pooler randomly.
    # The runs of one --compare must start from the same pooler, whatever the global RNG
    # did before (audit 6c: the recipe seeded only after loading).
    from transformers import BertConfig, BertModel

    config = BertConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37, max_position_embeddings=64
    )
    BertModel(config, add_pooling_layer=False).save_pretrained(tmp_path / "no-pooler")
    torch.manual_seed(1)
    a = bert_sst2.build_model(str(tmp_path / "no-pooler"), seed=5)
    torch.manual_seed(2)  # another run, another RNG history before the build
    torch.rand(100)
    b = bert_sst2.build_model(str(tmp_path / "no-pooler"), seed=5)
    assert torch.equal(a.encoder.pooler.dense.weight, b.encoder.pooler.dense.weight)
    assert torch.equal(a.classifier.weight, b.classifier.weight)


def test_every_precision_of_a_comparison_gets_the_same_padding(tiny_bert_dir, tiny_data_dir):
    # Audit 6d: padding to a multiple of 8 only for the AMP runs on CUDA gave fp32 and
    # AMP different batch shapes. Built for a CUDA device (nothing is moved there).
    from mixft.amp.precision import PRECISIONS
    from mixft.config.run_config import RunConfig

    cfg = RunConfig(model=str(tiny_bert_dir), data_dir=str(tiny_data_dir)).with_defaults(bert_sst2.DEFAULTS)
    prepared = bert_sst2.prepare(cfg)
    cuda = torch.device("cuda")
    pads = {
        name: bert_sst2.build(cfg, prepared, PRECISIONS[name], cuda, 0).train_loader.collate_fn.pad_to_multiple_of
        for name in ("fp32", "tf32", "fp16", "bf16")
    }
    assert len(set(pads.values())) == 1, pads


def test_data_the_user_brings_is_used_whole(tmp_path, tiny_bert_dir, capsys):
    # The demo budget (2000 / 872) belongs to the generated set only: a --data-dir with more
    # rows trains on all of them (it used to stop at the first 2000, shown in one header line).
    from tests.conftest import write_tsv

    data = tmp_path / "glue"
    data.mkdir()
    rows = [(f"film number {i} was {'great' if i % 2 else 'dull'}", i % 2) for i in range(2100)]
    write_tsv(data / "train.tsv", rows)
    write_tsv(data / "dev.tsv", rows[:900])
    code, out = run_cli(tmp_path, tiny_bert_dir, data)
    assert code == 0
    (run,) = json.loads((out / "results.json").read_text())["runs"]
    assert "(2100 train / 900 eval)" in run["dataset"]
    assert "(2100 train / 900 eval)" in capsys.readouterr().out
