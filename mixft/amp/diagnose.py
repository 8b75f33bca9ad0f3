"""Where did the inf/NaN come from? One forward pass with a hook on every module.

When a run collapses (``mixft.callbacks.faults.CollapseDetector``), ``diagnose`` re-runs the
forward pass on a training batch under the run's autocast, in training mode (dropout's
scaling is part of the range; the RNG is put back), records every module's output as it
finishes (execution order, call by call: a module called twice is blamed only for its own
call), and reports the first module whose output holds an inf or NaN, how large the
activations around it are compared with float16's limit (65504), and a fix: switch to bf16
(fp32's exponent range), keep the block around it in fp32 (the preflight's ``--fp32-modules``,
measured on the same batches in fp32: the smallest block whose output is back in range), or
lower the learning rate.

Usage::

    d = diagnose(trainer)          # a Diagnosis; also fine on a healthy model
    print(d.summary())             # one line
    print(d.report())              # a few lines, the largest activations included
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import torch
from torch import nn

from mixft.amp.precision_names import GRADSCALER_INIT_SCALE
from mixft.amp.preflight import preflight
from mixft.batch import floating_tensors, forward, split_batch
from mixft.log import logger
from mixft.rng import capture_rng_state, restore_rng_state

FP16_MAX = float(torch.finfo(torch.float16).max)  # 65504: anything larger becomes inf in fp16


@dataclass
class ModuleStats:
    """One module's output in the diagnostic pass."""

    name: str  # qualified name ("encoder.layer.0.output.dense"; "(model)" for the root)
    kind: str  # class name
    output_max_abs: float  # largest finite |value| in the output
    input_max_abs: float  # largest finite |value| in the inputs
    nonfinite: int  # inf/NaN elements in the output
    input_nonfinite: int = 0  # inf/NaN elements in the inputs: made before this module, outside any module


@dataclass
class Diagnosis:
    precision: str
    batches: int  # batches run until a non-finite output was found (or the limit)
    first_nonfinite: ModuleStats | None  # first module, in execution order, with inf/NaN output
    largest: ModuleStats | None  # the module with the largest finite |activation|
    nonfinite_params: list[str] = field(default_factory=list)  # parameters already inf/NaN
    suggestion: str = ""
    modules: list[ModuleStats] = field(default_factory=list)  # every module, execution order
    # fp16 overflow: the preflight's fp32 measurement on the same batches (mixft.amp.preflight), for the fix
    fp32_modules: list[str] = field(default_factory=list)  # the blocks whose outputs are back in range
    reaches_output: bool = False  # the overflow is still out of range at the model's output

    def summary(self) -> str:
        """One line: where the first inf/NaN appears (or that the forward is finite) and the fix."""
        if self.nonfinite_params:
            where = f"parameter {self.nonfinite_params[0]} is already inf/NaN"
        elif self.first_nonfinite is not None:
            m = self.first_nonfinite
            where = f"first non-finite output: {m.name} ({m.kind}) under {self.precision}, " + (
                # No module's output was inf/NaN before: code between modules made its input so.
                "whose input was already inf/NaN (made by code outside any module, before it runs)"
                if m.input_nonfinite
                else f"input max |x| {m.input_max_abs:.3g}, finite output max |x| {m.output_max_abs:.3g} "
                f"(fp16 limit {FP16_MAX:.0f})"
            )
        else:
            big = self.largest
            where = f"forward pass finite over {self.batches} batch(es) under {self.precision}" + (
                f", largest |activation| {big.output_max_abs:.3g} in {big.name} (fp16 limit {FP16_MAX:.0f})"
                if big
                else ""
            )
        return f"diagnosis: {where}; suggested fix: {self.suggestion}"

    def report(self, top: int = 5) -> str:
        """A few lines for a terminal: the summary, then the largest activations."""
        lines = [self.summary()]
        ranked = sorted(self.modules, key=lambda m: -m.output_max_abs)[:top]
        for m in ranked:
            flag = f"  {m.nonfinite} inf/NaN" if m.nonfinite else ""
            lines.append(f"  {m.name:<40} {m.kind:<16} max |out| {m.output_max_abs:10.4g}{flag}")
        return "\n".join(lines)


def diagnose(trainer, loader: Iterable | None = None, max_batches: int = 4) -> Diagnosis:
    """Run up to ``max_batches`` batches of ``loader`` (default: the training loader) forward.

    No gradients, training mode as the run trains (restored afterwards, with the RNG: the run
    draws the same dropout masks as without the diagnosis), the trainer's autocast. Stops at the
    first batch that makes some module's output non-finite; under fp16 the preflight then
    measures the same batches in fp32 for the fix.
    """
    model: nn.Module = getattr(trainer, "module", trainer.model)  # without a DDP wrapper
    precision = trainer.precision.name
    bad_params = [name for name, p in model.named_parameters() if not bool(torch.isfinite(p.detach()).all())]

    stats: dict[str, ModuleStats] = {}
    order: list[str] = []
    first_call_bad: list[ModuleStats] = []  # the first call, in execution order, whose output was inf/NaN

    def hook(name: str):
        def record(module, inputs, output):
            out_max, bad = _max_abs_and_nonfinite(output)
            in_max, in_bad = _max_abs_and_nonfinite(inputs)
            if bad and not first_call_bad:  # this call's own figures, not a shared module's earlier calls'
                first_call_bad.append(ModuleStats(name, type(module).__name__, out_max, in_max, bad, in_bad))
            if name not in stats:
                order.append(name)
                stats[name] = ModuleStats(name, type(module).__name__, out_max, in_max, bad, in_bad)
            else:
                s = stats[name]
                s.output_max_abs = max(s.output_max_abs, out_max)
                s.input_max_abs = max(s.input_max_abs, in_max)
                s.nonfinite += bad
                s.input_nonfinite += in_bad

        return record

    handles = [m.register_forward_hook(hook(name or "(model)")) for name, m in model.named_modules()]
    modes = {m: m.training for m in model.modules()}
    rng = capture_rng_state()
    model.train()  # the mode training runs in: dropout's 1/(1-p) scaling is part of the range
    seen: list = []
    try:
        with torch.no_grad():
            for batch in loader if loader is not None else trainer.train_loader:
                seen.append(batch)
                inputs, _ = split_batch(batch, trainer.device)
                with trainer.autocast():
                    forward(model, inputs)
                # Hooks fire as modules finish: the first bad call is the first in execution order.
                if first_call_bad or len(seen) >= max_batches:
                    break
    finally:
        for h in handles:
            h.remove()
        for m, training in modes.items():
            m.train(training)
        restore_rng_state(rng)

    modules = [stats[n] for n in order]
    largest = max(modules, key=lambda m: m.output_max_abs, default=None)
    first_bad = first_call_bad[0] if first_call_bad else None
    d = Diagnosis(precision, len(seen), first_bad, largest, bad_params, modules=modules)
    if first_bad is not None and precision == "fp16" and not bad_params and not first_bad.input_nonfinite:
        d.fp32_modules, d.reaches_output = _blocks_back_in_range(trainer, model, seen, first_bad.name)
    d.suggestion = _suggest(d, trainer)
    return d


