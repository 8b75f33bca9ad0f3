"""Will this model fit in float16? A few fp32 batches with hooks, before an fp16 run starts.

fp16 holds magnitudes up to 65504 and, below 2**-24, nothing at all. ``preflight`` runs a
few training batches forward and backward in fp32 (autocast off) and records, per module
(every named module, leaves and containers), the largest |output| and the largest
|gradient| of that output and of the module's own weights (a weight gradient sums over the
batch: it can be far larger), then compares them with what fp16 would hold:

* **activation overflow**: largest |output| above 65504 becomes inf under fp16 autocast
  (the loss goes NaN and the scaler skips every step). ``close`` when within a factor
  ``OVERFLOW_MARGIN`` (8) of the limit: activations were measured at initialisation on a
  few batches and grow during training, and the fp16 computation of a value can pass
  through larger intermediates than the value itself (a tiny BERT's FFN output projection
  peaking at 0.4x the limit in fp32 gave inf in that very projection under CPU fp16
  autocast here), so 8x (three binary orders) is the
  headroom we ask for before calling a module safe.
* **gradient overflow**: fp16 backward carries gradients times the loss scale; largest
  |gradient| x ``init_scale`` above 65504 means the first steps are skipped while the
  GradScaler halves its scale. Only *above* the limit counts: GradScaler deliberately
  grows the scale until it overflows, so headroom there is not a risk.
* **gradient underflow**: the share of a module's non-zero output-gradient elements whose
  magnitude x ``init_scale`` is below fp16's smallest subnormal (2**-24), i.e. that would
  flush to zero even after scaling. At risk above ``UNDERFLOW_SHARE`` (10%) of the
  elements: one in ten is signal that loss scaling was meant to save.

Modules are ranked (overflowing activations first, the module where the overflow starts
ahead of those that only pass it on) and the result recommends what to do: bf16 where the
device has it, a lower initial loss scale, or ``--fp32-modules NAME,...`` (see
``mixft.amp.fp32``) for the smallest module that contains the overflow.

The model's ``.grad`` fields, training flags and every RNG are left as they were.

Usage::

    # the loader itself, not an islice of it: its iterator (and shuffle draw) is then
    # created after the RNG is saved, so training's first epoch is unchanged
    result = preflight(model, loss_fn, train_loader, device=device, bf16_supported=False)
    for line in result.render():
        logger.info(line)
    doc["preflight"] = result.to_dict()
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from mixft.amp.precision_names import GRADSCALER_INIT_SCALE
from mixft.batch import floating_tensors
from mixft.errors import UsageError
from mixft.rng import capture_rng_state, restore_rng_state

FP16_MAX = float(torch.finfo(torch.float16).max)  # 65504
FP16_SMALLEST_SUBNORMAL = 2.0**-24  # below this a float16 is zero
OVERFLOW_MARGIN = 8.0  # "close": within this factor of FP16_MAX (see the module docstring)
UNDERFLOW_SHARE = 0.1  # at risk when more than this share of non-zero gradient elements flush
LARGE_SHARE = 0.5  # --fp32-modules covering this share of the parameters is nearly an fp32 run
ROOT = "(model)"  # how the model itself is named in the results
FP32_MODULES_FLAG = "--fp32-modules"
INIT_SCALE_FLAG = "--init-loss-scale"

# Ranking tiers, most severe first: an overflowing activation makes every fp16 step NaN;
# an overflowing gradient costs a few skipped steps; underflow loses signal silently;
# a "close" activation is a warning.
_TIERS = {
    ("overflow", "activation", "exceeds"): 0,
    ("overflow", "gradient", "exceeds"): 1,
    ("underflow", "gradient", "exceeds"): 2,
    ("overflow", "activation", "close"): 3,
}


@dataclass
class ModuleRisk:
    """One module's reason to worry under fp16."""

    name: str  # qualified module name, ROOT for the model itself
    module_type: str  # class name
    kind: str  # "overflow" or "underflow"
    tensor: str  # "activation" (module output) or "gradient" (gradient of the output)
    level: str  # "exceeds" (past the limit) or "close" (within OVERFLOW_MARGIN of it)
    value: float  # overflow: max |activation|, or max |gradient| x init_scale; underflow: share flushed
    limit: float  # FP16_MAX for overflow, UNDERFLOW_SHARE for underflow
    ratio: float  # value / limit (>= 1: past the limit)
    origin: bool = False  # activation overflow that starts here (the inputs were within range)
    contained_by: str | None = None  # smallest module around an origin whose output is back in range

    def describe(self) -> str:
        if self.kind == "underflow":
            what = f"{self.value:.1%} of gradient elements flush to zero after scaling (limit {self.limit:.0%})"
        elif self.tensor == "activation":
            what = f"max |activation| {self.value:.4g} = {self.ratio:.3g}x fp16's max {self.limit:.0f}"
        else:
            what = f"max |gradient| x loss scale {self.value:.4g} = {self.ratio:.3g}x fp16's max {self.limit:.0f}"
        starts = " (starts here)" if self.origin else ""
        label = "near overflow" if self.level == "close" else self.kind
        return f"{self.name} ({self.module_type}): {label}: {what}{starts}"


