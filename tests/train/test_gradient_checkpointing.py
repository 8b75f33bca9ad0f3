"""--gradient-checkpointing: the same loss and gradients, fewer saved activations.

On a tiny 3-layer BERT in train mode (dropout on: checkpointing must replay the same
masks), for bert-sst2's BertClassifier, text-classification's SequenceClassifier and a
LoRA model; the saved-activation peak is mixft.amp.memory.measure_step_memory's figure.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from torch import nn

from mixft.amp.memory import measure_step_memory
from mixft.errors import UsageError
from mixft.models.classifiers import BertClassifier, enable_gradient_checkpointing, load_classifier, task_loss
from recipes.bert_sst2 import loss_fn as bce_loss
from tests.tiny_models import make_tiny_model_dir, make_tokenizer, toy_batch

LAYERS = 3


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    return make_tiny_model_dir("bert", tmp_path_factory.mktemp("ckpt") / "bert", num_hidden_layers=LAYERS)


@pytest.fixture(scope="module")
def batch():
    inputs = toy_batch(make_tokenizer("bert"), "3-class")
    labels = inputs.pop("labels")
    return inputs, labels


def bert_classifier(path):
    from transformers import AutoModel

    torch.manual_seed(0)
    return BertClassifier(AutoModel.from_pretrained(path, dtype=torch.float32)).train()


def sequence_classifier(path, lora: bool = False):
    model = load_classifier(str(path), seed=0, labels=["neg", "neutral", "pos"])
    if lora:
        from mixft.models.lora import LoraOptions, apply_lora

        torch.manual_seed(0)  # the adapters' A matrices are drawn from the global RNG
        model = apply_lora(model, LoraOptions(dropout=0.0))
    return model.train()


def loss_and_grads(model, loss_fn, inputs, labels):
    torch.manual_seed(1)  # the same dropout masks in both models
    loss = loss_fn(model(**inputs), labels)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return loss.detach(), grads


def saved_peak(model, loss_fn, inputs, labels) -> int:
    return measure_step_memory(model, loss_fn, inputs, labels, contextlib.nullcontext, "cpu")["saved_activations_peak"]


CASES = {
    "bert-sst2": (bert_classifier, lambda labels: (labels == 2).float(), bce_loss),
    "text-classification": (sequence_classifier, lambda labels: labels, task_loss(False)),
    "lora": (lambda p: sequence_classifier(p, lora=True), lambda labels: labels, task_loss(False)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_same_loss_and_gradients_fewer_saved_activations(case, bert_dir, batch):
    build, make_labels, loss_fn = CASES[case]
    inputs, labels = batch[0], make_labels(batch[1])
    plain, checkpointed = build(bert_dir), build(bert_dir)
    enable_gradient_checkpointing(checkpointed)

    loss_a, grads_a = loss_and_grads(plain, loss_fn, inputs, labels)
    loss_b, grads_b = loss_and_grads(checkpointed, loss_fn, inputs, labels)
    assert torch.allclose(loss_a, loss_b, rtol=1e-6, atol=1e-7)
    assert grads_a.keys() == grads_b.keys() and grads_a  # every trained weight still gets its gradient
    for name in grads_a:
        assert torch.allclose(grads_a[name], grads_b[name], rtol=1e-5, atol=1e-7), name

    before, after = saved_peak(plain, loss_fn, inputs, labels), saved_peak(checkpointed, loss_fn, inputs, labels)
    # Each layer keeps its input only, not the attention and feed-forward activations inside it.
    assert after < 0.6 * before, (before, after)


def test_lora_adapters_get_gradients_through_the_frozen_checkpointed_layers(bert_dir, batch):
    # The reentrant kind would give them none (the frozen embeddings' output needs no grad).
    model = sequence_classifier(bert_dir, lora=True)
    enable_gradient_checkpointing(model)
    _, grads = loss_and_grads(model, task_loss(False), *batch)
    adapters = [n for n in grads if "lora_" in n]
    assert len(adapters) == 2 * 2 * LAYERS  # A and B of query and value, in every layer
    assert all(grads[n].abs().sum() > 0 for n in adapters if "lora_B" in n)


def test_a_model_without_checkpointing_support_is_refused_in_one_line():
    class NoSupport(nn.Module):
        supports_gradient_checkpointing = False

    class Wrapper(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = NoSupport()

    with pytest.raises(UsageError, match="--gradient-checkpointing: NoSupport does not support it"):
        enable_gradient_checkpointing(Wrapper())
