"""BertClassifier's last layer computes only [CLS] (mixft.models.first_token_encoder): what the whole encoder gives.

The reference is the same classifier running the whole encoder (``reads_first_tokens_only``
patched to False, which is also the path of every encoder it does not cover): logits and every
gradient equal to float rounding (dropout off), padded with real padding or packed, sdpa or
eager attention, with or without a pooler; under bf16 autocast within bf16's rounding. A hook
on the last layer's feed-forward checks that it really ran on the [CLS] rows only.
"""

from __future__ import annotations

import pytest
import torch

from mixft.data.packing import pack_batch
from mixft.models import classifiers
from mixft.models.classifiers import BertClassifier
from mixft.models.first_token_encoder import reads_first_tokens_only
from recipes.bert_sst2 import loss_fn as bce_loss
from tests.tiny_models import make_tiny_model_dir, tiny_config, uneven_bert_batch


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    return make_tiny_model_dir("bert", tmp_path_factory.mktemp("first-token") / "bert", num_hidden_layers=3)


@pytest.fixture(scope="module")
def batch():
    batch = uneven_bert_batch()
    assert not batch["attention_mask"].all()  # some rows are padded
    return batch


def classifier(path, attn: str = "sdpa", pooler: bool = True) -> BertClassifier:
    from transformers import BertModel

    torch.manual_seed(0)
    encoder = BertModel.from_pretrained(path, dtype=torch.float32, attn_implementation=attn, add_pooling_layer=pooler)
    return BertClassifier(encoder).eval()  # dropout off: the same function both ways


def logits_and_grads(model, batch, autocast: bool = False):
    model.zero_grad(set_to_none=True)
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        logits = model(**inputs)
    bce_loss(logits, batch["labels"].float()).backward()
    return logits.detach().float(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def whole_encoder(monkeypatch, model, batch, autocast: bool = False):
    with monkeypatch.context() as patch:
        patch.setattr(classifiers, "reads_first_tokens_only", lambda encoder: False)
        return logits_and_grads(model, batch, autocast)


@pytest.mark.parametrize(
    "packed,attn,pooler", [(False, "sdpa", True), (False, "eager", True), (True, "sdpa", True), (True, "eager", False)]
)
def test_logits_and_gradients_equal_the_whole_encoders(monkeypatch, bert_dir, batch, packed, attn, pooler):
    model = classifier(bert_dir, attn, pooler)
    assert reads_first_tokens_only(model.encoder)
    inputs = pack_batch(batch) if packed else batch
    ref_logits, ref_grads = whole_encoder(monkeypatch, model, inputs)
    ffn_rows = []
    hook = model.encoder.encoder.layer[-1].intermediate.register_forward_hook(
        lambda module, args, out: ffn_rows.append(args[0].shape[:-1])
    )
    logits, grads = logits_and_grads(model, inputs)
    hook.remove()
    assert ffn_rows == [(len(batch["labels"]),)]  # the last feed-forward ran on one row per sentence
    torch.testing.assert_close(logits, ref_logits, rtol=1e-5, atol=1e-6)
    assert grads.keys() == ref_grads.keys()
    for name in ref_grads:
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=1e-4, atol=1e-6, msg=name)


def test_under_bf16_autocast_logits_and_gradients_stay_within_bf16_rounding(monkeypatch, bert_dir, batch):
    model = classifier(bert_dir)
    ref_logits, ref_grads = whole_encoder(monkeypatch, model, batch, autocast=True)
    logits, grads = logits_and_grads(model, batch, autocast=True)
    torch.testing.assert_close(logits, ref_logits, rtol=2e-2, atol=2e-2)
    flat = torch.cat([g.flatten() for g in grads.values()])
    ref_flat = torch.cat([ref_grads[n].flatten() for n in grads])
    assert torch.nn.functional.cosine_similarity(flat, ref_flat, dim=0) > 0.999


