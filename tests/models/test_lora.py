"""mixft.models.lora: LoRA adapters through peft on tiny encoders and decoders; the head trained in full."""

from __future__ import annotations

import json
import math

import pytest
import torch
from tiny_models import make_tiny_model_dir, toy_batch

from mixft.errors import UsageError
from mixft.models.classifiers import load_classifier, pad_for_classification
from mixft.models.lora import (
    LORA_FILE,
    LoraClassifier,
    LoraOptions,
    apply_lora,
    check_lora_targets,
    head_modules,
    is_lora_directory,
    load_lora_classifier,
    lora_base_model,
    resolve_targets,
    trainable_parameters,
)
from mixft.train.trainer import Trainer

LABELS = ["bad", "so-so", "good"]
ARCHS = ("bert", "distilbert", "roberta", "gpt2", "llama", "qwen2")


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("lora-bases")
    return {arch: make_tiny_model_dir(arch, root / arch) for arch in (*ARCHS, "mistral")}


def _tokenizer(path):
    from transformers import AutoConfig, AutoTokenizer

    return pad_for_classification(AutoTokenizer.from_pretrained(path), AutoConfig.from_pretrained(path))


def _classifier(path, **kwargs):
    return load_classifier(str(path), seed=0, labels=LABELS, **kwargs)


def _inputs(batch):
    return {k: v for k, v in batch.items() if k != "labels"}


# ---------------------------------------------------------------------------------------
# Options
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"r": 0}, "--lora-r must be a positive integer, got 0"),
        ({"r": 2.5}, "--lora-r must be a positive integer, got 2.5"),
        ({"alpha": 0}, "--lora-alpha must be a positive finite number up to float32's 3.4e38, got 0"),
        ({"dropout": 1.0}, "--lora-dropout must be a number >= 0 and below 1, got 1.0"),
        ({"dropout": -0.1}, "--lora-dropout must be a number >= 0 and below 1, got -0.1"),
        ({"target_modules": ""}, "--lora-target-modules must name Linear layers"),
        ({"target_modules": "query,,value"}, "--lora-target-modules must name Linear layers"),
    ],
)
def test_bad_options_are_refused_in_one_line(kwargs, message):
    with pytest.raises(UsageError) as info:
        LoraOptions(**kwargs)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_options_read_comma_separated_names_and_all_linear():
    assert LoraOptions(target_modules="query, value").target_modules == ("query", "value")
    assert LoraOptions(target_modules=["c_attn"]).target_modules == ("c_attn",)
    assert LoraOptions(target_modules="all-linear").target_modules == "all-linear"
    assert LoraOptions().target_modules is None and (LoraOptions().r, LoraOptions().alpha) == (8, 16)


def test_unknown_target_module_lists_the_linear_layers(dirs):
    model = _classifier(dirs["llama"])
    with pytest.raises(UsageError) as info:
        apply_lora(model, LoraOptions(target_modules="q_proj,query"))
    assert str(info.value) == (
        "--lora-target-modules: llama has no Linear layer named query; its Linear layers: down_proj, gate_proj, "
        "k_proj, o_proj, q_proj, up_proj, v_proj (or all-linear)"
    )


# ---------------------------------------------------------------------------------------
# What is adapted, what trains
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "arch,short_names",
    [
        ("bert", {"query", "value"}),
        ("distilbert", {"q_lin", "v_lin"}),
        ("gpt2", {"c_attn"}),
        ("llama", {"q_proj", "v_proj"}),
        ("qwen2", {"q_proj", "v_proj"}),
        ("mistral", {"q_proj", "v_proj"}),
    ],
)
def test_default_targets_are_the_attention_query_and_value(dirs, arch, short_names):
    targets = resolve_targets(_classifier(dirs[arch]), LoraOptions())
    assert targets and {name.rpartition(".")[2] for name in targets} == short_names


