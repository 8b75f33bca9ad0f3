"""Data-parallel training across processes: set up from the launcher's environment.

Launch with ``torchrun --nproc_per_node N scripts/finetune.py ...`` (CPU or GPUs) or
``accelerate launch --multi_gpu --num_processes N scripts/finetune.py ...`` (GPUs): both
set ``RANK`` and ``WORLD_SIZE``. mixft then wraps the model in ``DistributedDataParallel`` (gloo on CPU,
NCCL on CUDA), shards the batches, keeps its own autocast + GradScaler (DDP averages the
*scaled* gradients, so every rank unscales and skips identically), gathers evaluation
metrics from every rank, and writes files from rank 0 only.

Every collective waits at most ``MIXFT_DIST_TIMEOUT`` seconds (default 600, NCCL's own default)
for the other processes: a node that stops answering (powered off, cut off the network) ends the
run on the others after that long, instead of gloo's default 30 minutes. A process that dies on a
machine that stays up closes its connections, and the others learn it at their next collective.
Either way ``lost_peer`` gives the transport's words, which the CLI prints in one line.
"""

from __future__ import annotations

import datetime
import gc
import os
import re
from typing import Any

import torch
import torch.distributed as dist

from mixft.errors import UsageError, shortened

TIMEOUT_ENV = "MIXFT_DIST_TIMEOUT"
# The longest a process waits in one collective for the others. Long enough for what one process
# does alone while the others wait (process 0 writing a DDP checkpoint or the saved model of a
# large model), short enough that a lost node does not hold the rest for gloo's default 30 minutes.
DEFAULT_TIMEOUT_S = 600.0
# gloo's transport errors: "[.../gloo/transport/tcp/pair.cc:553] Connection closed by peer [10.0.0.2]:4711. ..."
_GLOO_TRANSPORT = re.compile(r"\[[^\]]*gloo/transport/[^\]]*\]\s*(?P<words>[^\n]*)")


def collective_timeout() -> datetime.timedelta:
    """How long a collective waits for the other processes: ``MIXFT_DIST_TIMEOUT`` seconds, or 600.

    Usage: ``dist.init_process_group("gloo", timeout=collective_timeout())``
    """
    text = os.environ.get(TIMEOUT_ENV, "").strip()
    if not text:
        return datetime.timedelta(seconds=DEFAULT_TIMEOUT_S)
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not seconds > 0 or seconds == float("inf"):
        raise UsageError(f"{TIMEOUT_ENV} must be a positive number of seconds, got {text!r}")
    return datetime.timedelta(seconds=seconds)


def init_from_env(device_type: str) -> bool:
    """Join the process group the launcher describes; False when running alone.

    ``device_type``: where the run trains ("cuda" or "cpu"). NCCL for CUDA, gloo for the CPU: a
    ``--device cpu`` run on a machine with GPUs keeps its tensors on the CPU, which NCCL cannot reduce.
    """
    if dist.is_available() and dist.is_initialized():
        return True
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    backend = "nccl" if device_type == "cuda" and os.environ.get("MIXFT_DIST_BACKEND") != "gloo" else "gloo"
    timeout = collective_timeout()  # a bad value: one line before any group is joined
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend, timeout=timeout)
    return True


def lost_peer(error: BaseException) -> str | None:
    """The transport's own words when ``error`` says that another process of the group is gone or
    does not answer (its connection closed or reset, or no answer within ``collective_timeout``);
    None for any other error. The cause chain is searched too (DCP and FSDP re-raise what gloo raised).

    Usage: ``lost_peer(e)  # "gloo: Connection closed by peer [10.0.0.2]:4711"``
    """
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        found = _GLOO_TRANSPORT.search(str(error))
        if found:
            # gloo's advice after the first sentence ("This is typically caused by ...") says no more than we do.
            words = found["words"].split(". This is")[0].rstrip(". ")
            return f"gloo: {shortened(words, 160)}"
        if isinstance(error, dist.DistNetworkError):
            return f"{type(error).__name__}: {shortened(str(error).splitlines()[0] if str(error) else '', 160)}"
        error = error.__cause__ or error.__context__
    return None


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
    reduced = torch.tensor([int(v) for v in values], device=collective_device())
    dist.all_reduce(reduced, op=dist.ReduceOp.MAX)
    return [int(v) for v in reduced.tolist()]


def collective_device() -> torch.device:
    """Where a tensor made for a collective must live: this process's GPU under NCCL (which reduces CUDA
    tensors only: a CPU one fails with "No backend type associated with device type cpu"), else the CPU.

    Usage: ``dist.all_reduce(torch.tensor([flag], device=collective_device()))``
    """
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


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
