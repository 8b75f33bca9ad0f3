"""Issue 18 wired end to end: every run of a compare carries its memory breakdown, model size,
eval predictions and agreement with fp32, and no memory figure depends on the run order."""

from __future__ import annotations

import json

import pytest
import torch

from mixft.amp.memory import MEMORY_KEYS
from mixft.config.run_config import RunConfig
from mixft.runs.runner import run
from tests.conftest import made_once, make_data_dir, make_tiny_bert_dir

BREAKDOWN = ("parameters", "gradients", "optimizer_state", "saved_activations_peak")


def _config(out, precisions, model, data) -> RunConfig:
    return RunConfig(
        recipe="bert-sst2",
        precisions=precisions,
        model=str(model),
        data_dir=str(data),
        batch_size=8,
        epochs=1,
        max_steps=2,
        output_dir=str(out),
    )


def _runs(out):
    return {r["precision"]: r for r in json.loads((out / "results.json").read_text())["runs"]}


def _compare(out, precisions, model, data):
    run(_config(out, precisions, model, data))
    return _runs(out)


@pytest.fixture(scope="module")
def fresh_compare(tmp_path_factory):
    """``--compare fp32,bf16`` of a 3-layer tiny BERT on 16 generated sentences, batches of 8, memory
    measured in fresh processes: (runs by precision, output directory, model directory, data directory).

    Three layers and batches of 8, not conftest's one layer and 4: a one-layer model's only layer is
    its last, which computes little beyond keys and values (mixft.models.first_token_encoder); there,
    at 32 wide, the fp32 copies autocast keeps (LayerNorm, attention probabilities) and its bf16 casts
    outweighed the halving (376,160 bytes saved in bf16 vs 374,704 in fp32; 557,952 vs 577,280 here)."""

    def compare(root):
        model = make_tiny_bert_dir(root / "bert", layers=3)
        _compare(root / "o", ["fp32", "bf16"], model, make_data_dir(root / "sst2", 16, 8))

    root = made_once(tmp_path_factory, "memory-figures", compare)
    return _runs(root / "o"), root / "o", root / "bert", root / "sst2"


@pytest.mark.fresh_memory
def test_a_runs_peak_does_not_depend_on_what_ran_before_it_in_the_process(tmp_path, fresh_compare):
    """bf16 ran second in the compare; measured again first, from a process that holds far more: its peak
    (a fresh process's) and its breakdown (one step in this process, here a bf16 run alone) are the compare's."""
    from mixft.runs.fresh_process import fresh_peak_rss
    from mixft.runs.plan import make_plan

    forward, _, model, data = fresh_compare
    plan = make_plan(_config(tmp_path / "alone", ["bf16"], model, data))
    (bf16,) = plan.runs
    # What an earlier run may leave allocated in the process (allocator caches, datasets): 256 MiB
    # held, and touched so it is resident, while bf16 is measured. An in-process peak RSS carries it;
    # a figure that does not depend on what ran before cannot.
    ballast = torch.ones(64 * 2**20)
    try:
        figure = fresh_peak_rss(plan.cfg, plan.prepared, bf16.precision, plan.device, bf16.seed)
        run(plan)  # the same plan: its data is not prepared again
        alone = _runs(tmp_path / "alone")["bf16"]
    finally:
        del ballast
    assert forward["bf16"]["memory"]["device_figure_scope"] == "fresh_process"
    assert figure.peak_bytes == pytest.approx(forward["bf16"]["peak_memory_bytes"], rel=0.05)
    for key in BREAKDOWN:
        assert alone["memory"][key] == pytest.approx(forward["bf16"]["memory"][key], rel=0.05), key
    # Same seed, same first batch: the one-step figures are not just close but equal.
    assert alone["memory"]["saved_activations_peak"] == forward["bf16"]["memory"]["saved_activations_peak"]