def test_all_linear_adapts_every_linear_layer_outside_the_head(dirs):
    model = _classifier(dirs["roberta"])  # its head (classifier.dense, classifier.out_proj) is Linear too
    targets = resolve_targets(model, LoraOptions(target_modules="all-linear"))
    linear = [n for n, m in model.model.named_modules() if isinstance(m, torch.nn.Linear)]
    assert sorted(targets) == sorted(n for n in linear if not n.startswith("classifier"))
    assert len(targets) == 6  # query, key, value, attention output, intermediate, output


@pytest.mark.parametrize("arch", ARCHS)
def test_only_adapters_and_head_require_grad(dirs, arch):
    model = apply_lora(_classifier(dirs[arch]), LoraOptions(r=4))
    heads = head_modules(model)
    trainable = [name for name, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_" in name or ".modules_to_save." in name for name in trainable)
    assert any(".lora_A." in name for name in trainable) and any(".lora_B." in name for name in trainable)
    for head in heads:  # every head module trains in full
        assert any(f".{head}.modules_to_save." in name for name in trainable), head
    n_trainable, total = trainable_parameters(model)
    assert n_trainable == sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert 0 < n_trainable < total / 4


def test_head_and_a_missing_pooler_are_trained_in_full(tmp_path):
    """A sentence-embedding BERT has no pooler: left frozen it would be a random layer before the head."""
    path = make_tiny_model_dir("bert", tmp_path / "no-pooler", pooler=False)
    assert head_modules(_classifier(path)) == ["bert.pooler.dense", "classifier"]
    with_pooler = make_tiny_model_dir("bert", tmp_path / "pooler")
    assert head_modules(_classifier(with_pooler)) == ["classifier"]
    distilbert = make_tiny_model_dir("distilbert", tmp_path / "d")
    assert head_modules(_classifier(distilbert)) == ["classifier", "pre_classifier"]


def test_lora_keeps_bert_segment_ids(dirs):
    """peft's forward takes token_type_ids through **kwargs; the wrapper must still pass them to BERT."""
    model = apply_lora(_classifier(dirs["bert"]), LoraOptions()).eval()
    ids = torch.tensor([[2, 5, 6, 3, 7, 8, 3]])
    types = torch.tensor([[0, 0, 0, 0, 1, 1, 1]])
    with torch.no_grad():
        assert not torch.allclose(model(ids, torch.ones_like(ids), types), model(ids, torch.ones_like(ids)))


def test_apply_lora_refuses_what_it_cannot_wrap(dirs):
    model = apply_lora(_classifier(dirs["bert"]), LoraOptions())
    with pytest.raises(UsageError, match="already has LoRA adapters"):
        apply_lora(model, LoraOptions())
    with pytest.raises(UsageError, match="takes a SequenceClassifier"):
        apply_lora(torch.nn.Linear(2, 2), LoraOptions())


# ---------------------------------------------------------------------------------------
# Train, save, load back
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["bert", "gpt2", "llama"])
def test_adapters_round_trip_with_identical_predictions(dirs, tmp_path, arch):
    tokenizer = _tokenizer(dirs[arch])
    model = apply_lora(_classifier(dirs[arch], tokenizer=tokenizer), LoraOptions(r=4, alpha=8, dropout=0.1))
    assert isinstance(model, LoraClassifier) and model.untrained  # a fresh head until trained
    batch = toy_batch(tokenizer, "3-class")
    trainer = Trainer(
        model,
        lambda params: torch.optim.AdamW(params, lr=2e-2),
        model.loss_fn,
        [batch] * 4,
        eval_loader=[batch],
        predict_fn=model.predict_fn,
        precision="fp32",
        device="cpu",
        epochs=1,
        seed=0,
    )
    trainer.fit()
    losses = [float(x) for x in trainer.state.history["loss"]]
    assert all(math.isfinite(x) for x in losses) and losses[-1] < losses[0]
    model.eval()
    with torch.no_grad():
        outputs = model(**_inputs(batch))

    saved = tmp_path / "lora"
    model.save_pretrained(saved)
    tokenizer.save_pretrained(saved)
    assert is_lora_directory(saved) and lora_base_model(saved) == str(dirs[arch])
    record = json.loads((saved / LORA_FILE).read_text())
    assert record["task"] == {"problem_type": "single_label_classification", "labels": LABELS}
    adapter = json.loads((saved / "adapter_config.json").read_text())
    assert adapter["r"] == 4 and adapter["lora_alpha"] == 8 and adapter["base_model_name_or_path"] == str(dirs[arch])
    # Adapters + head only: far smaller than the model's weights.
    full = (dirs[arch] / "model.safetensors").stat().st_size
    assert (saved / "adapter_model.safetensors").stat().st_size < full / 3

    reloaded = load_lora_classifier(saved, seed=123).eval()  # another seed: nothing may come from it
    assert reloaded.labels == LABELS and not reloaded.untrained
    assert trainable_parameters(reloaded)[0] == 0  # frozen for evaluation
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**_inputs(batch)), outputs, rtol=0, atol=0)


