"""mixft.amp.preflight: the fp16 risk check names a planted overflow, passes a healthy model, and
its advice (--fp32-modules) removes the overflow in a real fp16 autocast step on CPU."""

from __future__ import annotations

import json
import math
import random

import pytest
import torch
from torch import nn

from mixft.amp.fp32 import keep_in_fp32
from mixft.amp.preflight import FP16_MAX, OVERFLOW_MARGIN, ROOT, preflight
from mixft.errors import UsageError

PLANTED = "bert.encoder.layer.0.output.dense"  # a feed-forward output projection, T5's "wo" case
PLANTED_CONTAINER = "bert.encoder.layer.0.output"  # dense + dropout + residual LayerNorm


def tiny_bert(seed: int = 0) -> nn.Module:
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=60,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=37,
        max_position_embeddings=64,
        num_labels=2,
    )
    return BertForSequenceClassification(config)


def bert_batches(n: int = 3, size: int = 8) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [
        {
            "input_ids": torch.randint(5, 60, (size, 12), generator=g),
            "attention_mask": torch.ones(size, 12, dtype=torch.long),
            "labels": torch.randint(0, 2, (size,), generator=g),
        }
        for _ in range(n)
    ]


def bert_loss(outputs, labels):
    return nn.functional.cross_entropy(outputs.logits, labels)


def planted_bert(factor: float = 1e7) -> nn.Module:
    model = tiny_bert()
    with torch.no_grad():
        # The projection's outputs are ~1 at initialisation: 1e7 puts them far past 65504.
        model.get_submodule(PLANTED).weight.mul_(factor)
    return model