@dataclass
class PreflightResult:
    """What :func:`preflight` measured and recommends."""

    batches: int
    init_scale: float
    seconds: float
    modules_checked: int
    modules_at_risk: list[ModuleRisk] = field(default_factory=list)  # ranked, most severe first
    largest_activation: tuple[str, float] | None = None  # (module, max |output|)
    largest_gradient: tuple[str, float] | None = None  # (module, max |output or weight gradient|, unscaled)
    largest_underflow: tuple[str, float] | None = None  # (module, share of its gradient elements flushed)
    bf16_supported: bool = False
    fp32_modules: list[str] = field(default_factory=list)  # what --fp32-modules should name
    suggested_init_scale: float | None = None  # a power of two that keeps every gradient in range
    recommendations: list[str] = field(default_factory=list)

    @property
    def at_risk(self) -> bool:
        return bool(self.modules_at_risk)

    @property
    def flag_line(self) -> str | None:
        """``--fp32-modules a,b`` ready to paste, or None when no module needs it."""
        return f"{FP32_MODULES_FLAG} {','.join(self.fp32_modules)}" if self.fp32_modules else None

    def summary(self) -> str:
        """One line for a run header."""
        if not self.modules_at_risk:
            big = (
                f", largest |activation| {self.largest_activation[1]:.3g} in {self.largest_activation[0]}"
                if self.largest_activation
                else ""
            )
            if self.largest_underflow and self.largest_underflow[1] > 0:
                big += f", at most {self.largest_underflow[1]:.2%} of gradients flushed ({self.largest_underflow[0]})"
            return f"preflight: no module at fp16 risk ({self.modules_checked} modules, {self.batches} batches{big})"
        top = self.modules_at_risk[0]
        more = len(self.modules_at_risk) - 1
        return f"preflight: {len(self.modules_at_risk)} module(s) at fp16 risk; first: {top.describe()}" + (
            f" (+{more} more)" if more else ""
        )

    def render(self, top: int = 5) -> list[str]:
        """Lines for the terminal and report.md: the summary, the top modules, the advice."""
        lines = [self.summary()]
        lines += [f"  {r.describe()}" for r in self.modules_at_risk[:top]]
        if len(self.modules_at_risk) > top:
            lines.append(f"  ... {len(self.modules_at_risk) - top} more in results.json")
        lines += [f"  recommendation: {text}" for text in self.recommendations]
        return lines

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON (no inf/NaN: those become null) for results.json's ``preflight`` key."""
        return {
            "batches": self.batches,
            "init_scale": self.init_scale,
            "seconds": round(self.seconds, 3),
            "modules_checked": self.modules_checked,
            "limits": {
                "fp16_max": FP16_MAX,
                "fp16_smallest_subnormal": FP16_SMALLEST_SUBNORMAL,
                "overflow_margin": OVERFLOW_MARGIN,
                "underflow_share": UNDERFLOW_SHARE,
            },
            "at_risk": self.at_risk,
            "modules_at_risk": [
                {
                    "name": r.name,
                    "module_type": r.module_type,
                    "kind": r.kind,
                    "tensor": r.tensor,
                    "level": r.level,
                    "value": _json_number(r.value),
                    "limit": r.limit,
                    "ratio": _json_number(r.ratio),
                    "origin": r.origin,
                    "contained_by": r.contained_by,
                }
                for r in self.modules_at_risk
            ],
            "largest_activation": _named_number(self.largest_activation),
            "largest_gradient": _named_number(self.largest_gradient),
            "largest_underflow": _named_number(self.largest_underflow),
            "bf16_supported": self.bf16_supported,
            "fp32_modules": list(self.fp32_modules),
            "suggested_init_scale": self.suggested_init_scale,
            "recommendations": list(self.recommendations),
        }


