"""Checkpoints of a sharded (FSDP) run: a directory every process writes its own shards into (DCP).

The same promise as the one-file format (``mixft.train.checkpoint``): everything the rest of the
run depends on, resumed to bit-identical weights, written atomically and verified before
use. But a sharded model's state is written by every process, each its own shard, through
``torch.distributed.checkpoint`` (DCP)::

    checkpoint.dcp/
      .metadata              DCP's index (written last by its coordinator)
      __0_0.distcp ...       one file per process: its shards of the model and optimizer state
      mixft-manifest.json    format, version, world size, meta, CRC-32 and size of every file

The model and optimizers go through DCP's ``get_state_dict`` / ``set_state_dict`` (sharded
DTensors). The rest (``Trainer.loop_state_dict()``: schedulers, GradScaler, loop state and
the RNG states) is one serialized blob per process under its own key, so each process gets
its own random generators back. The directory is written under a temporary name and
renamed into place by process 0 once every process has written and the manifest is on disk:
a kill at any moment leaves the previous checkpoint or the new one. Resuming needs the same
number of processes (the data each reads and its RNG depend on it): another is refused.

Not yet wired to the command line (``--fsdp`` writes no checkpoint and refuses ``--resume``):
from Python, on every process (collectives inside)::

    save_sharded_checkpoint(trainer, "out/checkpoint.dcp", meta={"recipe": "bert-sst2"})
    manifest = verify_sharded_checkpoint("out/checkpoint.dcp")   # CheckpointError if damaged
    load_sharded_checkpoint(trainer, "out/checkpoint.dcp")       # then trainer.fit() continues
"""

from __future__ import annotations

import datetime as _dt
import io
import json
import os
import shutil
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from .checkpoint import CheckpointError
from .trainer import Trainer

FORMAT = "mixft-sharded-checkpoint"
VERSION = 1
MANIFEST = "mixft-manifest.json"


def _crc32(path: Path) -> int:
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            crc = zlib.crc32(chunk, crc)
    return crc


def _rest_key(rank: int) -> str:
    return f"trainer/rank{rank}"


def _state(trainer: Trainer, rest: bytes) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model, optimizers = get_state_dict(trainer.module, trainer.optimizers)
    return {"model": model, "optimizers": optimizers, _rest_key(dist.get_rank()): rest}


def save_sharded_checkpoint(
    trainer: Trainer, directory: str | os.PathLike, meta: Mapping[str, Any] | None = None
) -> Path:
    """Write ``trainer``'s sharded state into ``directory`` (every process its shards), atomically.

    Call on every process, between optimizer steps (``on_step_end``, ``on_epoch_end``).
    Usage: ``save_sharded_checkpoint(trainer, "out/checkpoint.dcp", {"recipe": "bert-sst2"})``
    """
    import torch.distributed.checkpoint as dcp

    directory = Path(directory)
    rank, world = dist.get_rank(), dist.get_world_size()
    tmp = directory.with_name(f".{directory.name}.tmp")
    if rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)  # debris of a process killed while writing
    dist.barrier()
    buffer = io.BytesIO()
    torch.save(trainer.loop_state_dict(), buffer)  # plain objects and RNG tensors: loads with weights_only
    dcp.save(_state(trainer, buffer.getvalue()), checkpoint_id=str(tmp))
    dist.barrier()  # every process's files are complete
    if rank == 0:
        files = sorted(p for p in tmp.iterdir() if p.is_file())
        manifest = {
            "format": FORMAT,
            "version": VERSION,
            "world_size": world,
            "meta": {
                **dict(meta or {}),
                "precision": trainer.precision.name,
                "step": trainer.state.step,
                "epoch": trainer.state.epoch,
                "saved": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            },
            "files": {p.name: {"bytes": p.stat().st_size, "crc32": _crc32(p)} for p in files},
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
        old = directory.with_name(f".{directory.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        if directory.exists():
            os.replace(directory, old)
        os.replace(tmp, directory)  # the new checkpoint appears whole
        shutil.rmtree(old, ignore_errors=True)
    dist.barrier()
    return directory


def verify_sharded_checkpoint(directory: str | os.PathLike, world_size: int | None = None) -> dict[str, Any]:
    """The manifest of a complete, undamaged sharded checkpoint (every file's size and CRC-32 checked), or
    CheckpointError in one line; ``world_size``: also refuse one written by another number of processes.

    Usage: ``verify_sharded_checkpoint("out/checkpoint.dcp", world_size=2)["meta"]["step"]``
    """
    directory = Path(directory)
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
    except (OSError, ValueError):
        raise CheckpointError(
            f"no complete sharded checkpoint at {directory} (its {MANIFEST} is missing or unreadable)"
        ) from None
    if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise CheckpointError(f"{directory} is not a mixft sharded checkpoint of version {VERSION}")
    for name, expected in manifest["files"].items():
        path = directory / name
        if not path.is_file() or path.stat().st_size != expected["bytes"] or _crc32(path) != expected["crc32"]:
            raise CheckpointError(
                f"sharded checkpoint {directory} is damaged ({name} is missing or fails its "
                "CRC check); delete it to start over"
            )
    if world_size is not None and manifest["world_size"] != world_size:
        raise CheckpointError(
            f"sharded checkpoint {directory} was written by {manifest['world_size']} processes, "
            f"this run has {world_size}: resume it with torchrun --nproc-per-node "
            f"{manifest['world_size']}"
        )
    return manifest


def load_sharded_checkpoint(trainer: Trainer, directory: str | os.PathLike, *, verify: bool = True) -> dict[str, Any]:
    """Load a sharded checkpoint into ``trainer`` (built exactly as before); its next ``fit()`` continues the run.

    Call on every process. Returns the checkpoint's meta.
    Usage: ``load_sharded_checkpoint(trainer, "out/checkpoint.dcp"); trainer.fit()``
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict

    directory = Path(directory)
    rank = dist.get_rank()
    manifest = (
        verify_sharded_checkpoint(directory, world_size=dist.get_world_size())
        if verify
        else json.loads((directory / MANIFEST).read_text())
    )
    meta = manifest["meta"]
    if meta.get("precision") != trainer.precision.name:
        raise CheckpointError(
            f"sharded checkpoint {directory} was written at {meta.get('precision')}, this run "
            f"trains {trainer.precision.name}"
        )
    state = _state(trainer, b"")
    dcp.load(state, checkpoint_id=str(directory))
    set_state_dict(
        trainer.module, trainer.optimizers, model_state_dict=state["model"], optim_state_dict=state["optimizers"]
    )
    rest = state[_rest_key(rank)]
    trainer.load_loop_state_dict(torch.load(io.BytesIO(rest), weights_only=True))
    return meta
