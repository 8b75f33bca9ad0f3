"""A run's memory breakdown, model size and eval predictions, measured around ``trainer.fit()``.

The runner calls two lines per (precision, seed) run::

    memory = measure_before_fit(cfg, prepared, trainer, precision, seed, fresh=not single)
    result = trainer.fit()
    memory.finish(result, trainer)        # fills result.memory, .parameters, .lora

Before fit, ``mixft.amp.memory.measure_step_memory`` runs ONE forward + backward (under the
run's autocast) on one micro-batch of the first epoch's order: with mixft's length-grouped
loaders the one with the most padded tokens (rows x longest row: the step that saves the
most; the first batch may be a short remainder), else the loader's first batch. The
sampler is set to epoch 0 and the global RNGs are put back, so training sees exactly the
batches and random numbers it would have seen, and runs of one ``--compare`` (same seed)
measure the very same batch (``memory.measured_batch`` / ``measured_batch_shape`` say
which). The model's gradients are cleared again, the optimizer untouched.

After fit: the optimizer state (what the optimizers hold for the trainable parameters only:
a LoRA run's frozen weights have none, nor gradients), and the device figure:

- CUDA: the run's ``torch.cuda.max_memory_allocated`` after a reset at its start (the
  trainer's meter): independent of earlier runs in the process;
- CPU, one run: the run's own peak RSS (its process ran nothing before it but preparing);
- CPU, several runs (``--compare``, ``--seeds``): the peak RSS of a fresh process that
  trains this run's first steps (``mixft.runs.fresh_process``), also written as the run's
  ``peak_memory_bytes`` / ``start_memory_bytes``, so no figure depends on the run order.
  ``memory.device_figure_scope`` says which (``"run"`` | ``"fresh_process"``), and
  ``memory.device_figure_steps`` how many steps the fresh process trained (else null).
"""

from __future__ import annotations

from typing import Any

import torch

from mixft import distributed
from mixft.amp.memory import measure_step_memory, memory_record, optimizer_state_bytes
from mixft.batch import split_batch
from mixft.log import logger
from mixft.rng import capture_rng_state, restore_rng_state

__all__ = ["RunMemory", "count_parameters", "measure_before_fit"]

MEASURED_LARGEST = "epoch 0's micro-batch with the most tokens (rows x longest row)"
MEASURED_FIRST = "first micro-batch of epoch 0's order"


def count_parameters(model: torch.nn.Module) -> dict[str, int]:
    """``{"trainable", "total"}`` parameter counts, a tied weight counted once.

    Usage: ``count_parameters(model)["trainable"]``
    """
    seen: set[int] = set()
    trainable = total = 0
    for p in model.parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        total += p.numel()
        trainable += p.numel() if p.requires_grad else 0
    return {"trainable": int(trainable), "total": int(total)}


def _measured_batch(loader) -> tuple[Any, str]:
    """The batch to measure, and its description; every global RNG and the loader left as they were.

    With a length-grouped sampler (``lengths`` known): the batch of epoch 0's order with the
    most padded tokens (rows x longest row), found from the lengths without collating the
    others; the same batch for every precision of a seed. Otherwise the first batch of the
    loader's order.
    """
    batches = getattr(loader, "batch_sampler", None)
    for obj in (getattr(loader, "sampler", None), batches):
        if hasattr(obj, "set_epoch"):
            obj.set_epoch(0)  # the trainer sets its own epoch again before it iterates
    rng = capture_rng_state()  # a plain shuffling sampler draws its seed from torch's RNG
    try:
        lengths = getattr(batches, "lengths", None)
        dataset, collate = getattr(loader, "dataset", None), getattr(loader, "collate_fn", None)
        if lengths is not None and dataset is not None and collate is not None:
            indices = max(batches, key=lambda idx: len(idx) * max((lengths[i] for i in idx), default=0))
            rows = (
                dataset.__getitems__(list(indices))
                if hasattr(dataset, "__getitems__")
                else [dataset[i] for i in indices]
            )
            return collate(rows), MEASURED_LARGEST
        return next(iter(loader)), MEASURED_FIRST
    finally:
        restore_rng_state(rng)


def _shape(inputs: Any) -> list[int] | None:
    tensor = inputs.get("input_ids") if isinstance(inputs, dict) or hasattr(inputs, "keys") else inputs
    return list(tensor.shape) if isinstance(tensor, torch.Tensor) else None