class _Stats:
    """Running maxima of one module, kept on the device (one host sync at the end, not per hook)."""

    __slots__ = ("order", "module_type", "out_max", "in_max", "grad_max", "flushed", "nonzero")

    def __init__(self, order: int, module_type: str):
        self.order, self.module_type = order, module_type
        self.out_max = self.in_max = self.grad_max = self.flushed = self.nonzero = None


def preflight(
    model: nn.Module,
    loss_fn: Callable[[Any, torch.Tensor], torch.Tensor],
    batches: Iterable,
    *,
    device: torch.device | str,
    init_scale: float = GRADSCALER_INIT_SCALE,
    max_batches: int = 3,
    bf16_supported: bool = False,
) -> PreflightResult:
    """Run up to ``max_batches`` of ``batches`` forward and backward in fp32; rank fp16 risks.

    ``batches`` are what the trainer takes: a mapping with a ``labels`` key, or an
    ``(inputs, labels)`` pair; ``loss_fn(model(**inputs), labels)`` as in the trainer.
    ``bf16_supported``: whether this run's device can train in bf16 (the caller knows:
    ``mixft.amp.precision``); it only changes the advice.

    Usage: ``result = preflight(model, loss_fn, loader, device=torch.device("cpu"))``
    """
    _check_arguments(init_scale, max_batches)
    device = torch.device(device)
    names = {module: (name or ROOT) for name, module in model.named_modules()}
    stats: dict[str, _Stats] = {}
    record_forward = _forward_recorder(names, stats, init_scale)
    handles = [m.register_forward_hook(record_forward, with_kwargs=True) for m in names]
    rng = capture_rng_state()  # dropout draws numbers: the run must draw the same ones as without us
    modes = {m: m.training for m in names}
    params = [p for p in model.parameters() if p.requires_grad]
    # Each parameter's module: its weight gradient (a sum over the batch, often far larger than the output
    # gradients) is what GradScaler's scale multiplies too.
    owner = {p: name for m, name in names.items() for p in m.parameters(recurse=False)}
    started = time.perf_counter()
    n = 0
    try:
        model.train()  # the mode training runs in: dropout's 1/(1-p) scaling is part of the range
        with torch.autocast(device.type, enabled=False):  # fp32 whatever context the caller is in
            for batch in itertools.islice(batches, max_batches):  # never pulls a batch it will not use
                inputs, labels = _split(batch, device)
                outputs = model(**inputs) if isinstance(inputs, Mapping) else model(inputs)
                loss = loss_fn(outputs, labels)
                if params and loss.requires_grad:
                    # autograd.grad, not backward(): the tensor hooks fire, .grad stays untouched.
                    grads = torch.autograd.grad(loss, params, allow_unused=True)
                    for p, g in zip(params, grads):
                        s = stats.get(owner.get(p, ROOT)) if g is not None else None
                        if s is not None:
                            s.grad_max = _fold(s.grad_max, _abs_max(g.detach()), torch.maximum)
                n += 1
    finally:
        for h in handles:
            h.remove()
        for m, training in modes.items():
            m.train(training)
        restore_rng_state(rng)
    if n == 0:
        raise UsageError("preflight: no batches to check (the training data loader is empty)")
    total = sum(p.numel() for p in model.parameters()) or 1
    shares = {name: sum(p.numel() for p in m.parameters()) / total for m, name in names.items()}
    result = _assess(stats, init_scale, bf16_supported, n, shares)
    result.seconds = time.perf_counter() - started
    return result


def _check_arguments(init_scale, max_batches) -> None:
    """The arguments' checks, before any batch runs."""
    if not (
        isinstance(init_scale, (int, float))
        and not isinstance(init_scale, bool)
        and math.isfinite(init_scale)
        and init_scale > 0
    ):
        raise UsageError(f"preflight: init_scale must be a positive finite number, got {init_scale!r}")
    if not (isinstance(max_batches, int) and not isinstance(max_batches, bool) and max_batches >= 1):
        raise UsageError(f"preflight: max_batches must be a positive integer, got {max_batches!r}")


