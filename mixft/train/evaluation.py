"""Evaluation and prediction for a ``Trainer``: loss, metrics and inference speed under its precision.

The trainer's ``evaluate``, ``evaluate_only`` and ``predict`` methods call these; use those::

    trainer.evaluate()["accuracy"]           # mean loss + metrics over trainer.eval_loader
    trainer.evaluate_only()                  # a RunResult without training
    logits = trainer.predict(test_loader)    # fp32 outputs on the CPU

Every function runs under the precision's TF32 setting and restores the process's own, in
inference mode, with the model in ``eval()`` (its training mode restored afterwards).
Under data parallelism each rank evaluates its shard; losses are summed and predictions
gathered, so every rank returns the global figures.
"""

from __future__ import annotations

from typing import Any

import torch

from mixft import distributed
from mixft.amp.precision import configure_matmul
from mixft.batch import batch_size, forward, split_batch
from mixft.data.batching import in_input_order
from mixft.metrics.task import UNDEFINED_KEY, undefined_reasons
from mixft.results import RunResult
from mixft.train.measure import Stopwatch
from mixft.train.meter import TrainMeter
from mixft.train.state import plain


def evaluate(trainer, loader=None) -> dict[str, float]:
    """Mean loss (and the metrics, with ``trainer.predict_fn``) over ``loader`` (default: the eval loader).

    Also times itself (device-synchronised): ``time_s`` and ``samples_per_s`` are the
    inference speed at this precision, so runs at two precisions give its speedup.

    Usage: ``evaluate(trainer)["accuracy"]``
    """
    loader = trainer.eval_loader if loader is None else loader
    if loader is None:
        return {}
    with configure_matmul(trainer.precision, trainer.device), torch.inference_mode():
        return _evaluate(trainer, loader)


def _evaluate(trainer, loader) -> dict[str, float]:
    device = trainer.device
    was_training = trainer.model.training
    trainer.model.eval()
    # The bare module: DDP's forward may broadcast buffers, a collective that would
    # hang when ranks hold different numbers of evaluation batches.
    module = trainer.module
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    count = 0
    predictions, references = [], []
    clock = Stopwatch(device)
    try:
        with clock:
            for batch, real in _batches(trainer, loader):
                inputs, labels = split_batch(batch, device)
                with trainer.autocast():
                    outputs = forward(module, inputs)
                    loss = trainer.loss_fn(outputs, labels)
                if not real:  # a sharded model's extra forward (see _batches): nothing to count
                    continue
                n = batch_size(labels)
                loss_sum += loss.double() * n
                count += n
                if trainer.predict_fn is not None:
                    predictions.append(trainer.predict_fn(outputs).detach())
                    references.append(labels.detach())
    finally:
        trainer.model.train(was_training)
        _reshard(trainer)
    # Every rank evaluated its shard: sum the losses, gather the predictions.
    loss_sum = distributed.all_reduce_sum(loss_sum)
    count = int(distributed.all_reduce_sum(torch.tensor(count, device=device)).item())
    metrics = {"loss": float(loss_sum.item() / max(count, 1))}
    elapsed_sum = distributed.all_reduce_sum(torch.tensor(clock.elapsed_s, device=device))
    elapsed = max(float(elapsed_sum.item()) / distributed.world_size(), 1e-9)
    metrics["time_s"] = elapsed
    metrics["samples_per_s"] = count / elapsed
    if trainer.predict_fn is not None:
        preds, refs = gather_predictions(predictions, references)
        # Kept for per-example agreement between precisions (mixft.report.agreement): the
        # last evaluation's predictions are those of the run's final ``eval``, in the eval set's order.
        trainer.last_eval_predictions = (in_input_order(loader, preds).tolist(), in_input_order(loader, refs).tolist())
        metrics.update(_metrics(preds, refs, trainer.metric))
    return metrics


