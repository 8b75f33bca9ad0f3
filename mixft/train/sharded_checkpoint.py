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
its own random generators back. Like the one-file format, this module does not import the
loop: it reads the trainer through ``mixft.train.hooks.TrainerLike``. The directory is written under a temporary name and
renamed into place by process 0 once every process has written and the manifest is on disk:
a kill at any moment leaves the previous checkpoint or the new one. Resuming needs the same
number of processes (the data each reads and its RNG depend on it): another is refused.

``states`` (the run's best model and early stopping, as ``save_checkpoint`` takes them) go
with it: their plain fields in each process's blob, and a mapping of tensors (the best
model's weights: sharded DTensors, each process its own shards) through DCP beside the
model, shaped like the model's state dict.

The CLI's ``--fsdp`` writes one through the ``Checkpointer`` (``sharded=True``) and
``--resume`` continues it (``mixft.runs.identity`` checks it first). From Python, on every
process (collectives inside)::

    save_sharded_checkpoint(trainer, "out/checkpoint.dcp", meta={"recipe": "bert-sst2"})
    manifest = verify_sharded_checkpoint("out/checkpoint.dcp")   # CheckpointError if damaged
    load_sharded_checkpoint(trainer, "out/checkpoint.dcp")       # then trainer.fit() continues
"""

from __future__ import annotations

import datetime as _dt
import io
import json
import os
import pickle
import shutil
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from mixft.output_names import SHARDED_SUFFIX

from .checkpoint import CheckpointError, fit_reason, start_persistent_loaders
from .hooks import TrainerLike

FORMAT = "mixft-sharded-checkpoint"
VERSION = 1
MANIFEST = "mixft-manifest.json"
IN_SHARDS = "mixft:in-shards"  # a state's field whose tensors went through DCP (its value in the blob)


def is_sharded_checkpoint(path: str | os.PathLike) -> bool:
    """Whether ``path`` names a sharded checkpoint (a ``.dcp`` directory), written or not.

    Usage: ``is_sharded_checkpoint("out/checkpoint.dcp")  # True``
    """
    return Path(path).name.endswith(SHARDED_SUFFIX)  # mixft.runs.outdir names them so


def settled(directory: str | os.PathLike) -> Path:
    """Where the sharded checkpoint of ``directory`` is: itself, or its previous version when a kill
    came between the two renames of a save (the previous one moved aside, the new one not yet in place).

    Usage: ``settled("out/checkpoint.dcp").exists()``
    """
    directory = Path(directory)
    previous = directory.with_name(f".{directory.name}.old")
    if not directory.exists() and (previous / MANIFEST).is_file():
        return previous
    return directory


def _crc32(path: Path) -> int:
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            crc = zlib.crc32(chunk, crc)
    return crc


def _rest_key(rank: int) -> str:
    return f"trainer/rank{rank}"


def _state(trainer: TrainerLike, rest: bytes, tensors: Mapping[str, Any] | None = None) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model, optimizers = get_state_dict(trainer.module, trainer.optimizers)
    state = {"model": model, "optimizers": optimizers, _rest_key(dist.get_rank()): rest}
    if tensors:
        state["states"] = dict(tensors)
    return state


def _is_tensor_map(value: Any) -> bool:
    return isinstance(value, Mapping) and bool(value) and all(isinstance(v, torch.Tensor) for v in value.values())


def _split_states(states: Mapping[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """``states``' state dicts as (plain fields, for the blob; ``{"name/field": tensors}``, for DCP).

    A field that maps names to tensors (the best model's weights) is sharded like the model:
    pickled whole into the blob it would be one process's shards only, or a gathered copy.
    """
    plain: dict[str, Any] = {}
    tensors: dict[str, Any] = {}
    for name, obj in (states or {}).items():
        state = dict(obj.state_dict())
        for field, value in state.items():
            if _is_tensor_map(value):
                tensors[f"{name}/{field}"] = dict(value)
                state[field] = IN_SHARDS
        plain[name] = state
    return plain, tensors


def save_sharded_checkpoint(
    trainer: TrainerLike,
    directory: str | os.PathLike,
    meta: Mapping[str, Any] | None = None,
    states: Mapping[str, Any] | None = None,
) -> Path:
    """Write ``trainer``'s sharded state (and ``states``) into ``directory`` (every process its shards), atomically.

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
    plain, tensors = _split_states(states)
    buffer = io.BytesIO()
    # plain objects and RNG tensors: loads with weights_only
    torch.save({"loop": trainer.loop_state_dict(), "states": plain}, buffer)
    dcp.save(_state(trainer, buffer.getvalue(), tensors), checkpoint_id=str(tmp))
    dist.barrier()  # every process's files are complete
    if rank == 0:
        files = sorted(p for p in tmp.iterdir() if p.is_file())
        manifest = {
            "format": FORMAT,
            "version": VERSION,
            "world_size": world,
            "sharded_states": sorted(tensors),  # what a load must lay out before DCP fills it
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
        # A directory cannot be renamed over another: the previous one moves aside first, and a kill
        # between the two renames leaves it there, where ``settled`` finds it. So ".old" is removed
        # only while a checkpoint stands at ``directory``.
        old = directory.with_name(f".{directory.name}.old")
        if directory.exists():
            shutil.rmtree(old, ignore_errors=True)
            os.replace(directory, old)
        os.replace(tmp, directory)  # the new checkpoint appears whole
        shutil.rmtree(old, ignore_errors=True)
    dist.barrier()
    return directory


def verify_sharded_checkpoint(directory: str | os.PathLike, world_size: int | None = None) -> dict[str, Any]:
    """The manifest of a complete, undamaged sharded checkpoint (listing exactly the files of its world size,
    every file's size and CRC-32 checked), or CheckpointError in one line; ``world_size``: also refuse one
    written by another number of processes.

    Usage: ``verify_sharded_checkpoint("out/checkpoint.dcp", world_size=2)["meta"]["step"]``
    """
    directory = settled(directory)
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
    except (OSError, ValueError):
        raise CheckpointError(
            f"no complete sharded checkpoint at {directory} (its {MANIFEST} is missing or unreadable)"
        ) from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise CheckpointError(f"{directory} is not a mixft sharded checkpoint of version {VERSION}")
    # The manifest has no checksum of its own: what it says is checked against what DCP will read.
    _check_manifest(directory, manifest)
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
            f"this run has {world_size}: resume it with {manifest['world_size']} processes in all "
            f"(torchrun --nproc-per-node {manifest['world_size']} on one machine, or nodes x --nproc-per-node = "
            f"{manifest['world_size']})"
        )
    return manifest


def _damaged(directory: Path, what: str) -> CheckpointError:
    return CheckpointError(f"sharded checkpoint {directory} is damaged ({what}); delete it to start over")


def _dcp_files(world_size: int) -> set[str]:
    """The files DCP writes for ``world_size`` processes (one thread each): its index and one file per process.

    Usage: ``_dcp_files(2)  # {".metadata", "__0_0.distcp", "__1_0.distcp"}``
    """
    return {".metadata", *(f"__{rank}_0.distcp" for rank in range(world_size))}


def _check_manifest(directory: Path, manifest: Mapping[str, Any]) -> None:
    """A manifest whose fields have their types, and that lists exactly the files its world size writes.

    An edited one (another world size, a file taken off the list) would otherwise send DCP to read
    files that are not there, or files no CRC was checked for.
    """
    world, files = manifest.get("world_size"), manifest.get("files")
    well_formed = (
        isinstance(world, int)
        and not isinstance(world, bool)
        and world >= 1
        and isinstance(files, dict)
        and all(
            isinstance(entry, dict) and all(type(entry.get(k)) is int for k in ("bytes", "crc32"))
            for entry in files.values()
        )
        and isinstance(manifest.get("meta"), dict)
        and isinstance(manifest.get("sharded_states", []), list)
        and all(isinstance(name, str) for name in manifest.get("sharded_states", []))
    )
    if not well_formed:
        raise _damaged(directory, f"its {MANIFEST} is not what mixft writes")
    expected = _dcp_files(world)
    missing, extra = sorted(expected - set(files)), sorted(set(files) - expected)
    if missing or extra:
        said = [f"does not list {_some(missing)}"] if missing else []
        said += [f"lists {_some(extra)}"] if extra else []
        raise _damaged(
            directory,
            f"its {MANIFEST} {' and '.join(said)}; {world} process{'es write' if world > 1 else ' writes'} .metadata "
            f"and {'__0_0.distcp' if world == 1 else f'__0_0.distcp to __{world - 1}_0.distcp'}",
        )


def _some(names: list[str], shown: int = 3) -> str:
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


def load_sharded_checkpoint(
    trainer: TrainerLike,
    directory: str | os.PathLike,
    *,
    verify: bool = True,
    states: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Load a sharded checkpoint into ``trainer`` (built exactly as before); its next ``fit()`` continues the run.

    Call on every process. ``states``: the objects saved with it, loaded back by name (one the
    checkpoint lacks keeps its fresh state). Returns the checkpoint's meta.
    Usage: ``load_sharded_checkpoint(trainer, "out/checkpoint.dcp"); trainer.fit()``
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.state_dict import set_state_dict

    directory = settled(directory)
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
    state = _state(trainer, b"", _tensor_layout(trainer, manifest.get("sharded_states", ())))
    misfit = _model_misfit(directory, state["model"])  # the same in every process: all refuse, before any collective
    if misfit:
        raise CheckpointError(f"--resume: sharded checkpoint {directory} does not fit this run ({misfit})")
    try:
        # A collective that gathers every process's error (a saved shape that is not the model's) into
        # one CheckpointException, raised in each: every process refuses, none trains on. A collective
        # that fails (a process gone) raises something else, and is not taken for a mismatch here.
        dcp.load(state, checkpoint_id=str(directory))
    except CheckpointException as e:
        raise _unusable(directory, e.failures[min(e.failures)][0] if e.failures else e) from None
    try:  # in this process only: the same state in each, so the same outcome
        set_state_dict(
            trainer.module, trainer.optimizers, model_state_dict=state["model"], optim_state_dict=state["optimizers"]
        )
        rest = torch.load(io.BytesIO(state[_rest_key(rank)]), weights_only=True)
        trainer.load_loop_state_dict(rest["loop"])
        _load_states(states, rest["states"], state.get("states", {}))
    except (KeyError, TypeError, ValueError, RuntimeError, EOFError, pickle.UnpicklingError) as e:
        raise _unusable(directory, e) from None
    start_persistent_loaders(trainer)  # as the one-file resume does: DataLoader workers draw as before
    return meta


def _model_misfit(directory: Path, model_state: Mapping[str, Any]) -> str | None:
    """How the checkpoint's model differs from this run's (the first parameter of another shape, or that
    only one of them has, then how many more), from DCP's index; None when they match.

    DCP loads what the run asks for and nothing else: a parameter only the checkpoint has (a model
    regenerated with fewer layers) would be dropped without a word, where the one-file resume refuses.
    """
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    try:
        index = FileSystemReader(str(directory)).read_metadata().state_dict_metadata
    except (OSError, EOFError, pickle.UnpicklingError, AttributeError) as e:
        raise _unusable(directory, e) from None
    saved = {key.removeprefix("model."): meta for key, meta in index.items() if key.startswith("model.")}
    differences = []
    for name, tensor in model_state.items():
        meta = saved.get(name)
        if meta is None:
            differences.append(f"this run's model has {name}, the checkpoint has not")
        # A DTensor's shape is the whole parameter's, as the index records it.
        elif isinstance(meta, TensorStorageMetadata) and tuple(meta.size) != tuple(tensor.shape):
            differences.append(
                f"{name} has shape {list(meta.size)} in the checkpoint, {list(tensor.shape)} in this run's model"
            )
    differences += [f"the checkpoint has {name}, this run's model has not" for name in saved if name not in model_state]
    if not differences:
        return None
    others = len(differences) - 1
    return differences[0] + (f"; {others} more parameter{'s differ' if others > 1 else ' differs'}" if others else "")


def _unusable(directory: Path, cause: BaseException) -> CheckpointError:
    """The one-file resume's refusals (``mixft.train.checkpoint``), in one line instead of a traceback per process."""
    if isinstance(cause, (OSError, EOFError, pickle.UnpicklingError)):
        return CheckpointError(
            f"--resume: sharded checkpoint {directory} cannot be read ({fit_reason(cause)}); delete it to start over"
        )
    return CheckpointError(f"--resume: sharded checkpoint {directory} does not fit this run ({fit_reason(cause)})")


def _tensor_layout(trainer: TrainerLike, names: Any) -> dict[str, Any]:
    # The saved tensor maps are copies of the model's state dict (the best weights): fresh tensors
    # of its shards' shapes and placements, for DCP to fill in place.
    if not names:
        return {}
    layout = {k: v.detach().clone() for k, v in trainer.module.state_dict().items()}
    return {name: {k: v.clone() for k, v in layout.items()} for name in names}


def _load_states(states: Mapping[str, Any] | None, plain: Mapping[str, Any], tensors: Mapping[str, Any]) -> None:
    for name, obj in (states or {}).items():
        if name not in plain:
            continue
        state = dict(plain[name])
        for field, value in state.items():
            if isinstance(value, str) and value == IN_SHARDS:
                state[field] = tensors[f"{name}/{field}"]
        obj.load_state_dict(state)