def _forward_recorder(names: dict, stats: dict[str, _Stats], init_scale: float):
    """A forward hook (``with_kwargs=True``) that folds each module's input and output maxima into
    ``stats`` (by the module's name in ``names``) and hooks the outputs for their gradients."""
    # Below this an unscaled gradient becomes 0 in fp16 even after multiplying by init_scale.
    flush_below = FP16_SMALLEST_SUBNORMAL / init_scale

    def record_gradient(s: _Stats):
        def hook(grad: torch.Tensor):
            g = grad.detach().abs()
            s.grad_max = _fold(s.grad_max, _abs_max(g), torch.maximum)  # NaN counts as inf there
            nonzero = g != 0
            s.flushed = _fold(s.flushed, (nonzero & (g < flush_below)).sum(), torch.add)
            s.nonzero = _fold(s.nonzero, nonzero.sum(), torch.add)

        return hook

    def record_forward(module, args, kwargs, output):
        name = names[module]
        s = stats.get(name)
        if s is None:  # first call: execution order (leaves finish before their containers)
            s = stats[name] = _Stats(len(stats), type(module).__name__)
        for t in floating_tensors(output):
            s.out_max = _fold(s.out_max, _abs_max(t), torch.maximum)
            if t.requires_grad:
                t.register_hook(record_gradient(s))
        for t in floating_tensors((args, kwargs)):
            s.in_max = _fold(s.in_max, _abs_max(t), torch.maximum)

    return record_forward


def _assess(
    stats: dict[str, _Stats], init_scale: float, bf16_supported: bool, batches: int, param_shares: dict[str, float]
) -> PreflightResult:
    values = {name: _host(s) for name, s in stats.items()}  # read once, after the last batch
    risks: list[ModuleRisk] = []
    close = FP16_MAX / OVERFLOW_MARGIN
    for name, (out_max, in_max, grad_max, flushed, nonzero) in values.items():
        kind = stats[name].module_type
        if out_max is not None and out_max > close:
            level = "exceeds" if out_max > FP16_MAX else "close"
            threshold = FP16_MAX if level == "exceeds" else close
            origin = in_max is None or in_max <= threshold
            risks.append(
                ModuleRisk(
                    name, kind, "overflow", "activation", level, out_max, FP16_MAX, out_max / FP16_MAX, origin=origin
                )
            )
        if grad_max is not None and grad_max * init_scale > FP16_MAX:
            scaled = grad_max * init_scale
            risks.append(ModuleRisk(name, kind, "overflow", "gradient", "exceeds", scaled, FP16_MAX, scaled / FP16_MAX))
        if nonzero and flushed / nonzero > UNDERFLOW_SHARE:
            share = flushed / nonzero
            risks.append(
                ModuleRisk(
                    name, kind, "underflow", "gradient", "exceeds", share, UNDERFLOW_SHARE, share / UNDERFLOW_SHARE
                )
            )
    # A container whose output overflows from in-range inputs is not where it starts when a
    # module inside it is (the model itself, a Sequential): the innermost one is the origin.
    inner = [r.name for r in risks if r.origin]
    for r in risks:
        if r.origin and any(_inside(other, r.name) for other in inner):
            r.origin = False
    for r in risks:
        if r.origin:
            r.contained_by = _container(r.name, values, FP16_MAX / OVERFLOW_MARGIN)
    risks.sort(key=lambda r: (_TIERS[(r.kind, r.tensor, r.level)], not r.origin, -r.ratio, stats[r.name].order))

    acts = [(n, v[0]) for n, v in values.items() if v[0] is not None]
    grads = [(n, v[2]) for n, v in values.items() if v[2] is not None]
    shares = [(n, v[3] / v[4]) for n, v in values.items() if v[4]]
    result = PreflightResult(
        batches=batches,
        init_scale=float(init_scale),
        seconds=0.0,
        modules_checked=len(values),
        modules_at_risk=risks,
        bf16_supported=bf16_supported,
        largest_activation=max(acts, key=lambda a: a[1]) if acts else None,
        largest_gradient=max(grads, key=lambda g: g[1]) if grads else None,
        largest_underflow=max(shares, key=lambda u: u[1]) if shares else None,
    )
    _recommend(result, param_shares)
    return result


