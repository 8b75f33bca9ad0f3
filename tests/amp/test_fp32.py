"""mixft.amp.fp32: named modules compute in float32 under autocast, and only while kept."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from mixft.amp.fp32 import keep_in_fp32, parse_module_names
from mixft.errors import UsageError


class KwargBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.dense = nn.Linear(4, 4)

    def forward(self, x, *, extra=None):
        self.seen = (x.dtype, None if extra is None else extra.dtype)
        return self.dense(x if extra is None else x + extra)


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), KwargBlock(), nn.Linear(4, 2))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_kept_module_runs_in_fp32_under_cpu_autocast_and_others_do_not(dtype):
    net = model()
    outputs = {}
    for name in ("0", "1", "2"):
        net.get_submodule(name).register_forward_hook(lambda m, a, o, name=name: outputs.__setitem__(name, o.dtype))
    handle = keep_in_fp32(net, ["1"])
    with torch.autocast("cpu", dtype=dtype):
        net(torch.randn(3, 4))
    assert outputs == {"0": dtype, "1": torch.float32, "2": dtype}
    assert net[1].seen == (torch.float32, None)  # the half input from layer 0 was widened
    handle.remove()
    with torch.autocast("cpu", dtype=dtype):
        net(torch.randn(3, 4))
    assert outputs["1"] == dtype and "forward" not in net[1].__dict__


class Stack(nn.Module):
    """A model that loops over a ModuleList, as BertEncoder does over ``layer``: the list's forward never runs."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])
        self.heads = nn.ModuleDict({"a": nn.Linear(4, 2)})
        self.empty = nn.ModuleList()

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.heads["a"](x)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_container_named_keeps_every_module_in_it(dtype):
    # Was: "--fp32-modules encoder.encoder.layer" (a ModuleList) was accepted, recorded and changed nothing.
    torch.manual_seed(0)
    net = Stack()
    outputs = {}
    for name, module in net.named_modules():
        if isinstance(module, nn.Linear):
            module.register_forward_hook(lambda m, a, o, name=name: outputs.__setitem__(name, o.dtype))
    handle = keep_in_fp32(net, "layers,heads")
    assert handle.names == ["layers.0", "layers.1", "heads.a"]
    with torch.autocast("cpu", dtype=dtype):
        net(torch.randn(3, 4))
    assert outputs == {"layers.0": torch.float32, "layers.1": torch.float32, "heads.a": torch.float32}
    handle.remove()
    with torch.autocast("cpu", dtype=dtype):
        net(torch.randn(3, 4))
    assert set(outputs.values()) == {dtype}
    with pytest.raises(UsageError, match="--fp32-modules: 'empty' holds no module that runs"):
        keep_in_fp32(net, "empty")


def test_a_bert_layer_list_named_runs_every_layer_in_fp32():
    from transformers import BertConfig, BertModel

    config = BertConfig(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32)
    bert = BertModel(config).eval()
    seen = []
    for layer in bert.encoder.layer:
        layer.output.dense.register_forward_hook(lambda m, a, o: seen.append(o.dtype))
    with keep_in_fp32(bert, "encoder.layer"), torch.autocast("cpu", dtype=torch.bfloat16):
        bert(input_ids=torch.tensor([[1, 2, 3]]))
    assert seen == [torch.float32, torch.float32]


def test_keyword_inputs_are_widened_too():
    net = model()
    with keep_in_fp32(net, "1"), torch.autocast("cpu", dtype=torch.float16):
        net[1](torch.randn(2, 4, dtype=torch.float16), extra=torch.randn(2, 4, dtype=torch.bfloat16))
    assert net[1].seen == (torch.float32, torch.float32)


def test_results_match_fp32_and_gradients_flow():
    net = model()
    x = torch.randn(3, 4)
    with keep_in_fp32(net, ["0", "1", "2"]), torch.autocast("cpu", dtype=torch.float16):
        kept = net(x)
    assert kept.dtype == torch.float32 and torch.equal(kept, net(x))
    kept.sum().backward()
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in net.parameters())


def test_an_exception_inside_leaves_autocast_as_it_was():
    net = model()
    with keep_in_fp32(net, "1"), torch.autocast("cpu", dtype=torch.float16):
        with pytest.raises(RuntimeError):
            net[1](torch.randn(3, 5))  # wrong width
        assert torch.is_autocast_enabled("cpu")


def test_an_instance_forward_is_put_back():
    net = model()
    own = net[0].forward
    net[0].forward = lambda x: own(x) * 2  # someone else's patch, e.g. a profiler's
    patched = net[0].forward
    keep_in_fp32(net, "0").remove()
    assert net[0].__dict__["forward"] is patched


def test_unknown_name_is_one_line_with_close_matches_and_changes_nothing():
    from transformers import BertConfig, BertModel

    bert = BertModel(
        BertConfig(
            vocab_size=30,
            hidden_size=8,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=8,
            max_position_embeddings=16,
        )
    )
    with pytest.raises(UsageError) as error:
        keep_in_fp32(bert, ["encoder.layer.0.output", "encoder.layer.0.outptu.dense"])
    message = str(error.value)
    assert "\n" not in message and "'encoder.layer.0.outptu.dense'" in message
    assert "encoder.layer.0.output.dense" in message
    assert "forward" not in bert.encoder.layer[0].output.__dict__  # the valid name was not patched either
    with pytest.raises(UsageError, match="top-level modules: embeddings, encoder"):
        keep_in_fp32(bert, "zzz")


@pytest.mark.parametrize("text", ["", "a,,b", " , ", []])
def test_empty_names_are_refused(text):
    with pytest.raises(UsageError, match="--fp32-modules"):
        parse_module_names(text)


def test_names_are_parsed_stripped_and_deduplicated():
    assert parse_module_names(" a.b , c,a.b") == ["a.b", "c"]
    assert parse_module_names(("x", "y")) == ["x", "y"]


def test_a_deep_copy_of_a_kept_model_computes_and_trains_its_own_weights():
    # Was: the kept forward was a closure over the original module: a copy.deepcopy of the model ran (and
    # trained) the original's layer instead of its own.
    import copy

    base = model()
    keep_in_fp32(base, ["2"])
    clone = copy.deepcopy(base)
    with torch.no_grad():
        clone[2].weight.zero_()
        clone[2].bias.fill_(7.0)
    x = torch.randn(3, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = clone(x)
    assert out.dtype == torch.float32 and torch.equal(out, torch.full((3, 2), 7.0))  # its own layer, in fp32
    out.sum().backward()
    assert clone[2].weight.grad is not None and base[2].weight.grad is None


def test_the_frozen_copy_peft_keeps_beside_a_trained_head_is_refused():
    # Was: "--fp32-modules ...classifier.original_module" (never called while the adapter is active) was accepted
    # and the head that runs stayed in fp16/bf16.
    from peft import LoraConfig, get_peft_model
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    peft_model = get_peft_model(
        BertForSequenceClassification(config), LoraConfig(task_type="SEQ_CLS", r=2, target_modules=["query"])
    )
    owner = next(n for n, m in peft_model.named_modules() if type(m).__name__ == "ModulesToSaveWrapper")
    with pytest.raises(UsageError) as info:
        keep_in_fp32(peft_model, f"{owner}.original_module")
    assert str(info.value) == (
        f"--fp32-modules: '{owner}.original_module' is the copy peft keeps of '{owner}', which does not run while "
        f"the adapter is active; name '{owner}'"
    )
    keep_in_fp32(peft_model, owner).remove()  # the head that runs is kept as asked