def _blocks_back_in_range(trainer, model: nn.Module, batches: list, overflowed: str) -> tuple[list[str], bool]:
    """What to keep in fp32, measured by the preflight on these batches in fp32: its ``--fp32-modules`` (the smallest
    blocks whose outputs are back in fp16's range), or, when every module's output is in range in fp32, the module
    that overflowed itself (the overflow is inside it: q·k in an attention); and whether an overflow reaches the
    model's output, which no block holds. ``([], False)`` when it cannot tell."""
    try:
        result = preflight(model, trainer.loss_fn, batches, device=trainer.device, max_batches=len(batches))
    except Exception as e:  # noqa: BLE001 - a diagnosis after a collapse must not fail the run's report
        logger.debug("diagnosis: the fp32 measurement failed (%s: %s)", type(e).__name__, e)
        return [], False
    origins = [r for r in result.modules_at_risk if r.tensor == "activation" and r.origin]
    if not origins:  # in fp32 no output leaves fp16's range: kept whole, the module's output is in range
        return [overflowed], False
    return list(result.fp32_modules), any(r.contained_by is None for r in origins)


def _suggest(d: Diagnosis, trainer) -> str:
    injected = any(type(cb).__name__ == "InjectNonFinite" for cb in getattr(trainer, "callbacks", ()))
    note = " (fault injection is on: those inf/NaN were put into the gradients on purpose)" if injected else ""
    if d.nonfinite_params:
        return "the weights diverged: lower the learning rate (--lr) and restart from the last good checkpoint"
    m = d.first_nonfinite
    if m is not None:
        if d.precision == "fp16":  # finite inputs, inf/NaN output: float16's range ran out
            # The block to keep is measured (in fp32, by the preflight), not guessed: a leaf's large output flows on
            # through the modules after it, so keeping only its parent can overflow one module later.
            if d.fp32_modules:
                return (
                    f"switch to bf16 (--precision bf16, fp32's exponent range), or keep the block around {m.name} in "
                    f"fp32: --fp32-modules {','.join(d.fp32_modules)} (measured in fp32 on these batches: the smallest "
                    "block whose output is within fp16's range, as --preflight finds it)"
                )
            if d.reaches_output:
                return (
                    f"switch to bf16 (--precision bf16) or fp32: the values from {m.name} stay beyond fp16's range up "
                    "to the model's output (measured in fp32), so no --fp32-modules block holds them"
                )
            return (
                f"switch to bf16 (--precision bf16, fp32's exponent range); --preflight measures which block around "
                f"{m.name} to keep in fp32"
            )
        return "lower the learning rate (--lr): the activations grew without bound"
    # Forward finite: the inf/NaN come from the backward pass or the optimizer.
    scale = _loss_scale(trainer)
    if d.precision == "fp16" and scale is not None and scale > GRADSCALER_INIT_SCALE:
        # Was: "lower the learning rate" after --init-loss-scale 1e38, its scale still 9.8e34 when the run stopped.
        return (
            f"the gradients overflow float16 at the loss scale, still {scale:g} after the skipped steps' halvings: "
            f"start it lower (--init-loss-scale {GRADSCALER_INIT_SCALE:g}, GradScaler's default, or what "
            "--preflight recommends)" + note
        )
    if d.precision == "fp16":
        return (
            "the gradients overflow float16: switch to bf16 (--precision bf16) or lower the learning rate (--lr)" + note
        )
    return (
        "the gradients are inf/NaN while the forward is finite: lower the learning rate (--lr) or clip (--max-grad-norm)"
        + note
    )


def _loss_scale(trainer) -> float | None:
    """The fp16 GradScaler's scale now (None: no scaler, or one that is off)."""
    scaler = getattr(trainer, "scaler", None)
    if scaler is None or not scaler.is_enabled():
        return None
    return float(scaler.get_scale())


def _max_abs_and_nonfinite(obj) -> tuple[float, int]:
    largest, bad = 0.0, 0
    for t in floating_tensors(obj):
        if t.numel() == 0:
            continue
        finite = torch.isfinite(t)
        bad += int((~finite).sum())
        if bool(finite.any()):
            largest = max(largest, float(t.detach().abs().masked_fill(~finite, 0).max().float()))
    return largest, bad