def test_regression_round_trips_and_a_moved_base_can_be_named(dirs, tmp_path):
    import shutil

    tokenizer = _tokenizer(dirs["qwen2"])
    model = apply_lora(load_classifier(str(dirs["qwen2"]), seed=0, regression=True), LoraOptions(r=2)).eval()
    batch = toy_batch(tokenizer, "regression")
    with torch.no_grad():
        outputs = model(**_inputs(batch))
    model.save_pretrained(tmp_path / "lora")
    moved = shutil.copytree(dirs["qwen2"], tmp_path / "moved-base")
    reloaded = load_lora_classifier(tmp_path / "lora", base_model=str(moved)).eval()
    assert reloaded.is_regression and reloaded.base_model == str(moved)
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**_inputs(batch)), outputs, rtol=0, atol=0)


def test_not_a_lora_directory_is_refused(dirs):
    assert not is_lora_directory(dirs["bert"])
    with pytest.raises(UsageError, match="not a LoRA classifier directory"):
        load_lora_classifier(dirs["bert"])


def test_bf16_autocast_step_changes_only_trainable_parameters(dirs):
    tokenizer = _tokenizer(dirs["gpt2"])
    model = apply_lora(_classifier(dirs["gpt2"], tokenizer=tokenizer), LoraOptions(r=4, dropout=0.0))
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)  # decay too: frozen stay put
    batch = toy_batch(tokenizer, "3-class")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(**_inputs(batch))
        loss = model.loss_fn(logits, batch["labels"])
    assert logits.dtype == torch.bfloat16 and loss.dtype == torch.float32
    loss.backward()
    optimizer.step()
    changed = {name for name, p in model.named_parameters() if not torch.equal(p, before[name])}
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert changed and changed <= trainable
    # lora_B starts at zero, so lora_A's first gradient is zero too; B and the head move.
    assert any(".lora_B." in name for name in changed) and any(".modules_to_save." in name for name in changed)
    assert all(p.dtype == torch.float32 for p in model.parameters())  # fp32 master weights, adapters included


