"""Run named modules outside autocast, in float32: ``--fp32-modules NAME,...``.

The fix for an fp16 overflow that starts in one module (what ``mixft.amp.preflight`` or
``mixft.amp.diagnose`` points at) without giving up fp16 everywhere else: the same idea as
transformers' ``_keep_in_fp32_modules`` (T5 keeps its feed-forward ``wo`` in fp32), but
for the computation rather than the stored weights. Inside a kept module autocast is
off and half-precision floating inputs are cast to float32, so the module computes with
its fp32 master weights; its float32 outputs flow on, and the next autocast op casts
them as it always does. Name the smallest module that contains the overflow, so that the
large values never leave fp32 (the preflight's ``fp32_modules`` does).

Usage::

    handle = keep_in_fp32(model, ["encoder.layer.3.output"])
    ...                     # train under torch.autocast as usual
    handle.remove()         # the model as it was

Also here: fp32 islands for custom autograd functions (``stable_softplus``), see the last section.
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Iterable, Mapping

import torch
from torch import nn

from mixft.errors import UsageError
from mixft.options import NAMES

FLAG = "--fp32-modules"
# Inputs in these dtypes are widened; float64 is left alone (it already has more range).
_NARROW = (torch.float16, torch.bfloat16)


def parse_module_names(text: str | Iterable[str]) -> list[str]:
    """``"a,b"`` or ``["a", "b"]`` -> ``["a", "b"]`` (stripped, duplicates dropped, order kept).

    Usage: ``parse_module_names("encoder.layer.0.output, classifier")``
    """
    parts = [text] if isinstance(text, str) else list(text)
    if not parts or not all(isinstance(p, str) for p in parts):
        raise UsageError(f"{FLAG} takes module names, got {text!r}")
    try:  # the same comma-list rule as the flag's (mixft.options.NAMES)
        return list(dict.fromkeys(n for p in parts for n in NAMES.convert(p)))
    except ValueError:
        raise UsageError(f"{FLAG} needs comma-separated module names without empty entries, got {text!r}") from None


class Fp32Modules:
    """What :func:`keep_in_fp32` changed; ``remove()`` undoes it (also as a context manager)."""

    def __init__(self, patched: list[tuple[nn.Module, str]]):
        self._patched = patched

    @property
    def names(self) -> list[str]:
        return [name for _, name in self._patched]

    def remove(self) -> None:
        """Give every kept module its own forward back. Calling it twice is harmless."""
        for module, _ in self._patched:
            if _is_kept(module):
                original = module.__dict__.pop(_ORIGINAL, None)
                if original is None:
                    del module.forward  # the class's forward shows through again
                else:
                    module.forward = original
        self._patched = []

    def __enter__(self) -> Fp32Modules:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


def keep_in_fp32(model: nn.Module, names: str | Iterable[str]) -> Fp32Modules:
    """Make each named module of ``model`` run with autocast disabled on float32 inputs.

    Names are qualified module names (``model.named_modules()``); an unknown one raises a
    one-line UsageError with the closest names, before anything is changed. A container whose
    forward is never called (``nn.ModuleList``, ``nn.ModuleDict``: ``encoder.layer``, the model
    loops over it) stands for the modules in it: each of them is kept.

    Usage: ``with keep_in_fp32(model, "encoder.layer.0.output"): train()``
    """
    wanted = parse_module_names(names)
    modules = dict(model.named_modules())
    for name in wanted:
        if name not in modules:
            raise UsageError(_unknown(name, [n for n in modules if n]))
    for name in wanted:
        _refuse_a_copy_that_never_runs(name, modules)
    runs = [(run_name, module) for name in wanted for run_name, module in _called(name, modules[name])]
    patched = []
    for name, module in runs:
        if _is_kept(module):
            continue  # already kept (named twice through a shared module)
        module.__dict__[_ORIGINAL] = module.__dict__.get("forward")  # someone else's instance forward, or None
        # Bound to the module, not closed over it: a deepcopy of the model rebinds it to the copy (a closure
        # would keep running, and training, the original's weights).
        module.forward = types.MethodType(_fp32_call, module)
        patched.append((module, name))
    return Fp32Modules(patched)


def _refuse_a_copy_that_never_runs(name: str, modules: dict[str, nn.Module]) -> None:
    """peft keeps a frozen ``original_module`` beside a trained head (``modules_to_save``) and never calls it
    while the adapter is active: keeping it in fp32 would change nothing (was: accepted in silence)."""
    parts = name.split(".")
    for i, part in enumerate(parts[1:], start=1):
        owner = ".".join(parts[:i])
        if part == "original_module" and type(modules.get(owner)).__name__ == "ModulesToSaveWrapper":
            raise UsageError(
                f"{FLAG}: {name!r} is the copy peft keeps of {owner!r}, which does not run while the adapter is "
                f"active; name {owner!r}"
            )


def _called(name: str, module: nn.Module) -> list[tuple[str, nn.Module]]:
    """``[(name, module)]``; for a container without a forward of its own, what it holds, recursively.

    Was: replacing a ``ModuleList``'s forward kept nothing in fp32, since nothing ever calls it.
    """
    if type(module).forward is not nn.Module.forward:
        return [(name, module)]
    held = [found for child, sub in module.named_children() for found in _called(f"{name}.{child}", sub)]
    if not held:
        raise UsageError(f"{FLAG}: {name!r} holds no module that runs (an empty container); name another")
    return held


# Where a kept module keeps the instance forward it had before (usually none: None).
_ORIGINAL = "_mixft_forward_before_fp32"


def _fp32_call(self: nn.Module, *args, **kwargs):
    # The kept module's forward, bound as an instance attribute that shadows the class's;
    # nn.Module.__call__ still runs the module's hooks around it. Wrapping forward (not pre/post
    # hooks entering and leaving a context) means an exception inside cannot leave autocast off.
    before = self.__dict__.get(_ORIGINAL)
    with torch.autocast(_device_type(self, args, kwargs), enabled=False):
        if before is None:
            return type(self).forward(self, *_widen(args), **_widen(kwargs))
        return before(*_widen(args), **_widen(kwargs))


def _is_kept(module: nn.Module) -> bool:
    return getattr(module.__dict__.get("forward"), "__func__", None) is _fp32_call


def _device_type(module: nn.Module, args, kwargs) -> str:
    """The device whose autocast must be switched off: where the inputs (else weights) live."""
    for t in _floating(args, kwargs):
        return t.device.type
    for t in module.parameters():
        return t.device.type
    return "cpu"


def _floating(*objs):
    for obj in objs:
        if isinstance(obj, torch.Tensor):
            if obj.is_floating_point():
                yield obj
        elif isinstance(obj, Mapping):
            yield from _floating(*obj.values())
        elif isinstance(obj, (list, tuple)):
            yield from _floating(*obj)


def _widen(obj):
    if isinstance(obj, torch.Tensor):
        return obj.float() if obj.dtype in _NARROW else obj
    if isinstance(obj, Mapping):
        return {k: _widen(v) for k, v in obj.items()}
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # namedtuple
        return type(obj)(*(_widen(v) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(_widen(v) for v in obj)
    return obj


def _unknown(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    if close:
        hint = f"closest: {', '.join(close)}"
    else:
        top = sorted({n.split(".")[0] for n in known})[:6]
        hint = f"top-level modules: {', '.join(top)}" if top else "the model has no submodules"
    return f"{FLAG}: the model has no module named {name!r}; {hint}"


# ------------------------------------------------------------------------------------------
# fp32 islands for custom ops: custom_fwd/custom_bwd (was mixft/ops.py)
#
# Custom autograd functions under autocast: an fp32 island with ``custom_fwd``/``custom_bwd``.
#
# ``torch.amp.custom_fwd(cast_inputs=torch.float32)`` runs the forward with autocast off
# and fp32 inputs, and ``custom_bwd`` runs the backward in the same autocast state as the
# forward. Use this pattern for ops whose maths breaks in half precision (large exponents,
# small differences). ``device_type`` is fixed when the function is defined, hence one
# class per device type.
#
# Usage: ``y = stable_softplus(x)`` inside ``with trainer.autocast():``
# ------------------------------------------------------------------------------------------


def _make_softplus(device_type: str):
    class StableSoftplus(torch.autograd.Function):
        """softplus(x) = log(1 + exp(x)), computed in fp32 (exp overflows fp16 above ~11)."""

        @staticmethod
        @torch.amp.custom_fwd(device_type=device_type, cast_inputs=torch.float32)
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return torch.nn.functional.softplus(x)

        @staticmethod
        @torch.amp.custom_bwd(device_type=device_type)
        def backward(ctx, grad_out):
            (x,) = ctx.saved_tensors
            return grad_out * torch.sigmoid(x)

    StableSoftplus.__name__ = f"StableSoftplus_{device_type}"
    return StableSoftplus


_FUNCTIONS = {"cpu": _make_softplus("cpu"), "cuda": _make_softplus("cuda")}


def stable_softplus(x: torch.Tensor) -> torch.Tensor:
    """Softplus in fp32 whatever the surrounding autocast dtype; gradients flow as usual."""
    return _FUNCTIONS[x.device.type].apply(x)
