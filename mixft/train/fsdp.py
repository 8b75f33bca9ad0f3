"""Fully sharded data parallelism (FSDP2) for mixft's loop: torch's engine, mixft's policy around it.

``--fsdp`` under ``torchrun --nproc-per-node N`` shards every transformer block and then the
root with ``torch.distributed.fsdp.fully_shard``: each process keeps 1/N of the fp32 weights,
their gradients and the optimizer state, all-gathers one block's weights for its forward and
backward, and frees them after. Precision comes from ``mixft.precision.fsdp_policies``: for
bf16/fp16 the gathered weights are in that dtype (``param_dtype``) and gradients are reduced
in fp32, while the loop's autocast stays on (losses; layer norms and softmax on CUDA). The
norms and the input embeddings are their own fp32 units (``fp32_units``). Autocast alone
over fp32 shards would save a half-precision copy of every weight for backward on every
rank: the memory sharding is there to save (measured: docs/fsdp.md).

What mixft does not do: write its own sharding, or shard a model without repeated blocks
(a ModuleList of ``num_hidden_layers`` blocks of one class): refused in one line.

The sharding names no model. A model (or any module in it) that calls a method of a sharded unit
instead of its ``forward`` says so by defining ``fsdp_forward_methods(self) -> [(unit, name), ...]``
(``mixft.models.classifiers.BertClassifier``: its [CLS]-only last layer); ``shard_model`` asks it
once the blocks are sharded and registers each method with FSDP2, which gathers the unit's shards
around it as around ``forward``. A model without the method has none.

Usage::

    world = check_launch()                                 # UsageError without torchrun / N < 2
    model = shard_model(model, precision, device)          # before building the optimizer
    norm = whole(grad_norm)                                # a DTensor's value, the same on every rank
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import nn

from ..amp.precision import Precision, fsdp_policies
from ..errors import UsageError
from ..models.classifiers import transformers_model

__all__ = [
    "check_launch",
    "forward_methods",
    "fp32_units",
    "full_state_dict",
    "local",
    "lockstep_batches",
    "shard_model",
    "transformer_blocks",
    "whole",
]

NO_LAUNCHER = (
    "--fsdp shards the model across processes: launch it with torchrun --nproc-per-node N (N >= 2) "
    "scripts/finetune.py ... --fsdp"
)


def check_launch() -> int:
    """The launcher's world size, or UsageError: ``--fsdp`` needs torchrun with 2 processes or more.

    Read from the environment torchrun sets, so the error comes before any work.
    Usage: ``world = check_launch()``
    """
    world = os.environ.get("WORLD_SIZE")
    if world is None:
        raise UsageError(NO_LAUNCHER)
    if int(world) < 2:
        raise UsageError(
            f"--fsdp with {world} process shards nothing: use torchrun --nproc-per-node N with N >= 2, "
            "or run without --fsdp"
        )
    return int(world)


def transformer_blocks(model: nn.Module) -> list[nn.Module]:
    """The model's repeated blocks: the members of each ``nn.ModuleList`` of one class whose length
    is the config's ``num_hidden_layers`` (any length when the model has no config).

    Finds the encoders' and decoders' blocks transformers ships (BERT-likes ``encoder.layer``,
    DistilBERT ``transformer.layer``, GPT-2 ``transformer.h``, Llama/Qwen2/Mistral ``model.layers``),
    under a LoRA model too; transformers' own ``_no_split_modules`` is empty for some of them.
    Usage: ``blocks = transformer_blocks(model)``
    """
    config = getattr(transformers_model(model), "config", None)
    count = getattr(config, "num_hidden_layers", None)
    blocks: list[nn.Module] = []
    for module in model.modules():
        if isinstance(module, nn.ModuleList) and len(module) and len({type(m) for m in module}) == 1:
            if count is None or len(module) == count:
                blocks.extend(module)
    return blocks


def _is_norm(module: nn.Module) -> bool:
    return isinstance(module, (nn.LayerNorm, nn.RMSNorm)) or type(module).__name__.endswith("Norm")


def fp32_units(model: nn.Module) -> list[nn.Module]:
    """The modules a half-precision FSDP run keeps in fp32 as their own units: the norms inside each
    block, and the embeddings and norms beside the input embeddings.

    Their weight gradients are sums over every token: computed in bf16 they lose an order of
    magnitude on BERT-likes (docs/fsdp.md). Only modules the model *calls* are chosen: a unit
    whose weight is read without calling it (DeBERTa-v2's ``rel_embeddings``) would still be a
    shard when read, so such modules stay in the root's unit.
    Usage: ``units = fp32_units(model)``
    """
    units: list[nn.Module] = []
    hf = transformers_model(model)
    embeddings = hf.get_input_embeddings() if hasattr(hf, "get_input_embeddings") else None
    if embeddings is not None:
        parent = next((m for m in model.modules() if any(c is embeddings for c in m.children())), None)
        if parent is not None:
            units += [c for c in parent.children() if isinstance(c, nn.Embedding) or _is_norm(c)]
    for block in transformer_blocks(model):
        units += [m for m in block.modules() if _is_norm(m)]
    return units


def check_shardable(model: nn.Module) -> None:
    """UsageError when ``model`` has no transformer blocks to shard (checked before any work).

    Usage: ``check_shardable(recipe.build(cfg, prepared, precision, device, seed).model)``
    """
    if not transformer_blocks(model):
        raise UsageError(
            f"--fsdp found no transformer blocks to shard in {type(model).__name__} (a ModuleList of "
            "num_hidden_layers blocks of one class); run it without --fsdp"
        )


def shard_model(model: nn.Module, precision: Precision, device: torch.device) -> nn.Module:
    """Shard the fp32 units, each transformer block, then the root over every process of the group (FSDP2).

    Call on the CPU model, before it is moved to a GPU and before the optimizer is built:
    ``fully_shard`` moves only this process's shards to ``device``. Returns the same module
    (its class is now an FSDP subclass; parameters are DTensors of dim-0 shards).
    Usage: ``model = shard_model(model, precision, torch.device("cpu"))``
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard, register_fsdp_forward_method

    check_shardable(model)
    mesh = init_device_mesh(device.type, (torch.distributed.get_world_size(),))
    policy, fp32_policy = fsdp_policies(precision)
    if fp32_policy is not None:  # innermost first: a unit is sharded before the block that holds it
        for unit in fp32_units(model):
            fully_shard(unit, mesh=mesh, mp_policy=fp32_policy)
    for block in transformer_blocks(model):
        fully_shard(block, mesh=mesh, mp_policy=policy)
    for unit, name in forward_methods(model):  # e.g. BertClassifier's [CLS]-only last layer
        register_fsdp_forward_method(unit, name)
    # Registered before the root's fully_shard, so it runs before FSDP2's own post-forward hook.
    model.register_forward_hook(_output_not_a_view)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return model


def forward_methods(model: nn.Module) -> list[tuple[nn.Module, str]]:
    """The ``(unit, method name)`` pairs the modules of ``model`` call instead of a sharded unit's ``forward``:
    what their ``fsdp_forward_methods()`` return (looked up on each module's class, so a wrapper that
    forwards attributes to the module it wraps, as peft's do, is not asked twice).

    Usage: ``for unit, name in forward_methods(model): register_fsdp_forward_method(unit, name)``
    """
    pairs: list[tuple[nn.Module, str]] = []
    for module in model.modules():
        ask = getattr(type(module), "fsdp_forward_methods", None)
        if callable(ask):
            pairs += ask(module)
    return pairs


def _output_not_a_view(module: nn.Module, args, output):
    # A classifier's logits are often a view (``logits.squeeze(-1)``), and FSDP2 warns on every
    # such forward that an in-place op on the view would skip its pre-backward hook ("can cause
    # backward to fail or produce wrong gradients"). mixft never changes the logits in place; a
    # copy of them (batch-sized, same values and gradients) is an output of its own, and the
    # alarm is not raised for nothing.
    if isinstance(output, torch.Tensor) and output._base is not None:
        return output.clone()
    return None


def whole(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's full value (a collective unless it is replicated); any other tensor as it is."""
    from torch.distributed.tensor import DTensor

    return t.full_tensor() if isinstance(t, DTensor) else t


def local(t: torch.Tensor) -> torch.Tensor:
    """This process's shard of a DTensor (what it holds in memory); any other tensor as it is."""
    from torch.distributed.tensor import DTensor

    return t.to_local() if isinstance(t, DTensor) else t


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The whole model's state dict on the CPU, in process 0 (empty elsewhere); a collective: call it on every process.

    Usage: ``weights = full_state_dict(trainer.module)  # then load into a one-process model``
    """
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def lockstep_batches(loader: Iterable[Any]) -> Iterator[tuple[Any, bool]]:
    """``(batch, real)`` pairs: this process's batches, then copies marked ``real=False`` until every process
    has run as many forwards as the one with the most.

    A sharded forward all-gathers each block's weights from every process, so every process
    must run the same number of forwards; evaluation shards may differ by one batch. A
    process with no batch at all borrows process 0's first (its outputs are dropped too).
    Usage: ``for batch, real in lockstep_batches(eval_loader): out = model(batch); if real: keep(out)``
    """
    from .. import distributed

    batches = list(loader)
    counts = distributed.all_gather_objects(len(batches))
    most = max(counts)
    filler = batches[0] if batches else None
    if most and min(counts) == 0:
        filler = next(b for b in distributed.all_gather_objects(filler) if b is not None)
    for batch in batches:
        yield batch, True
    for _ in range(most - len(batches)):
        yield filler, False