@pytest.mark.fresh_memory
def test_compare_results_carry_memory_parameters_predictions_and_agreement(fresh_compare):
    runs, out, _, _ = fresh_compare
    fp32, bf16 = runs["fp32"], runs["bf16"]
    for r in (fp32, bf16):
        assert set(MEMORY_KEYS) <= set(r["memory"])
        assert r["memory"]["gradients"] == r["memory"]["parameters"]  # every weight trains (no LoRA)
        assert r["memory"]["optimizer_state"] >= 2 * r["memory"]["parameters"]  # AdamW's two moments
        assert r["parameters"]["trainable"] == r["parameters"]["total"] > 0
        assert r["memory"]["parameters"] == 4 * r["parameters"]["total"]  # fp32 master weights
        assert len(r["eval_predictions"]) == len(r["eval_labels"]) == 8  # tiny_data_dir's dev set
        assert set(r["eval_predictions"]) <= {0, 1}
    assert fp32["agreement_vs_fp32"] is None
    agreement = bf16["agreement_vs_fp32"]
    flips = sum(p != q for p, q in zip(bf16["eval_predictions"], fp32["eval_predictions"]))
    assert agreement["n"] == 8 and agreement["flips"] == flips
    # Autocast saves bf16 copies of what the matmuls see: fewer bytes than fp32 on the same batch.
    assert bf16["memory"]["saved_activations_peak"] < fp32["memory"]["saved_activations_peak"]
    assert "bfloat16" in bf16["memory"]["saved_by_dtype"] and "bfloat16" not in fp32["memory"]["saved_by_dtype"]
    report = (out / "report.md").read_text()
    assert "## Memory breakdown" in report and "## Agreement with fp32" in report
    assert "run order affects it" not in report  # the fresh-process figures do not depend on it


def test_measuring_before_fit_changes_no_training(tmp_path, tiny_bert_dir, tiny_data_dir):
    """The one-step measurement restores RNGs and gradients: a run trains exactly as without it."""
    from mixft.runs import memory_figures

    cfg = dict(
        recipe="bert-sst2", model=str(tiny_bert_dir), data_dir=str(tiny_data_dir), batch_size=4, epochs=1, max_steps=3
    )
    measured = run(RunConfig(**cfg, output_dir=str(tmp_path / "m")))[0]
    original = memory_figures.measure_step_memory
    memory_figures.measure_step_memory = lambda *a, **k: (_ for _ in ()).throw(RuntimeError("skipped"))
    try:
        plain = run(RunConfig(**cfg, output_dir=str(tmp_path / "p")))[0]
    finally:
        memory_figures.measure_step_memory = original
    assert measured.memory is not None and plain.memory is None
    assert measured.history["loss"] == plain.history["loss"]
    assert measured.eval_predictions == plain.eval_predictions


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_breakdown_sums_to_cuda_max_allocated():
    """parameters + gradients + optimizer state + saved activations ≈ max allocated of a step.

    The step is the trainer's (fp32 forward, backward, AdamW step, gradients set to None),
    run once to create the optimizer state and the library workspaces, then measured. What
    CUDA holds at rest that is none of the four (cuBLAS/cuBLASLt workspaces, the batch) is
    read after that first step (allocated minus parameters and optimizer state) and taken
    out. The sizes make saved activations the bulk, as in real fine-tuning, so transient
    buffers are small beside them.
    """
    from transformers import BertConfig, BertForSequenceClassification

    from mixft.amp.memory import measure_step_memory, optimizer_state_bytes

    device = torch.device("cuda")
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=512,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        max_position_embeddings=128,
        num_labels=2,
    )
    model = BertForSequenceClassification(config).to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)  # no whole-model temporaries
    inputs = {
        "input_ids": torch.randint(0, 512, (32, 128), device=device),
        "attention_mask": torch.ones(32, 128, dtype=torch.long, device=device),
    }
    labels = torch.randint(0, 2, (32,), device=device)
    loss_fn = lambda out, y: torch.nn.functional.cross_entropy(out.logits, y)  # noqa: E731

    def step():
        loss = loss_fn(model(**inputs), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del loss

    step()  # the optimizer's state and the workspaces exist from here on, as in every step but the first
    torch.cuda.synchronize()
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    at_rest_other = torch.cuda.memory_allocated(device) - params - optimizer_state_bytes([opt])
    assert at_rest_other >= 0
    torch.cuda.reset_peak_memory_stats(device)
    step()
    torch.cuda.synchronize()
    device_figure = torch.cuda.max_memory_allocated(device) - at_rest_other

    figures = measure_step_memory(model, loss_fn, inputs, labels, lambda: torch.autocast("cuda", enabled=False), device)
    breakdown = (
        figures["parameters"] + figures["gradients"] + optimizer_state_bytes([opt]) + figures["saved_activations_peak"]
    )
    assert figures["saved_activations_peak"] > 2 * figures["parameters"]  # the sizes did what the docstring says
    assert breakdown == pytest.approx(device_figure, rel=0.10), (breakdown, device_figure, figures)
