"""Data-parallel training across processes: set up from the launcher's environment.

Launch with ``torchrun --nproc_per_node N scripts/finetune.py ...`` (CPU or GPUs) or
``accelerate launch --multi_gpu --num_processes N scripts/finetune.py ...`` (GPUs): both
set ``RANK`` and ``WORLD_SIZE``. mixft then wraps the model in ``DistributedDataParallel`` (gloo on CPU,
NCCL on CUDA), shards the batches, keeps its own autocast + GradScaler (DDP averages the
*scaled* gradients, so every rank unscales and skips identically), gathers evaluation
metrics from every rank, and writes files from rank 0 only.
"""

from __future__ import annotations

import gc
import os
from typing import Any

import torch
import torch.distributed as dist


def init_from_env() -> bool:
    """Join the process group the launcher describes; False when running alone."""
    if dist.is_available() and dist.is_initialized():
        return True
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    backend = "nccl" if torch.cuda.is_available() and os.environ.get("MIXFT_DIST_BACKEND") != "gloo" else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend)
    return True


def shutdown() -> None:
    """Leave the process group once every rank has got here; a no-op when running alone.

    Why the barrier: a rank that tears its gloo connections down (or exits) while a peer
    is still finishing (rank 0 writing results) can abort that peer's transport threads
    ("terminate called without an active exception", seen in CI).
    """
    if is_distributed():
        # DDP reducers still referenced would be freed at interpreter finalization, where
        # releasing their tensors can abort the process: free them while Python is alive.
        gc.collect()
        dist.barrier()
        dist.destroy_process_group()


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def is_main_process() -> bool:
    """Only this process writes files and prints the run summary."""
    return rank() == 0


def local_device(kind: str) -> str:
    """The device this rank should use for ``kind`` ("cuda" -> its own GPU)."""
    if kind == "cuda" and is_distributed():
        return f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
    return kind


def all_reduce_sum(value: torch.Tensor) -> torch.Tensor:
    if is_distributed():
        value = value.clone()
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return value


def is_sharded(module: torch.nn.Module) -> bool:
    """Whether FSDP2's ``fully_shard`` sharded ``module`` (its parameters are then gathered by hooks on its own call)."""
    from torch.distributed.fsdp import FSDPModule

    return isinstance(module, FSDPModule)


def max_over_processes(*values: int) -> list[int]:
    """Each integer's largest value over the processes (one all-reduce for all of them); the values as
    given in one process.

    Usage: ``(signum,) = max_over_processes(signum_here or 0)``
    """
    if not is_distributed():
        return [int(v) for v in values]
    reduced = torch.tensor([int(v) for v in values])
    dist.all_reduce(reduced, op=dist.ReduceOp.MAX)
    return [int(v) for v in reduced]


def any_process(*flags: bool) -> list[bool]:
    """Each flag OR-ed over the processes (one all-reduce for all of them); the flags as given in one process.

    What lets every process take the same branch before a collective (a save, a stop).
    Usage: ``due, bad = any_process(due_here, bad_here)``
    """
    return [bool(v) for v in max_over_processes(*(int(bool(f)) for f in flags))]


def all_gather_objects(obj: Any) -> list[Any]:
    if not is_distributed():
        return [obj]
    out: list[Any] = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out


def wrap_model(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """DistributedDataParallel around ``model`` when in a process group; else ``model``."""
    if not is_distributed():
        return model
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
