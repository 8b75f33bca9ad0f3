"""Where a training step's memory goes, measured: parameters, gradients, optimizer state and
the peak bytes of tensors autograd saves for backward.

Mixed precision shrinks only what autograd saves (and adds autocast's cached low-precision
copies of the weights); parameters, gradients and optimizer state stay fp32 (pure bf16,
``mixft.train.pure_bf16``, is what halves those). So the honest
"how much lighter?" is the saved-activation peak of one step, per precision, not a process's
peak RSS. ``measure_step_memory`` runs ONE forward (inside the caller's autocast context)
and backward with ``torch.autograd.graph.saved_tensors_hooks`` counting each saved storage
once, and names the dtypes and the ops that saved them::

    step = measure_step_memory(model, loss_fn, inputs, labels, trainer.autocast, device)
    record = memory_record(step, optimizer_state_bytes([optimizer]), peak.peak_bytes, peak.kind)
    run["memory"] = record          # results.json, see MEMORY_KEYS

Counting rules (they decide the figures, so they are stated here):

- a storage is counted once however many tensors (views, repeated saves) refer to it, at
  its full ``untyped_storage().nbytes()``: the whole storage is what saving keeps alive;
- storages of the model's parameters are not counted as saved activations (they are the
  ``parameters`` figure already); autocast's cast copies of the weights are new storages and
  do count, which is part of the honest answer;
- the peak is the largest sum of live saved bytes: a saved storage stops counting when
  autograd frees it during backward;
- a sharded (FSDP) model: parameters, gradients and optimizer state are this process's
  shards (``DTensor.to_local()``), and ``whole_bytes`` gives the whole tensors (what one
  process would hold); the weights FSDP gathers for a block are parameters too, not saved
  activations, while the block runs (``SavedTensorMeter.for_model``).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from mixft.distributed import is_sharded
from mixft.rng import capture_rng_state, restore_rng_state

__all__ = [
    "MEMORY_KEYS",
    "MemoryRecord",
    "SavedTensorMeter",
    "measure_step_memory",
    "memory_record",
    "optimizer_state_bytes",
    "tensor_bytes",
]

TOP_OPS = 5

#: The keys of a results.json run's ``memory`` (bytes unless named otherwise).
MEMORY_KEYS = (
    "parameters",
    "gradients",
    "optimizer_state",
    "saved_activations_peak",
    "saved_by_dtype",
    "saved_by_op",
    "device_figure",
    "device_figure_kind",
)


@dataclass
class MemoryRecord:
    """results.json ``memory`` of one run; every figure in bytes.

    ``saved_by_dtype``: ``{"bfloat16": bytes, "float32": bytes, ...}`` of the unique saved
    storages; ``saved_by_op``: ``[[op, bytes], ...]``, the top ops (torch-level function names
    such as ``linear``, ``layer_norm``) by bytes saved, largest first. ``device_figure``: CUDA
    max allocated or CPU peak RSS of the run (``device_figure_kind`` names which, as
    ``mixft.train.measure.PeakMemory.kind``); None where the device cannot tell.
    """

    parameters: int
    gradients: int
    optimizer_state: int
    saved_activations_peak: int
    saved_by_dtype: dict[str, int] = field(default_factory=dict)
    saved_by_op: list[list] = field(default_factory=list)
    device_figure: int | None = None
    device_figure_kind: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _local(t: torch.Tensor) -> torch.Tensor:
    # A DTensor (FSDP's sharded parameters, their gradients and optimizer state): this process's shard.
    return t.to_local() if hasattr(t, "to_local") else t


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes of a tensor's elements (``numel * element_size``), not of its whole storage; a sharded
    tensor's (DTensor) local shard: what this process holds."""
    t = _local(t)
    return t.numel() * t.element_size()


def whole_bytes(t: torch.Tensor) -> int:
    """Bytes of the whole tensor, sharded or not (``numel`` of a DTensor is its global size)."""
    return t.numel() * t.element_size()


def optimizer_state_bytes(optimizers: Iterable[torch.optim.Optimizer], *, whole: bool = False) -> int:
    """Bytes of every tensor in the optimizers' ``state`` (Adam's two moments, step counters,
    torch-optimi's Kahan compensation...) and in their ``param_groups`` other than the
    parameters (torch-optimi keeps its step counter there, torchao a tensor lr): the
    optimizer's bytes as held, each storage counted once; this process's shards of a sharded
    model's (``whole``: the whole tensors).

    Usage: ``optimizer_state_bytes([optimizer])``
    """
    seen: set[tuple[str, int]] = set()
    total = 0
    for opt in optimizers:
        values = [v for state in opt.state.values() for v in state.values()]
        values += [v for group in opt.param_groups for k, v in group.items() if k != "params"]
        for value in values:
            if isinstance(value, torch.Tensor):
                key = _storage_key(value)
                if key not in seen:
                    seen.add(key)
                    total += whole_bytes(value) if whole else tensor_bytes(value)
    return total


