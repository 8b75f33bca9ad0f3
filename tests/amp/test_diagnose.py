"""The diagnostic pass names the first module whose output overflows, and the right fix."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from mixft.amp.diagnose import FP16_MAX, diagnose
from mixft.callbacks.faults import CollapseDetector, is_collapse
from mixft.train.trainer import Trainer

_g = torch.Generator().manual_seed(3)
X = torch.rand(16, 8, generator=_g) + 0.5  # positive inputs: the big layer's outputs add up
Y = torch.randn(16, 1, generator=_g)


def overflowing_model(gain: float = 1e4) -> nn.Module:
    """Layer "1" multiplies activations of order 1 by ``gain``: ~1e5 > 65504 in fp16."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8), nn.Linear(8, 1))
    with torch.no_grad():
        model[0].weight.abs_()
        model[0].bias.fill_(0.5)
        model[2].weight.fill_(gain)  # module "2"
        model[3].weight.fill_(gain)  # module "3" would overflow too, later
    return model


def make_trainer(model, precision, callbacks=()):
    return Trainer(
        model,
        lambda p: torch.optim.SGD(p, lr=1e-6),
        nn.MSELoss(),
        DataLoader(TensorDataset(X, Y), batch_size=4),
        precision=precision,
        max_grad_norm=None,
        callbacks=list(callbacks),
    )


def test_fp16_overflow_names_the_first_module_in_execution_order():
    d = diagnose(make_trainer(overflowing_model(), "fp16"))
    assert d.first_nonfinite is not None and d.first_nonfinite.name == "2"  # not "3", not "(model)"
    assert d.first_nonfinite.kind == "Linear" and d.first_nonfinite.nonfinite > 0
    assert d.batches == 1  # stopped at the first batch that overflowed
    # Module "3" overflows too (measured in fp32): no block short of the whole model holds the values (was:
    # `--fp32-modules 2`, which would have overflowed one module later).
    assert "bf16" in d.suggestion and "no --fp32-modules block holds them" in d.suggestion
    summary = d.summary()
    assert "\n" not in summary and "first non-finite output: 2 (Linear) under fp16" in summary
    assert f"fp16 limit {FP16_MAX:.0f}" in summary
    assert len(d.report().splitlines()) > 1


def test_same_model_in_bf16_is_finite_and_reports_how_far_over_fp16_it_is():
    d = diagnose(make_trainer(overflowing_model(), "bf16"), max_batches=2)
    assert d.first_nonfinite is None and d.batches == 2
    assert d.largest.output_max_abs > FP16_MAX  # would not fit fp16: bf16 has fp32's range
    assert "forward pass finite over 2 batch(es) under bf16" in d.summary()


def test_nonfinite_weights_are_reported_with_a_learning_rate_fix():
    model = overflowing_model(gain=1.0)
    with torch.no_grad():
        model[3].weight[0, 0] = float("nan")
    d = diagnose(make_trainer(model, "fp32"))
    assert d.nonfinite_params == ["3.weight"]
    assert d.first_nonfinite.name == "3"
    assert "lower the learning rate" in d.suggestion
    assert "parameter 3.weight is already inf/NaN" in d.summary()


def test_diagnosis_restores_training_mode_and_leaves_no_hooks():
    trainer = make_trainer(overflowing_model(gain=1.0), "fp32")
    trainer.model.train()
    diagnose(trainer)
    assert trainer.model.training
    assert all(not m._forward_hooks for m in trainer.model.modules())


def test_fp16_collapse_from_an_overflowing_layer_is_stopped_and_diagnosed():
    detector = CollapseDetector(max_consecutive_skips=3)
    result = make_trainer(overflowing_model(), "fp16", [detector]).fit()
    assert is_collapse(result)
    assert "first non-finite output: 2 (Linear)" in result.stopped_early
    assert detector.diagnosis.first_nonfinite.name == "2"


def test_a_collapse_from_a_loss_scale_started_too_high_says_to_start_it_lower():
    # Was: "the gradients overflow float16: switch to bf16 or lower the learning rate" after --init-loss-scale 1e38,
    # the scale still ~1e37 when the run stopped; a lower learning rate cannot help.
    detector = CollapseDetector(max_consecutive_skips=3)
    trainer = Trainer(
        overflowing_model(gain=1.0),  # a forward of order 1: finite in fp16
        lambda p: torch.optim.SGD(p, lr=1e-6),
        nn.MSELoss(),
        DataLoader(TensorDataset(X, Y), batch_size=4),
        precision="fp16",
        max_grad_norm=None,
        callbacks=[detector],
        scaler_kwargs={"init_scale": 1e38},
    )
    result = trainer.fit()
    assert is_collapse(result) and result.steps == 3
    assert "forward pass finite" in result.stopped_early
    assert "the gradients overflow float16 at the loss scale, still 1.25e+37" in result.stopped_early
    assert "start it lower (--init-loss-scale 65536, GradScaler's default" in result.stopped_early


@pytest.fixture(scope="module")
def tiny_bert_classifier(tiny_bert_dir):
    from recipes.bert_sst2 import build_model

    return build_model(str(tiny_bert_dir), seed=0)


