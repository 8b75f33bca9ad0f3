"""BestModel and EarlyStopping driven by synthetic evaluations on a tiny module."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from mixft.callbacks.best import BestModel, EarlyStopping, greater_is_better
from mixft.errors import UsageError
from mixft.train.hooks import StopTraining
from mixft.train.state import TrainState


class FakeTrainer(SimpleNamespace):
    """What the callbacks read: ``module`` and ``state`` (step, epoch, eval_history)."""


def make_trainer() -> FakeTrainer:
    torch.manual_seed(0)
    return FakeTrainer(module=nn.Linear(3, 2), state=TrainState())


def evaluate_at(trainer, callbacks, step: int, metrics: dict, epoch: int = 0) -> None:
    """Move the 'training' on to ``step`` (new weights), record an evaluation, call the hook."""
    with torch.no_grad():
        for p in trainer.module.parameters():
            p.add_(float(step))  # every step leaves different weights behind
    trainer.state.step, trainer.state.epoch = step, epoch
    trainer.state.eval_history.append({"epoch": epoch, "step": step, **metrics})
    for cb in callbacks:
        cb.on_evaluate(trainer, metrics)


def test_direction_by_name():
    assert greater_is_better("accuracy") and greater_is_better("f1") and greater_is_better("pearsonr")
    assert not greater_is_better("loss") and not greater_is_better("eval_loss") and not greater_is_better("mse")


def test_best_is_not_last_and_restore_brings_back_the_best_weights():
    trainer = make_trainer()
    best = BestModel("accuracy")
    snapshots = {}
    for step, acc in [(10, 0.6), (20, 0.8), (30, 0.7), (40, 0.75)]:
        evaluate_at(trainer, [best], step, {"loss": 1.0 / step, "accuracy": acc}, epoch=step // 20)
        snapshots[step] = {k: v.clone() for k, v in trainer.module.state_dict().items()}
    assert best.summary() == {"step": 20, "epoch": 1, "metric": "accuracy", "metrics": {"loss": 0.05, "accuracy": 0.8}}
    assert best.evaluations == 4
    last = trainer.module.weight.clone()
    assert best.restore(trainer)
    assert not torch.equal(trainer.module.weight, last)
    for k, v in trainer.module.state_dict().items():
        assert torch.equal(v, snapshots[20][k])


def test_loss_is_lower_is_better():
    trainer = make_trainer()
    best = BestModel("loss")
    for step, loss in [(1, 0.9), (2, 0.4), (3, 0.5)]:
        evaluate_at(trainer, [best], step, {"loss": loss})
    assert best.step == 2 and best.best_value == 0.4


def test_weights_are_a_copy_not_the_live_tensors():
    trainer = make_trainer()
    best = BestModel("accuracy")
    evaluate_at(trainer, [best], 1, {"accuracy": 0.5})
    kept = best.weights["weight"].clone()
    with torch.no_grad():
        trainer.module.weight.mul_(3.0)  # the next optimizer step
    assert torch.equal(best.weights["weight"], kept)


def test_nan_metric_never_becomes_best():
    trainer = make_trainer()
    best = BestModel("accuracy")
    evaluate_at(trainer, [best], 1, {"accuracy": float("nan")})
    assert best.summary() is None and not best.restore(trainer)
    evaluate_at(trainer, [best], 2, {"accuracy": 0.1})
    evaluate_at(trainer, [best], 3, {"accuracy": float("nan")})
    assert best.step == 2


def test_unknown_metric_is_one_line_usage_error():
    trainer = make_trainer()
    with pytest.raises(
        UsageError, match=r"--metric-for-best f1: the evaluation has no such metric \(it has: accuracy, loss\)"
    ):
        evaluate_at(trainer, [BestModel("f1")], 1, {"loss": 0.3, "accuracy": 0.5})


def test_early_stopping_fires_at_the_patience_th_evaluation_without_improvement():
    trainer = make_trainer()
    best, stop = BestModel("accuracy"), EarlyStopping("accuracy", patience=2)
    # improves at 1, 2 and 4; then 5 and 6 do not: the stop comes at evaluation 6, not before.
    sequence = [0.5, 0.6, 0.55, 0.7, 0.7, 0.65, 0.9]
    fired_at = None
    for i, acc in enumerate(sequence, start=1):
        try:
            evaluate_at(trainer, [best, stop], i * 10, {"accuracy": acc})
        except StopTraining as e:
            fired_at, error = i, e
            break
    assert fired_at == 6
    assert error.kind == "early_stopping"
    assert "accuracy did not improve for 2 evaluation(s)" in str(error) and "at step 40" in str(error)
    assert best.step == 40  # the best model callback saw the evaluation that stopped the run


def test_early_stopping_patience_must_be_positive():
    with pytest.raises(UsageError, match="--early-stopping-patience must be a positive integer, got 0"):
        EarlyStopping("loss", patience=0)


def test_an_epoch_end_is_not_a_second_evaluation():
    trainer = make_trainer()
    best = BestModel("accuracy")
    evaluate_at(trainer, [best], 1, {"accuracy": 0.5})  # on_evaluate
    best.on_epoch_end(trainer, {"accuracy": 0.5})  # the same evaluation, at the epoch end
    best.on_evaluate(trainer, {})  # no evaluation loader: nothing to judge
    assert best.evaluations == 1


def _round_trip(obj):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def test_state_round_trips_bit_exactly_through_a_checkpoint():
    trainer = make_trainer()
    best, stop = BestModel("loss"), EarlyStopping("loss", patience=3)
    for step, loss in [(1, 0.7), (2, 0.30000000000000004), (3, 0.5)]:
        evaluate_at(trainer, [best, stop], step, {"loss": loss, "accuracy": step / 7})
    saved = _round_trip({"best": best.state_dict(), "stop": stop.state_dict()})

    best2, stop2 = BestModel("loss"), EarlyStopping("loss", patience=3)
    best2.load_state_dict(saved["best"])
    stop2.load_state_dict(saved["stop"])
    assert best2.best_value == best.best_value == 0.30000000000000004
    assert best2.summary() == best.summary()
    assert best2.evaluations == 3 and stop2.without_improvement == 1
    assert best2.weights.keys() == best.weights.keys()
    for k in best.weights:
        assert torch.equal(best2.weights[k], best.weights[k]) and best2.weights[k].dtype == best.weights[k].dtype
    # The resumed callbacks go on exactly as the originals: two more non-improvements stop both.
    trainer2 = make_trainer()
    for cb in (stop, stop2):
        trainer2.state = TrainState()
        evaluate_at(trainer2, [cb], 4, {"loss": 0.31})
        with pytest.raises(StopTraining):
            evaluate_at(trainer2, [cb], 5, {"loss": 0.4})


def test_resuming_with_another_metric_is_refused():
    saved = BestModel("loss").state_dict()
    with pytest.raises(UsageError, match="resume with the same --metric-for-best"):
        BestModel("accuracy").load_state_dict(saved)


def test_in_a_real_fit_early_stopping_ends_the_run_and_the_best_model_comes_back():
    from mixft.train.trainer import Trainer

    g = torch.Generator().manual_seed(0)
    x = torch.randn(24, 5, generator=g)
    y = (x[:, 0] > 0).long()
    loader = [(x[i : i + 4], y[i : i + 4]) for i in range(0, 24, 4)]  # 6 steps per epoch
    torch.manual_seed(0)
    # Judged "higher is better" on the eval loss, which training lowers: the first evaluation
    # stays the best and the stop comes at evaluation 1 + patience.
    best = BestModel("loss", greater=True)
    stop = EarlyStopping("loss", patience=2, greater=True)
    trainer = Trainer(
        nn.Linear(5, 2),
        lambda p: torch.optim.SGD(p, lr=0.5),
        nn.CrossEntropyLoss(),
        loader,
        eval_loader=loader,
        device="cpu",
        epochs=10,
        callbacks=[best, stop],
    )
    result = trainer.fit()
    losses = [e["loss"] for e in result.eval_history]
    assert losses == sorted(losses, reverse=True) and len(set(losses)) == 3  # the premise: each lower
    assert result.stop_kind == "early_stopping" and result.steps == 18
    assert best.step == 6 and best.best_value == losses[0]
    assert best.restore(trainer)
    assert trainer.evaluate()["loss"] == pytest.approx(losses[0], rel=1e-6)


# ---------------------------------------------------------------- undefined metrics and timings (issue 30)


def test_undefined_values_never_rank_and_early_stopping_counts_only_after_a_defined_best(caplog):
    trainer = make_trainer()
    best, stop = BestModel("pearsonr"), EarlyStopping("pearsonr", patience=1)
    nan = float("nan")
    for step in (2, 4, 6):  # constant labels: no correlation yet, no patience used up, no exception
        evaluate_at(
            trainer,
            [best, stop],
            step,
            {"loss": 1.0, "pearsonr": nan, "undefined": {"pearsonr": "the labels are constant (all 2.5)"}},
        )
    assert best.summary() is None and stop.without_improvement == 0
    assert (
        sum(
            "pearsonr is undefined at step 2 (the labels are constant (all 2.5))" in r.getMessage()
            for r in caplog.records
        )
        == 1
    )  # said once per run
    evaluate_at(trainer, [best, stop], 8, {"loss": 0.9, "pearsonr": 0.5})
    assert best.summary()["step"] == 8
    with pytest.raises(StopTraining, match=r"best 0\.5 at step 8"):  # an undefined value after one: no improvement
        evaluate_at(trainer, [best, stop], 10, {"loss": 0.9, "pearsonr": None})


@pytest.mark.parametrize("metric", ["time_s", "samples_per_s", "eval_time_s"])
def test_a_timing_never_ranks_evaluations(metric):
    with pytest.raises(UsageError, match=f"--metric-for-best {metric} is a timing, not a measure of the model"):
        BestModel(metric)
    with pytest.raises(UsageError, match="is a timing"):
        EarlyStopping(metric, patience=2)


def test_ties_with_the_best_are_counted():
    trainer = make_trainer()
    best = BestModel("accuracy")
    for step, acc in [(2, 0.5), (4, 0.5), (6, 0.4), (8, 0.5)]:
        evaluate_at(trainer, [best], step, {"loss": 1.0, "accuracy": acc})
    assert best.summary()["step"] == 2 and best.ties == 2
    restored = BestModel("accuracy")
    restored.load_state_dict(best.state_dict())
    assert restored.ties == 2