def test_training_with_dropout_runs_the_last_layer_on_cls_and_moves_every_parameter(bert_dir, batch):
    model = classifier(bert_dir).train()
    _, grads = logits_and_grads(model, pack_batch(batch))
    untouched = {n for n, p in model.named_parameters() if n not in grads}
    assert untouched == set()
    assert all(torch.isfinite(g).all() for g in grads.values())


def test_gradient_checkpointing_recomputes_the_last_layer_too(bert_dir, batch):
    # --gradient-checkpointing: every layer's activations are recomputed in backward, the last one's
    # [CLS]-only computation included (its feed-forward runs again on the [CLS] rows), and the
    # gradients are those of the run without it.
    model = classifier(bert_dir).train()  # dropout on: the recompute must draw the same masks
    inputs = pack_batch(batch)
    torch.manual_seed(1)
    _, ref_grads = logits_and_grads(model, inputs)
    classifiers.enable_gradient_checkpointing(model)  # what --gradient-checkpointing calls
    ffn_rows = []
    hook = model.encoder.encoder.layer[-1].intermediate.register_forward_hook(
        lambda module, args, out: ffn_rows.append(args[0].shape[:-1])
    )
    torch.manual_seed(1)
    _, grads = logits_and_grads(model, inputs)
    hook.remove()
    assert ffn_rows == [(len(batch["labels"]),)] * 2  # forward, then the recompute in backward
    assert grads.keys() == ref_grads.keys()
    for name in ref_grads:
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=1e-5, atol=1e-7, msg=name)


def test_other_encoders_and_settings_run_the_whole_encoder(bert_dir):
    from transformers import AutoModel, BertModel

    roberta = AutoModel.from_pretrained(make_tiny_model_dir("roberta", bert_dir.parent / "roberta"))
    assert not reads_first_tokens_only(roberta)
    for overrides in ({"chunk_size_feed_forward": 4}, {"is_decoder": True}):
        config = tiny_config("bert", vocab_size=100, **overrides)
        assert not reads_first_tokens_only(BertModel(config))
    flash = BertModel(tiny_config("bert", vocab_size=100))
    flash.config._attn_implementation_internal = "flash_attention_2"
    assert not reads_first_tokens_only(flash)
    assert reads_first_tokens_only(BertModel(tiny_config("bert", vocab_size=100)))


@pytest.mark.parametrize("kept", ["encoder", "encoder.encoder", "LAST", "LAST.attention", "LAST.attention.self"])
def test_fp32_modules_on_a_part_the_shortcut_skips_runs_the_whole_last_layer_in_fp32(bert_dir, batch, kept):
    # The shortcut calls the embeddings, the layers and the last layer's Linears, not the encoder, its
    # stack, the last layer, its attention or its self-attention: --fp32-modules naming one of those had
    # left the last layer's attention in bf16 without a word.
    from mixft.amp.fp32 import keep_in_fp32

    model = classifier(bert_dir)
    last = f"encoder.encoder.layer.{len(model.encoder.encoder.layer) - 1}"
    query = model.encoder.encoder.layer[-1].attention.self.query
    dtypes = []
    query.register_forward_hook(lambda module, inputs, output: dtypes.append(output.dtype))
    assert reads_first_tokens_only(model.encoder)
    logits_and_grads(model, batch, autocast=True)
    with keep_in_fp32(model, kept.replace("LAST", last)):
        assert not reads_first_tokens_only(model.encoder)  # the whole last layer, as the user's fp32 asks
        logits_and_grads(model, batch, autocast=True)
    assert dtypes == [torch.bfloat16, torch.float32]
    with keep_in_fp32(model, last + ".attention.self.query"):  # a module the shortcut calls: it stays on
        assert reads_first_tokens_only(model.encoder)


def test_a_forward_hook_on_a_skipped_part_runs_the_whole_last_layer_so_it_fires(bert_dir, batch):
    model = classifier(bert_dir)
    seen = []
    handle = model.encoder.encoder.layer[-1].attention.self.register_forward_hook(lambda *args: seen.append(1))
    assert not reads_first_tokens_only(model.encoder)
    logits_and_grads(model, batch)
    assert seen == [1]
    handle.remove()
    assert reads_first_tokens_only(model.encoder)