def _storage_key(t: torch.Tensor) -> tuple[str, int]:
    t = _local(t)
    return str(t.device), t.untyped_storage().data_ptr()


def _op_name(func: Any) -> str:
    name = getattr(func, "__name__", None) or str(func)
    return name.strip("_") or name


class _OpTracker(TorchFunctionMode):
    """Knows which torch-level function is running, so a pack hook can name the op that saves.

    A pack hook fires inside autograd, below Python, where the op's name is not at hand
    (``torch._C._current_autograd_node()`` is None during forward); a function mode sits
    above autograd and sees the call. Modes are switched off inside their own handler, so
    this names the outermost torch function (``linear``, not the ``addmm`` inside it).
    """

    def __init__(self) -> None:
        super().__init__()
        self.current = "unknown"

    def __torch_function__(self, func, types, args=(), kwargs=None):
        outer, self.current = self.current, _op_name(func)
        try:
            return func(*args, **(kwargs or {}))
        finally:
            self.current = outer


class _Saved:
    """What a pack hook hands autograd: the tensor, and a release when autograd drops it."""

    __slots__ = ("tensor", "_release")

    def __init__(self, tensor: torch.Tensor, release: Callable[[], None]) -> None:
        self.tensor = tensor
        self._release = release

    def __del__(self) -> None:
        self._release()


class SavedTensorMeter:
    """Counts the bytes autograd saves for backward, each storage once, with the live peak.

    Usage::

        meter = SavedTensorMeter(exclude=model.parameters())
        with meter:
            loss = loss_fn(model(**inputs), labels)
        loss.backward()
        meter.peak_bytes, meter.by_dtype, meter.by_op
    """

    def __init__(self, exclude: Iterable[torch.Tensor] = ()) -> None:
        self._excluded = {_storage_key(t) for t in exclude}
        self._refs: Counter = Counter()
        self._sizes: dict[tuple[str, int], int] = {}
        self.live_bytes = 0
        self.peak_bytes = 0
        self.excluded_bytes = 0  # parameter storages autograd saved: counted under parameters
        self.by_dtype: Counter = Counter()
        self.by_op: Counter = Counter()
        self._ops = _OpTracker()
        self._stack = contextlib.ExitStack()
        self._now_parameters: Callable[[], set] | None = None  # under FSDP: the gathered weights (for_model)

    @classmethod
    def for_model(cls, model: torch.nn.Module) -> SavedTensorMeter:
        """A meter that counts ``model``'s parameters apart, FSDP's gathered weights included.

        Under FSDP a block's parameters are, while it runs, the whole tensors FSDP gathered, and
        the module's parameters while gathered: a saved storage that is one of ``model``'s
        parameters at the moment it is saved is a parameter. Asked at each save, not from the
        blocks' forward hooks, because FSDP also gathers around other methods it was given
        (``register_fsdp_forward_method``: bert-sst2's [CLS]-only last layer), and freed gathered
        weights leave their addresses to activations.
        Usage: ``with SavedTensorMeter.for_model(model): loss = loss_fn(model(x), y)``
        """
        meter = cls(exclude=list(model.parameters()))
        if any(is_sharded(m) for m in model.modules()):
            meter._now_parameters = lambda: {
                _storage_key(p)
                for p in model.parameters()
                if not hasattr(p, "to_local")  # a DTensor: a shard
            }
        return meter

    def __enter__(self) -> SavedTensorMeter:
        self._stack.enter_context(torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack))
        self._stack.enter_context(self._ops)
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()

    def _pack(self, t: torch.Tensor) -> Any:
        try:
            key = _storage_key(t)
            nbytes = t.untyped_storage().nbytes()
        except (RuntimeError, NotImplementedError):  # sparse, meta, tensor subclasses without storage
            return t
        if key in self._excluded or (self._now_parameters is not None and key in self._now_parameters()):
            if key not in self._sizes:
                self._sizes[key] = 0
                self.excluded_bytes += nbytes
            return t
        self._refs[key] += 1
        if self._refs[key] == 1:
            self._sizes[key] = nbytes
            self.live_bytes += nbytes
            self.peak_bytes = max(self.peak_bytes, self.live_bytes)
            self.by_dtype[str(t.dtype).removeprefix("torch.")] += nbytes
            self.by_op[self._ops.current] += nbytes
        return _Saved(t, lambda: self._release(key))

    @staticmethod
    def _unpack(packed: Any) -> torch.Tensor:
        return packed.tensor if isinstance(packed, _Saved) else packed

    def _release(self, key: tuple[str, int]) -> None:
        self._refs[key] -= 1
        if self._refs[key] == 0:
            del self._refs[key]
            self.live_bytes -= self._sizes[key]

    def top_ops(self, n: int = TOP_OPS) -> list[list]:
        """``[[op, bytes], ...]``: the ``n`` ops that saved the most bytes, largest first."""
        return [[op, int(b)] for op, b in self.by_op.most_common(n)]


