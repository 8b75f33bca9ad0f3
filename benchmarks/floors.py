"""The floor line of a benchmark: the step's work at the probe's matmul rate and a measured bandwidth.

The arithmetic is ``mixft.train.floor`` (one place, shared with ``--probe``); this module only
gathers its inputs for a benchmark: the probe's matmul rate per precision (``mixft.runs.probe``,
run now on the same recipe, model and data, not saved to the per-machine cache), the memory
bandwidth measured in this process, and the bytes the optimizer and the clip move over the
trainer's parameters.

Usage::

    gauges = measure_gauges(bert.cfg, ["fp32", "bf16"], device)
    floor = gauges.floor("fp32", step_flops, parameter_bytes)
    print(f"fp32: {floor.line(median_step_s)}")
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from mixft.config.run_config import RunConfig
from mixft.train.floor import StepFloor, measure_bandwidth


@dataclass
class FloorGauges:
    """The machine's rates a floor needs: matmul FLOP/s per precision (the probe's) and bytes/s."""

    matmul_flops_per_s: dict[str, float]
    bytes_per_s: float
    source: str  # where the matmul rates come from, in words

    def floor(self, precision: str, matmul_flops: float, parameter_bytes: float) -> StepFloor:
        return StepFloor(matmul_flops, self.matmul_flops_per_s[precision], parameter_bytes, self.bytes_per_s)

    def to_dict(self) -> dict[str, Any]:
        return {"matmul_flops_per_s": self.matmul_flops_per_s, "bytes_per_s": self.bytes_per_s, "source": self.source}


def measure_gauges(cfg: RunConfig, precisions: list[str], device: torch.device) -> FloorGauges:
    """Run the probe for ``precisions`` on ``cfg``'s recipe (not saved) and measure the bandwidth."""
    from mixft.runs.probe import probe

    result = probe(cfg, device=device, precisions=precisions, save=False)
    rates = {r.precision: r.matmul_flops_per_s for r in result.rows if r.matmul_flops_per_s}
    missing = [p for p in precisions if p not in rates]
    if missing:
        raise RuntimeError(f"the probe measured no matmul rate for {missing}")
    shapes = ", ".join(f"{s['rows']}x{s['in']}->{s['out']}" for s in result.matmul_shapes[:3])
    source = f"the probe's F.linear rate on the model's Linear shapes ({shapes}, ...), measured now"
    return FloorGauges(rates, measure_bandwidth(device), source)


def gauges_line(gauges: FloorGauges) -> str:
    rates = ", ".join(f"{p} {r / 1e9:.0f} GFLOP/s" for p, r in gauges.matmul_flops_per_s.items())
    return f"floor gauges: matmuls {rates} ({gauges.source}); memory {gauges.bytes_per_s / 1e9:.1f} GB/s (a.add_(b))"