def fp16_step(model: nn.Module, batch: dict) -> tuple[float, float, float, bool]:
    """One real fp16 AMP step on CPU: (loss, scale before, scale after, parameters changed)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu")
    inputs = dict(batch)
    labels = inputs.pop("labels")
    before = [p.detach().clone() for p in model.parameters()]
    with torch.autocast("cpu", dtype=torch.float16):
        loss = bert_loss(model(**inputs), labels)
    scaler.scale(loss).backward()
    scale = scaler.get_scale()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    changed = any(not torch.equal(b, p) for b, p in zip(before, model.parameters()))
    return float(loss.detach()), scale, scaler.get_scale(), changed


def test_cpu_float16_autocast_runs_linear_in_half():
    # The step tests below mean something only if CPU autocast really computes in fp16.
    assert torch.amp.autocast_mode.is_autocast_available("cpu")
    with torch.autocast("cpu", dtype=torch.float16):
        assert nn.Linear(4, 4)(torch.randn(2, 4)).dtype == torch.float16


def test_planted_overflow_is_named_first():
    result = preflight(planted_bert(), bert_loss, bert_batches(), device="cpu")
    top = result.modules_at_risk[0]
    assert (top.name, top.kind, top.tensor, top.level) == (PLANTED, "overflow", "activation", "exceeds")
    assert top.origin and top.value > FP16_MAX and top.ratio == pytest.approx(top.value / FP16_MAX)
    # The dropout after it carries the same values (x 1/(1-p)) but is not where they start.
    assert not any(r.origin for r in result.modules_at_risk[1:])
    assert result.fp32_modules == [PLANTED_CONTAINER]
    assert result.flag_line == f"--fp32-modules {PLANTED_CONTAINER}"
    lines = result.render()
    assert PLANTED in lines[0] and any(result.flag_line in line for line in lines)


def test_real_fp16_step_overflows_and_keeping_the_planted_layer_in_fp32_fixes_it():
    model = planted_bert()
    batch = bert_batches(1)[0]
    loss, before, after, _ = fp16_step(model, batch)
    assert not math.isfinite(loss) and after < before  # the scaler found inf and skipped the step

    advice = preflight(model, bert_loss, bert_batches(), device="cpu").fp32_modules
    for names in ([PLANTED], advice):
        with keep_in_fp32(model, names):
            loss, before, after, changed = fp16_step(model, batch)
        assert math.isfinite(loss) and after == before and changed, names
    # Without the fix, the same model overflows again: the handle really was removed.
    assert not math.isfinite(fp16_step(model, batch)[0])


def test_activations_within_the_margin_are_flagged_as_near_overflow():
    # 1e6 gives ~2.6e4 in fp32: within range, but within OVERFLOW_MARGIN of it (on this CPU
    # the projection itself already gives inf under fp16 autocast: its intermediates are larger).
    result = preflight(planted_bert(1e6), bert_loss, bert_batches(), device="cpu")
    top = result.modules_at_risk[0]
    assert (top.name, top.level, top.origin) == (PLANTED, "close", True)
    assert FP16_MAX / OVERFLOW_MARGIN < top.value <= FP16_MAX
    assert result.fp32_modules == [PLANTED_CONTAINER] and "near overflow" in result.render()[1]


def test_healthy_tiny_bert_has_no_module_at_risk():
    result = preflight(tiny_bert(), bert_loss, bert_batches(), device="cpu", bf16_supported=True)
    assert result.modules_at_risk == [] and not result.at_risk
    assert result.recommendations == [] and result.fp32_modules == [] and result.flag_line is None
    assert result.batches == 3 and result.modules_checked > 20
    assert 0 < result.largest_activation[1] < FP16_MAX / OVERFLOW_MARGIN
    assert result.render()[0].startswith("preflight: no module at fp16 risk")
    doc = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert doc["at_risk"] is False and doc["modules_at_risk"] == [] and doc["init_scale"] == 65536.0


def test_grads_modes_and_rng_are_left_as_they_were():
    model = tiny_bert()
    model.eval()
    model.bert.embeddings.train()  # a mixed set of flags must come back exactly
    modes = {name: m.training for name, m in model.named_modules()}
    marker = torch.full_like(model.classifier.weight, 7.0)
    model.classifier.weight.grad = marker.clone()
    random.seed(3)
    torch.manual_seed(3)
    python_state, torch_state = random.getstate(), torch.get_rng_state()

    preflight(model, bert_loss, bert_batches(), device="cpu")  # dropout draws numbers in train mode

    assert random.getstate() == python_state and torch.equal(torch.get_rng_state(), torch_state)
    assert torch.equal(model.classifier.weight.grad, marker)
    assert all(p.grad is None for name, p in model.named_parameters() if name != "classifier.weight")
    assert {name: m.training for name, m in model.named_modules()} == modes


class TupleBlock(nn.Module):
    """Returns a tuple, like many transformer layers: the hook must look inside it."""

    def __init__(self, scale: float):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.scale = scale

    def forward(self, x):
        return self.proj(x) * self.scale, x.mean()


class Net(nn.Module):
    def __init__(self, scale: float = 1.0):
        super().__init__()
        self.inp = nn.Linear(4, 8)
        self.block = TupleBlock(scale)
        self.head = nn.Sequential(nn.ReLU(), nn.Linear(8, 2))

    def forward(self, x):
        return self.head(self.block(self.inp(x))[0])


def mlp_batches(n=3):
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(16, 4, generator=g), torch.randint(0, 2, (16,), generator=g)) for _ in range(n)]


def test_overflow_inside_a_tuple_output_that_reaches_the_output_has_no_fp32_module_fix():
    torch.manual_seed(0)
    model = Net(scale=1e6)
    result = preflight(model, nn.functional.cross_entropy, mlp_batches(), device="cpu", bf16_supported=False)
    top = result.modules_at_risk[0]
    # block's output is a tuple; the innermost module where the overflow starts is named first,
    # not the containers (block, the model) whose inputs were also within range.
    assert (top.name, top.origin) == ("block", True)
    assert {r.name for r in result.modules_at_risk if r.origin} == {"block"}
    assert ROOT in {r.name for r in result.modules_at_risk}
    # The logits themselves overflow: no module can be kept in fp32 to contain it.
    assert result.fp32_modules == [] and top.contained_by is None
    assert any("reaches the model's output" in text for text in result.recommendations)
    assert any("cannot train in bf16" in text for text in result.recommendations)


def test_overflowing_gradients_suggest_the_largest_initial_scale_that_fits():
    torch.manual_seed(0)
    model = Net()

    def loud_loss(outputs, labels):  # gradients ~1e3 times larger than cross-entropy's
        return 1e3 * nn.functional.cross_entropy(outputs, labels)

    result = preflight(model, loud_loss, mlp_batches(), device="cpu", bf16_supported=True)
    grads = [r for r in result.modules_at_risk if r.tensor == "gradient"]
    assert grads and all(r.kind == "overflow" and r.ratio > 1 for r in grads)
    assert result.modules_at_risk[0].tensor == "gradient"  # no activation is at risk here
    largest = result.largest_gradient[1]
    scale = result.suggested_init_scale
    assert math.log2(scale).is_integer() and largest * scale <= FP16_MAX < largest * scale * 2
    assert any(f"--init-loss-scale {scale:g}" in text for text in result.recommendations)
    assert result.recommendations[0].startswith("--precision bf16")


def test_underflowing_gradients_are_counted_and_a_higher_scale_suggested():
    torch.manual_seed(0)
    model = Net()

    def quiet_loss(outputs, labels):  # gradients ~1e-10: times 65536 still below 2**-24
        return 1e-10 * nn.functional.cross_entropy(outputs, labels)

    result = preflight(model, quiet_loss, mlp_batches(), device="cpu")
    under = [r for r in result.modules_at_risk if r.kind == "underflow"]
    assert under and all(r.value > 0.1 and r.value <= 1 for r in under)
    assert result.suggested_init_scale > 65536 and result.largest_gradient[1] * result.suggested_init_scale <= FP16_MAX


def test_max_batches_limits_the_work():
    consumed = []

    def batches():
        for b in mlp_batches(5):
            consumed.append(b)
            yield b

    result = preflight(Net(), nn.functional.cross_entropy, batches(), device="cpu", max_batches=2)
    assert result.batches == 2 and len(consumed) == 2


def test_non_finite_fp32_values_are_reported_as_json_null():
    model = Net()
    with torch.no_grad():
        model.block.proj.bias.fill_(math.inf)
    result = preflight(model, nn.functional.cross_entropy, mlp_batches(1), device="cpu")
    assert result.modules_at_risk[0].name == "block.proj"
    doc = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert doc["modules_at_risk"][0]["value"] is None
    assert result.recommendations[0].startswith("block.proj is already inf/NaN in fp32")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"init_scale": 0}, "init_scale"),
        ({"init_scale": math.inf}, "init_scale"),
        ({"max_batches": 0}, "max_batches"),
    ],
)
def test_bad_arguments_are_usage_errors(kwargs, message):
    with pytest.raises(UsageError, match=message):
        preflight(Net(), nn.functional.cross_entropy, mlp_batches(), device="cpu", **kwargs)


def test_no_batches_or_unlabelled_batches_are_usage_errors():
    with pytest.raises(UsageError, match="no batches"):
        preflight(Net(), nn.functional.cross_entropy, [], device="cpu")
    with pytest.raises(UsageError, match="labels"):
        preflight(tiny_bert(), bert_loss, [{"input_ids": torch.ones(2, 3, dtype=torch.long)}], device="cpu")


def test_pre_norm_decoder_carries_the_overflow_to_the_final_norm():
    # Llama adds each block's output to the residual stream and normalises only at the end:
    # the smallest module around a planted overflow is then the whole base model, and the
    # advice says that keeping it in fp32 leaves little for fp16.
    from transformers import LlamaConfig, LlamaForSequenceClassification

    torch.manual_seed(0)
    model = LlamaForSequenceClassification(
        LlamaConfig(
            vocab_size=60,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            intermediate_size=37,
            max_position_embeddings=64,
            num_labels=2,
            pad_token_id=0,
        )
    )
    batches = bert_batches(2, size=4)
    for b in batches:
        b.pop("attention_mask")  # no padding: last-token pooling reads the last position
    assert not preflight(model, bert_loss, batches, device="cpu").at_risk
    with torch.no_grad():
        model.model.layers[0].mlp.down_proj.weight.mul_(1e8)
    result = preflight(model, bert_loss, batches, device="cpu")
    top = result.modules_at_risk[0]
    assert (top.name, top.level, top.origin) == ("model.layers.0.mlp.down_proj", "exceeds", True)
    assert result.fp32_modules == ["model"]
    assert any("of the parameters in fp32" in text for text in result.recommendations)


def test_a_shuffling_loader_passed_whole_gives_training_the_same_first_epoch():
    # iter(loader) draws the shuffle seed from torch's RNG; preflight creates the iterator
    # after saving the RNG, so the training loop's own iter() draws the same order.
    from torch.utils.data import DataLoader, TensorDataset

    data = TensorDataset(torch.randn(40, 4), torch.randint(0, 2, (40,)))
    loader = DataLoader(data, batch_size=8, shuffle=True)
    model = Net()
    torch.manual_seed(5)
    expected = [y.tolist() for _, y in loader]
    torch.manual_seed(5)
    preflight(model, nn.functional.cross_entropy, loader, device="cpu", max_batches=2)
    assert [y.tolist() for _, y in loader] == expected


def test_the_suggested_loss_scale_counts_weight_gradients_and_trains_without_skips():
    """Was: only module outputs' gradients were measured; a weight gradient (a sum over the batch) 2,000x larger
    made the advice "start at 16384, ~2 steps skipped" where training skipped 12 steps from it (and 14 from 65536)."""
    from mixft.train.trainer import Trainer

    torch.manual_seed(0)
    loader = [(torch.randn(256, 16) * 300, torch.zeros(256, 1)) for _ in range(4)]

    def make():
        torch.manual_seed(1)
        return nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 1))

    model = make()
    result = preflight(model, nn.MSELoss(), loader, device="cpu")
    nn.MSELoss()(model(loader[0][0]), loader[0][1]).backward()
    weight_max = max(float(p.grad.abs().max()) for p in model.parameters())
    assert result.largest_gradient[1] >= weight_max * 0.5  # measured over 3 batches; the first alone is this
    scale = result.suggested_init_scale
    assert scale is not None and scale * result.largest_gradient[1] <= FP16_MAX

    def skipped(init_scale):
        trainer = Trainer(
            make(),
            lambda p: torch.optim.SGD(p, lr=0.0),
            nn.MSELoss(),
            loader,
            precision="fp16",
            max_steps=12,
            epochs=3,
            max_grad_norm=None,
            scaler_kwargs={"init_scale": init_scale},
        )
        return trainer.fit().skipped_steps

    assert skipped(scale) == 0 and skipped(65536.0) > 2
    said = next(line for line in result.recommendations if "start the loss scale" in line)
    assert f"the first ~{round(math.log2(65536 / scale))} steps" in said