def gather_predictions(predictions: list[torch.Tensor], references: list[torch.Tensor]):
    """Every rank's predictions and references, concatenated in eval order: labels (long) for
    classification (BCE targets arrive as 0./1. floats), fp32 values for regression (bf16
    outputs would round the metric's inputs).

    Usage: ``preds, refs = gather_predictions([torch.tensor([1, 0])], [torch.tensor([1., 1.])])``
    """
    local_preds = torch.cat(predictions).reshape(-1).cpu() if predictions else torch.empty(0, dtype=torch.long)
    local_refs = torch.cat(references).reshape(-1).cpu() if references else torch.empty(0, dtype=torch.long)
    kind = torch.long if not local_preds.is_floating_point() else torch.float32
    preds = torch.cat(distributed.all_gather_objects(local_preds.to(kind)))
    refs = torch.cat(distributed.all_gather_objects(local_refs.to(kind)))
    return preds, refs


def compute_metrics(predictions: list[torch.Tensor], references: list[torch.Tensor], metric=None) -> dict[str, Any]:
    """The task's metrics over every rank's predictions and references.

    Integer predictions are labels (classification): references become labels too.
    Float predictions are values (regression): both stay floats. ``metric`` is any object
    with ``compute(predictions=list, references=list) -> dict``; without one,
    classification reports ``accuracy`` and regression nothing.

    Usage: ``compute_metrics([torch.tensor([1, 0])], [torch.tensor([1., 1.])])  # {"accuracy": 0.5}``
    """
    return _metrics(*gather_predictions(predictions, references), metric)


def _metrics(preds: torch.Tensor, refs: torch.Tensor, metric=None) -> dict[str, Any]:
    if metric is not None:
        predictions, references = preds.tolist(), refs.tolist()
        computed = {k: plain(v) for k, v in metric.compute(predictions=predictions, references=references).items()}
        # A NaN (a correlation of constant predictions) is kept, with the reason beside it for people.
        reasons = undefined_reasons(computed, predictions, references)
        return {**computed, UNDEFINED_KEY: reasons} if reasons else computed
    if not preds.is_floating_point():
        return {"accuracy": float((preds == refs).double().mean())}
    return {}


def evaluate_only(trainer) -> RunResult:
    """Evaluate without training: a RunResult with ``steps == 0`` (a saved model at this precision).

    Its ``eval`` holds the metrics and the inference speed, its peak memory is that of
    inference alone.

    Usage: ``evaluate_only(Trainer(model, opt, loss_fn, [], eval_loader=test, precision="bf16"))``
    """
    meter = TrainMeter(trainer.device)
    with configure_matmul(trainer.precision, trainer.device), meter.memory:
        metrics = evaluate(trainer)
    trainer.state.eval_history.append({"epoch": 0, "step": 0, **metrics})
    return meter.result(trainer, None)


def predict(trainer, loader) -> torch.Tensor:
    """Model outputs for every example of ``loader``, computed under autocast, returned fp32 on CPU, in the
    dataset's order (a ``make_loader(..., shuffle=False)`` loader batches longest first: its outputs are put back).

    Usage: ``logits = predict(trainer, test_loader)``
    """
    was_training = trainer.model.training
    trainer.model.eval()
    outs = []
    try:
        with configure_matmul(trainer.precision, trainer.device), torch.inference_mode():
            for batch, real in _batches(trainer, loader):
                inputs, _ = split_batch(batch, trainer.device)
                with trainer.autocast():
                    outputs = forward(trainer.module, inputs)
                if real:
                    outs.append(outputs.float().cpu())
    finally:
        trainer.model.train(was_training)
        _reshard(trainer)
    return in_input_order(loader, torch.cat(outs)) if outs else torch.empty(0)


def _batches(trainer, loader):
    """``(batch, real)`` pairs of ``loader``; under FSDP padded so every process runs as many forwards
    (each forward all-gathers weights from all of them: ``mixft.train.fsdp.lockstep_batches``)."""
    if getattr(trainer, "fsdp", False):
        from .fsdp import lockstep_batches

        return lockstep_batches(loader)
    return ((batch, True) for batch in loader)


def _reshard(trainer) -> None:
    # FSDP keeps the root's weights gathered after a forward that no backward follows: give
    # them back, or every process would hold them whole (and parameters() would not be shards).
    if getattr(trainer, "fsdp", False):
        trainer.module.reshard()
