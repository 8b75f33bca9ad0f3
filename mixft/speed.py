"""The loop's speed switches: the same maths in less time. One place to see them all.

Each switch is measured on its own, against the loop without it, by
``python scripts/benchmark.py --ablation`` (see docs/benchmarks.md for the figures).

* ``fast_cpu_dropout`` (opt-in): on CPU, ``nn.Dropout`` modules draw their mask from a
  third of the random numbers torch's kernel uses (``mixft.fast_dropout``; drop
  probability rounded to 1/65536). About 2x faster per call, but its whole-step gain was
  within this machine's noise (0.95-1.02x over three runs) and its masks differ from
  torch's, so it is off by default. CUDA models are left alone (torch's dropout is fast
  there), and so are compiled ones (the compiler generates its own dropout).
* ``keep_freed_memory`` (opt-in): on CPU with glibc, freed heap blocks are reused instead
  of being unmapped and faulted back in every step (``mixft.cpu_allocator``). It removes
  ~11,000 page faults per MiniLM step, but its whole-step gain was within this machine's
  noise (0.98-1.04x) and the heap it keeps can outgrow the tensors it serves (a
  repeated 64 MiB allocation grew glibc's arena to 595 MiB), so it is off by default.
* ``clip_in_optimizer`` (on): with a fused optimizer (``AdamW(fused=True)``, ...), the clip
  coefficient is handed to its kernel (``optimizer.grad_scale``, the hook GradScaler
  uses) instead of multiplying every gradient in a pass of its own. The norm is still
  computed from the unscaled gradients; the update equals clip-then-step to rounding.
* ``compile`` (opt-in): ``torch.compile`` the model for the training forward/backward (dynamic
  shapes, since batches are padded per batch). Off by default: on the 2-core CPU it took
  67 s to compile, more than the recipe's whole default run, for a per-step gain within
  noise; see docs/benchmarks.md.

Usage::

    Trainer(model, opt, loss_fn, loader, speed=SpeedOptions(compile=True))
    Trainer(..., speed=SpeedOptions(fast_cpu_dropout=True, keep_freed_memory=True))
    Trainer(..., speed=SpeedOptions.reference())   # torch's kernels only, for comparison
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import torch


@dataclass(frozen=True)
class SpeedOptions:
    fast_cpu_dropout: bool = False
    keep_freed_memory: bool = False
    clip_in_optimizer: bool = True
    compile: bool = False

    @classmethod
    def reference(cls) -> "SpeedOptions":
        """Every switch off: the plain loop on torch's own kernels."""
        return cls(**{f.name: False for f in fields(cls)})

    def to_dict(self) -> dict[str, bool]:
        return asdict(self)


def fused_adamw_available(device: torch.device) -> bool:
    """Whether ``AdamW(fused=True)`` runs on ``device`` (CUDA; CPU in recent torch)."""
    try:
        torch.optim.AdamW([torch.zeros(1, device=device, requires_grad=True)], fused=True)
        return True
    except (RuntimeError, ValueError):
        return False