class RunMemory:
    """What ``measure_before_fit`` measured; ``finish(result, trainer)`` completes the result."""

    def __init__(self, cfg, prepared, precision, seed: int, fresh: bool, step: dict | None, shape, batch: str):
        self._cfg, self._prepared, self._precision, self._seed = cfg, prepared, precision, seed
        self._fresh, self._step, self._shape, self._batch = fresh, step, shape, batch

    def finish(self, result, trainer) -> None:
        """Fill ``result.memory``, ``.parameters``, ``.lora``.

        Usage: ``memory.finish(result, trainer)``
        """
        info = trainer.run_info or {}
        result.parameters = dict(info["parameters"]) if info.get("parameters") else count_parameters(trainer.module)
        result.lora = info.get("lora")
        scope, fresh_steps = "run", None
        device = trainer.device
        if (
            self._fresh and device.type == "cpu" and distributed.world_size() == 1 and result.stop_kind != "interrupt"
        ):  # interrupted: the user is waiting to leave
            from mixft.runs.fresh_process import fresh_peak_rss

            figure = fresh_peak_rss(self._cfg, self._prepared, self._precision, device, self._seed)
            if figure is not None:
                result.peak_memory_bytes, result.start_memory_bytes = figure.peak_bytes, figure.start_bytes
                result.peak_memory_kind = "cpu_rss"
                scope, fresh_steps = "fresh_process", figure.steps
        sharded = _sharded_figures(self._step, trainer, result) if getattr(trainer, "fsdp", False) else None
        if self._step is None:
            return
        record = memory_record(
            self._step, optimizer_state_bytes(trainer.optimizers), result.peak_memory_bytes, result.peak_memory_kind
        )
        record.update(
            device_figure_scope=scope,
            device_figure_steps=fresh_steps,
            measured_batch=self._batch,
            measured_batch_shape=self._shape,
        )
        if sharded:
            record.update(sharded)  # the figures above are this process's (rank 0's) own
        result.memory = record


def _sharded_figures(step: dict | None, trainer, result) -> dict[str, Any]:
    """A sharded (FSDP) run's ``memory.sharding``, ``memory.whole_model`` (what one process would hold of
    the same tensors) and ``memory.ranks`` (each process's own figures); a collective: every process calls it."""
    mine = None
    if step is not None:
        mine = {
            "parameters": step["parameters"],
            "gradients": step["gradients"],
            "optimizer_state": optimizer_state_bytes(trainer.optimizers),
            "saved_activations_peak": step["saved_activations_peak"],
            "device_figure": result.peak_memory_bytes,
            "device_figure_kind": result.peak_memory_kind,
        }
    ranks = distributed.all_gather_objects(mine)
    whole = dict((step or {}).get("whole_model") or {})
    whole["optimizer_state"] = optimizer_state_bytes(trainer.optimizers, whole=True)
    return {"sharding": {"kind": "fsdp", "world_size": distributed.world_size()}, "whole_model": whole, "ranks": ranks}


def measure_before_fit(cfg, prepared, trainer, precision, seed: int, *, fresh: bool) -> RunMemory:
    """Measure one training step's memory on the run's first micro-batch, before ``trainer.fit()``.

    ``fresh``: the process runs several runs, so a CPU device figure must come from a fresh
    process (see the module docstring). A failure to measure is logged, never fatal.

    Usage: ``memory = measure_before_fit(cfg, prepared, trainer, precision, seed, fresh=not single)``
    """
    step = shape = which = None
    try:
        batch, which = _measured_batch(trainer.train_loader)
        inputs, labels = split_batch(batch, trainer.device)
        del batch
        shape = _shape(inputs)
        module, was_training = trainer.module, trainer.module.training
        module.train()  # as in training: dropout saves its masks
        try:
            step = measure_step_memory(module, trainer.loss_fn, inputs, labels, trainer.autocast, trainer.device)
        finally:
            module.train(was_training)
        del inputs, labels
    except StopIteration:
        logger.debug("no training batch: no memory breakdown")
    except RuntimeError as e:  # a batch too large is the training loop's to explain, in one line
        logger.warning("could not measure the memory breakdown: %s", str(e).splitlines()[0][:160])
    return RunMemory(cfg, prepared, precision, seed, fresh, step, shape, which)