def _recommend(result: PreflightResult, param_shares: dict[str, float]) -> None:
    risks = result.modules_at_risk
    if not risks:
        return
    act = [r for r in risks if r.tensor == "activation"]
    grad_over = [r for r in risks if r.tensor == "gradient" and r.kind == "overflow"]
    under = [r for r in risks if r.kind == "underflow"]
    advice = result.recommendations
    broken = next((r for r in act if not math.isfinite(r.value)), None)
    if broken is not None:
        advice.append(
            f"{broken.name} is already inf/NaN in fp32: no precision fixes that; check the weights and the inputs"
        )
    if result.bf16_supported:
        advice.append(
            "--precision bf16: fp32's exponent range, no loss scaling; none of the ranges above is a risk there"
        )
    else:
        advice.append("this device cannot train in bf16: fp16 with the changes below, or --precision fp32")

    origins = [r for r in act if r.origin]
    keep = list(dict.fromkeys(r.contained_by for r in origins if r.contained_by not in (None, ROOT)))
    result.fp32_modules = keep
    if keep:
        why = "; ".join(
            f"the overflow starting in {r.name} is back within range at the output of {r.contained_by}"
            for r in origins
            if r.contained_by in keep
        )
        advice.append(f"keep {', '.join(keep)} in fp32 (outside autocast): {result.flag_line} ({why})")
        kept = sum(param_shares.get(name, 0.0) for name in keep)
        if kept >= LARGE_SHARE:
            # Pre-norm transformers (Llama, GPT-2) carry a value on the residual stream up to
            # the final norm: the module containing it is then most of the model.
            advice.append(
                f"that keeps {kept:.0%} of the parameters in fp32: little is left for fp16 to speed up; "
                "bf16 or fp32 is the simpler choice"
            )
    elif origins:
        advice.append(
            f"the overflow starting in {origins[0].name} reaches the model's output: fp16 cannot hold "
            "it; use bf16 or fp32"
        )

    largest = result.largest_gradient[1] if result.largest_gradient else 0.0
    # The largest power-of-two scale that keeps every gradient within fp16's range.
    fits = _power_of_two_below(FP16_MAX / largest) if 0 < largest < math.inf else None
    if grad_over:
        if fits is not None and fits >= 1:
            skipped = round(math.log2(result.init_scale / fits))
            result.suggested_init_scale = fits
            advice.append(
                f"start the loss scale at {fits:g} ({INIT_SCALE_FLAG} {fits:g}; Python: "
                f"GradScaler(init_scale={fits:g})): from {result.init_scale:g} the first ~{skipped} "
                "steps would be skipped while the scaler halves it"
            )
        else:
            advice.append(f"gradients of {grad_over[0].name} exceed fp16's range even unscaled: use bf16 or fp32")
    if under and not grad_over:
        if fits is not None and fits >= 2 * result.init_scale:
            result.suggested_init_scale = fits
            advice.append(
                f"a higher initial loss scale keeps more small gradients: {INIT_SCALE_FLAG} {fits:g} "
                f"(the largest gradient still fits fp16 there)"
            )
        elif not result.bf16_supported:
            advice.append(
                f"small gradients of {under[0].name} flush to zero in fp16 and the scale cannot rise further: use fp32"
            )


def _container(name: str, values: dict[str, tuple], safe: float) -> str | None:
    """The smallest module around ``name`` whose output is fp16-safe (below ``safe``): running
    it whole in fp32 keeps the large values inside it. None when they reach the model's output."""
    while name != ROOT:
        name = name.rpartition(".")[0] or ROOT
        out_max = values.get(name, (None,))[0]  # containers that never ran (ModuleList) have no entry
        if name in values and out_max is not None and out_max <= safe:
            return name
    return None


def _inside(name: str, container: str) -> bool:
    return name != container and (container == ROOT or name.startswith(container + "."))


def _power_of_two_below(x: float) -> float:
    return 2.0 ** math.floor(math.log2(x))


def _split(batch, device: torch.device):
    # The trainer's batch convention (mixft.train.trainer.Trainer._split), kept here so the core
    # layer does not import the trainer.
    if isinstance(batch, Mapping):
        batch = {k: _to(v, device) for k, v in batch.items()}
        if "labels" not in batch:
            raise UsageError("preflight: a batch mapping needs a 'labels' key")
        labels = batch.pop("labels")
        return batch, labels
    if isinstance(batch, (list, tuple)) and len(batch) == 2:
        return _to(batch[0], device), _to(batch[1], device)
    raise UsageError(
        f"preflight: a batch must be a mapping with 'labels' or an (inputs, labels) pair, got {type(batch).__name__}"
    )


def _to(obj, device: torch.device):
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, Mapping):
        return {k: _to(v, device) for k, v in obj.items()}
    return obj


def _abs_max(t: torch.Tensor) -> torch.Tensor:
    m = t.detach().abs().amax().float()
    # An inf/NaN already in fp32 is past any limit: record it as inf, never let NaN hide it.
    return torch.where(torch.isnan(m), torch.full_like(m, math.inf), m)


def _fold(acc, value, op):
    return value if acc is None else op(acc, value)


def _host(s: _Stats) -> tuple:
    def get(t):
        return None if t is None else t.item()

    return get(s.out_max), get(s.in_max), get(s.grad_max), get(s.flushed), get(s.nonzero)


def _json_number(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _named_number(pair: tuple[str, float] | None) -> dict[str, Any] | None:
    return None if pair is None else {"module": pair[0], "value": _json_number(pair[1])}