def test_bert_overflow_in_a_feed_forward_layer_is_found(tiny_bert_classifier, tiny_bert_dir):
    from transformers import AutoTokenizer

    model = tiny_bert_classifier
    dense = model.encoder.encoder.layer[0].intermediate.dense
    with torch.no_grad():
        dense.weight.mul_(1e7)  # the feed-forward up-projection now overflows fp16
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    batch = dict(tok(["a fine film", "dull and flat"], padding=True, return_tensors="pt"))
    batch["labels"] = torch.tensor([1.0, 0.0])
    trainer = Trainer(model, lambda p: torch.optim.SGD(p, lr=1e-3), nn.BCEWithLogitsLoss(), [batch], precision="fp16")
    d = diagnose(trainer)
    assert d.first_nonfinite.name == "encoder.encoder.layer.0.intermediate.dense"
    assert "bf16" in d.suggestion
    # Was: the leaf's parent (`...layer.0.intermediate`), which collapsed again one module later; the block is
    # the preflight's, measured in fp32 on the batch that overflowed, and it trains.
    from mixft.amp.fp32 import keep_in_fp32
    from mixft.amp.preflight import preflight

    expected = preflight(model, trainer.loss_fn, [batch], device="cpu").fp32_modules
    assert expected and d.fp32_modules == expected and f"--fp32-modules {','.join(expected)} " in d.suggestion
    with keep_in_fp32(model, *expected):
        assert diagnose(trainer).first_nonfinite is None
    with keep_in_fp32(model, "encoder.encoder.layer.0.intermediate"):
        assert diagnose(trainer).first_nonfinite is not None


def test_bert_overflow_in_the_last_layers_attention_scores_is_found_there(tiny_bert_dir):
    # The [CLS]-only last layer computes its attention outside the self-attention module's forward; the
    # diagnosis' hooks make the model run the whole layer, so the module that overflowed is the one named,
    # not the Linear after it with an input already inf/NaN.
    from transformers import AutoTokenizer, BertModel

    from mixft.models.classifiers import BertClassifier

    # Eager attention multiplies q by k in fp16 (torch's sdpa on CPU accumulates in fp32 and would not overflow).
    torch.manual_seed(0)
    model = BertClassifier(BertModel.from_pretrained(tiny_bert_dir, attn_implementation="eager"))
    attention = model.encoder.encoder.layer[-1].attention.self
    with torch.no_grad():
        attention.query.weight.mul_(3000.0)
        attention.key.weight.mul_(3000.0)  # the scores q.k overflow fp16; q, k and v stay finite
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    batch = dict(tok(["a fine film", "dull and flat"], padding=True, return_tensors="pt"))
    batch["labels"] = torch.tensor([1.0, 0.0])
    trainer = Trainer(model, lambda p: torch.optim.SGD(p, lr=1e-3), nn.BCEWithLogitsLoss(), [batch], precision="fp16")
    d = diagnose(trainer)
    last = f"encoder.encoder.layer.{len(model.encoder.encoder.layer) - 1}"
    assert d.first_nonfinite.name == f"{last}.attention.self", d.summary()
    # The fix it suggests works on that layer: the self-attention (in fp32 every module's output is in range: the
    # overflow is inside it) kept in fp32, the forward is finite.
    assert f"--fp32-modules {last}.attention.self " in d.suggestion
    from mixft.amp.fp32 import keep_in_fp32

    with keep_in_fp32(model, f"{last}.attention.self"):
        assert diagnose(trainer).first_nonfinite is None


class ScaledBetween(nn.Module):
    """Two Linears with an overflowing multiply between them in plain code, which no module hook sees."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.first, self.second = nn.Linear(8, 8), nn.Linear(8, 1)

    def forward(self, x):
        return self.second(self.first(x) * 1e6)  # ~1e6 > 65504: inf in fp16, between the two modules


def test_an_input_made_inf_between_modules_is_said_so_not_given_as_max_zero():
    d = diagnose(make_trainer(ScaledBetween(), "fp16"))
    assert d.first_nonfinite.name == "second" and d.first_nonfinite.input_nonfinite > 0
    summary = d.summary()
    assert "second (Linear) under fp16, whose input was already inf/NaN" in summary, summary
    assert "input max |x| 0" not in summary


class SharedActivation(nn.Module):
    """One ReLU used after two Linears: the second Linear overflows."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc1, self.fc2, self.act, self.out = nn.Linear(8, 8), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1)
        with torch.no_grad():
            self.fc2.weight.mul_(1e6)

    def forward(self, x):
        return self.out(self.act(self.fc2(self.act(self.fc1(x)))))


def test_a_module_called_twice_is_blamed_only_for_its_own_call():
    # Was: the shared ReLU (first called after fc1) named first, as if code outside any module made the inf.
    d = diagnose(make_trainer(SharedActivation(), "fp16"))
    assert d.first_nonfinite.name == "fc2" and not d.first_nonfinite.input_nonfinite, d.summary()


def test_an_overflow_only_dropout_makes_is_found_in_training_mode():
    # Was: eval() mode, dropout's 1/(1-p) scaling off: "forward pass finite", the gradients blamed.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 64), nn.Dropout(0.5), nn.Linear(64, 1))
    with torch.no_grad():
        model[0].weight.fill_(0.0)
        model[0].bias.fill_(40000.0)  # in range; x2 by dropout's scaling is beyond 65504
    trainer = make_trainer(model, "fp16")
    before = torch.get_rng_state()
    d = diagnose(trainer)
    assert d.first_nonfinite is not None and d.first_nonfinite.name == "1", d.summary()
    assert torch.equal(torch.get_rng_state(), before)  # the run draws the masks it would have drawn