def _forward(model: torch.nn.Module, inputs: Any) -> Any:
    return model(**inputs) if isinstance(inputs, Mapping) else model(inputs)


def measure_step_memory(
    model: torch.nn.Module,
    loss_fn: Callable[[Any, Any], torch.Tensor],
    batch_inputs: Any,
    labels: Any,
    autocast_ctx_factory: Callable[[], contextlib.AbstractContextManager],
    device: torch.device | str,
) -> dict[str, Any]:
    """Measure one training step's memory: ONE forward + loss inside ``autocast_ctx_factory()``,
    then backward (outside autocast, as the trainer does), on a batch already on ``device``.

    Returns ``{"parameters", "gradients", "saved_activations_peak", "saved_by_dtype",
    "saved_by_op", "saved_parameter_bytes"}`` in bytes (see the module docstring for what is
    counted). ``gradients`` is read after backward, before they are cleared. No optimizer
    step is taken; the model's gradients are left cleared (``None``) and the global RNGs
    (Python, numpy, torch CPU and CUDA) as they were, so a caller's training is unchanged by
    measuring.

    Usage: ``measure_step_memory(model, loss_fn, inputs, labels, lambda: torch.autocast("cpu", torch.bfloat16), "cpu")``
    """
    del device  # the batch is already there; the argument keeps the call site explicit
    params = [p for p in model.parameters()]
    rng = capture_rng_state()
    try:
        meter = SavedTensorMeter.for_model(model)
        with meter, autocast_ctx_factory():
            loss = loss_fn(_forward(model, batch_inputs), labels)
        loss.backward()  # outside autocast, as in training; frees what the meter counted
        del loss
        seen: set[tuple[str, int]] = set()
        parameters = gradients = whole_parameters = whole_gradients = 0
        for p in params:
            if _storage_key(p) not in seen:  # tied weights are one tensor in memory
                seen.add(_storage_key(p))
                parameters += tensor_bytes(p)
                whole_parameters += whole_bytes(p)
                if p.grad is not None:
                    gradients += tensor_bytes(p.grad)
                    whole_gradients += whole_bytes(p.grad)
    finally:
        model.zero_grad(set_to_none=True)
        restore_rng_state(rng)
    return {
        "parameters": parameters,
        "gradients": gradients,
        "saved_activations_peak": int(meter.peak_bytes),
        "saved_by_dtype": {k: int(v) for k, v in sorted(meter.by_dtype.items(), key=lambda kv: -kv[1])},
        "saved_by_op": meter.top_ops(),
        "saved_parameter_bytes": int(meter.excluded_bytes),
        # What one process would hold of the same tensors (differs only for a sharded model).
        "whole_model": {"parameters": whole_parameters, "gradients": whole_gradients},
    }


def memory_record(
    step: Mapping[str, Any], optimizer_state: int, device_figure: int | None, device_figure_kind: str | None
) -> dict[str, Any]:
    """results.json ``memory`` for a run: ``measure_step_memory``'s figures, the optimizer
    state and the device figure (``PeakMemory.peak_bytes`` / ``.kind`` of the run).

    Usage: ``run["memory"] = memory_record(step, optimizer_state_bytes([opt]), peak.peak_bytes, peak.kind)``
    """
    return MemoryRecord(
        parameters=int(step["parameters"]),
        gradients=int(step["gradients"]),
        optimizer_state=int(optimizer_state),
        saved_activations_peak=int(step["saved_activations_peak"]),
        saved_by_dtype=dict(step.get("saved_by_dtype") or {}),
        saved_by_op=[list(x) for x in step.get("saved_by_op") or []],
        device_figure=None if device_figure is None else int(device_figure),
        device_figure_kind=device_figure_kind,
    ).to_dict()