def test_targets_are_checked_from_the_config_alone(dirs):
    """Start-up validation: the same answer as on the loaded model, without reading weights."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(dirs["gpt2"])
    options = LoraOptions(target_modules="c_attn,c_fc")
    assert check_lora_targets(config, options) == resolve_targets(_classifier(dirs["gpt2"]), options)
    with pytest.raises(
        UsageError, match="gpt2 has no Linear layer named q_proj; its Linear layers: c_attn, c_fc, c_proj"
    ):
        check_lora_targets(config, LoraOptions(target_modules="q_proj"))


# ---------------------------------------------------------------------------------------
# Reproducible adapters, and a rank the layers can use (issue 30)
# ---------------------------------------------------------------------------------------


def _lora_a(model) -> dict:
    return {name: p.detach().clone() for name, p in model.named_parameters() if "lora_A" in name}


@pytest.mark.parametrize("arch", ["bert", "gpt2"])
def test_adapters_depend_on_the_seed_alone_and_leave_the_callers_rng_alone(dirs, arch):
    torch.manual_seed(123)
    first = _lora_a(apply_lora(_classifier(dirs[arch]), LoraOptions(r=4), seed=0))
    torch.randn(1000)  # another RNG history before the second build
    state = torch.get_rng_state()
    second = _lora_a(apply_lora(_classifier(dirs[arch]), LoraOptions(r=4), seed=0))
    assert torch.equal(torch.get_rng_state(), state)  # the caller's stream is untouched
    assert first.keys() == second.keys() and first
    assert all(torch.equal(first[k], second[k]) for k in first)
    other = _lora_a(apply_lora(_classifier(dirs[arch]), LoraOptions(r=4), seed=1))
    assert not all(torch.equal(first[k], other[k]) for k in first)  # the seed does choose them


def test_a_rank_above_the_layers_width_is_refused_before_peft_allocates(dirs):
    # The tiny models are 32 wide: a rank-33 update of a 32 x 32 layer adds parameters and nothing else.
    with pytest.raises(
        UsageError,
        match=r"--lora-r 33 is above the rank the adapted layers can use \(at most 32: "
        r"min\(in, out\) of query, value\)",
    ):
        apply_lora(_classifier(dirs["bert"]), LoraOptions(r=33))
    apply_lora(_classifier(dirs["bert"]), LoraOptions(r=32))  # full rank: allowed
    from transformers import AutoConfig

    with pytest.raises(UsageError, match="--lora-r 100000000 is above"):  # shapes only: no 12.8 GB allocation
        check_lora_targets(AutoConfig.from_pretrained(dirs["gpt2"]), LoraOptions(r=100_000_000))


@pytest.mark.parametrize("arch", ["bert", "gpt2"])
def test_two_identical_lora_runs_are_equal_to_the_bit(dirs, tmp_path, arch):
    from tests.cli_runs import run_cli

    losses = []
    for name in ("a", "b"):
        code, _, out = run_cli(tmp_path / name, dirs[arch], "--max-steps", "6", "--lr", "5e-3", "--lora")
        assert code == 0
        losses.append(json.loads((out / "results.json").read_text())["runs"][0]["history"]["loss"])
    assert losses[0] == losses[1]


def test_a_lora_run_resumed_mid_way_ends_bit_identical(dirs, tmp_path, monkeypatch):
    import shutil
    from pathlib import Path

    from mixft.callbacks.checkpointer import Checkpointer
    from mixft.cli.main import main
    from mixft.train.checkpoint import load_checkpoint
    from tests.cli_runs import text_classification_args, toy_files

    train, dev = toy_files(tmp_path / "data")  # 24 rows, batch 4: 6 steps per epoch, 12 in all

    def argv(out):
        return text_classification_args(
            dirs["bert"], train, dev, out, "--lora", batch_size=4, epochs=2, lr="5e-3", checkpoint_every=1
        )

    snaps, save = {}, Checkpointer.save

    def save_and_copy(self, trainer):
        path = save(self, trainer)
        snaps[trainer.state.step] = Path(shutil.copy(path, tmp_path / f"step{trainer.state.step}.pt"))
        return path

    monkeypatch.setattr(Checkpointer, "save", save_and_copy)
    assert main(argv(tmp_path / "ref")) == 0
    monkeypatch.setattr(Checkpointer, "save", save)
    torch.randn(100)  # another RNG history before the resumed build
    out = tmp_path / "resumed"
    out.mkdir()
    shutil.copy(snaps[8], out / "checkpoint.pt")  # the middle of epoch 2
    assert main([*argv(out), "--resume"]) == 0
    ref = load_checkpoint(tmp_path / "ref" / "checkpoint.pt")["trainer"]["model"]
    new = load_checkpoint(out / "checkpoint.pt")["trainer"]["model"]
    assert [k for k in ref if not torch.equal(ref[k], new[k])] == []
    runs = [json.loads((d / "results.json").read_text())["runs"][0] for d in (tmp_path / "ref", out)]
    assert [e["loss"] for e in runs[0]["eval_history"]] == [e["loss"] for e in runs[1]["eval_history"]]
