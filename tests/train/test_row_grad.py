"""mixft.train.row_grad: row gradients in a kept buffer give the dense backward's exact bits."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from mixft.train.hooks import Callback
from mixft.train.row_grad import RowGradEmbedding, coalesced_rows, use_row_embedding_grad
from mixft.train.trainer import Trainer


class TwoLookups(nn.Module):
    """Looks its table up twice per forward (a siamese encoder does): two sparse gradients per backward."""

    def __init__(self):
        super().__init__()
        self.table = nn.Embedding(50, 8, padding_idx=0)
        self.head = nn.Linear(8, 1)

    def forward(self, a, b):
        return self.head(torch.tanh(self.table(a)).sum(1) * self.table(b).mean(1))


def _train(model, steps=4, micro_batches=3, seed=0):
    """AdamW steps of ``micro_batches`` accumulated backwards each; the gradient of each step's end."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    grads = []
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        for _ in range(micro_batches):
            a = torch.randint(0, 6, (4, 7), generator=gen)  # few ids: many repeats, padding id 0 among them
            b = torch.randint(0, 50, (4, 5), generator=gen)
            model(a, b).sum().backward()
        grads.append(model.table.weight.grad.clone())
        opt.step()
        opt.zero_grad(set_to_none=True)
    return grads


def test_row_gradients_equal_the_dense_backward_bit_for_bit_over_steps_and_accumulation():
    torch.manual_seed(0)
    dense = TwoLookups()
    rows = copy.deepcopy(dense)
    handle = use_row_embedding_grad(rows)
    assert handle.modules == [rows.table] and type(rows.table) is RowGradEmbedding
    for g_dense, g_rows in zip(_train(dense), _train(rows)):
        assert not g_rows.is_sparse  # the optimizer, clip and scaler see a dense .grad
        assert torch.equal(g_dense, g_rows)
        assert g_rows[0].abs().sum() == 0  # the padding row gets no gradient
    for p, q in zip(dense.parameters(), rows.parameters()):
        assert torch.equal(p, q)


def test_the_buffer_is_kept_and_only_last_steps_rows_are_cleaned():
    torch.manual_seed(0)
    model = TwoLookups()
    use_row_embedding_grad(model)
    model(torch.tensor([[1, 2]]), torch.tensor([[3]])).sum().backward()
    assert set(model.table.weight.grad.abs().sum(1).nonzero().flatten().tolist()) == {1, 2, 3}
    first = model.table.weight.grad.data_ptr()  # the address only: a kept tensor would not be reused
    model.table.weight.grad = None  # zero_grad(set_to_none=True)
    model(torch.tensor([[4]]), torch.tensor([[5]])).sum().backward()
    second = model.table.weight.grad
    assert second.data_ptr() == first  # one buffer for the run: no fresh vocabulary-sized tensor
    assert set(second.abs().sum(1).nonzero().flatten().tolist()) == {4, 5}  # rows 1-3 cleaned


def test_coalesced_rows_sums_repeats_in_token_order():
    ids = torch.tensor([3, 1, 3, 3])
    values = torch.tensor([[1e8], [2.0], [1.0], [-1e8]])
    grad = coalesced_rows(ids, values, torch.Size([5, 1]))
    assert grad.is_coalesced() and grad._indices()[0].tolist() == [1, 3]
    dense = torch.zeros(5, 1).index_add_(0, ids, values)  # torch's dense backward order
    assert torch.equal(grad.to_dense(), dense)


def test_eval_and_no_grad_use_the_plain_lookup_and_remove_restores_everything():
    model = TwoLookups()
    before = model(torch.tensor([[1, 2]]), torch.tensor([[3]]))
    handle = use_row_embedding_grad(model)
    with torch.no_grad():
        assert torch.equal(model(torch.tensor([[1, 2]]), torch.tensor([[3]])), before)
    handle.remove()
    handle.remove()  # idempotent
    assert type(model.table) is nn.Embedding
    model(torch.tensor([[1, 2]]), torch.tensor([[3]])).sum().backward()
    assert not model.table.weight.grad.is_sparse and model.table.weight.grad.shape == (50, 8)


def test_tied_frozen_and_max_norm_embeddings_are_left_alone():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = nn.Embedding(10, 4)
            self.out = nn.Linear(4, 10, bias=False)
            self.out.weight = self.inp.weight  # a tied output layer adds a dense gradient

    tied = Tied()
    frozen = nn.Embedding(10, 4)
    frozen.weight.requires_grad_(False)
    renormed = nn.Embedding(10, 4, max_norm=1.0)
    for model in (tied, frozen, renormed, nn.Embedding(10, 4, scale_grad_by_freq=True)):
        assert not use_row_embedding_grad(model).active


def _tiny_bert_classifier(seed=0):
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=200,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
    )

    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = BertModel(config)
            self.head = nn.Linear(32, 1)

        def forward(self, input_ids, attention_mask):
            return self.head(self.encoder(input_ids=input_ids, attention_mask=attention_mask).pooler_output).squeeze(-1)

    return Classifier()


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_bert_trained_by_the_trainer_ends_with_the_same_weights(precision):
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(1, 200, (24, 10), generator=gen)
    ids[:, 7:] = 0  # padding
    batches = [
        {
            "input_ids": ids[i : i + 8],
            "attention_mask": (ids[i : i + 8] != 0).long(),
            "labels": torch.randint(0, 2, (8,), generator=gen).float(),
        }
        for i in range(0, 24, 8)
    ]
    weights = []
    for rows in (False, True):
        model = _tiny_bert_classifier()
        if rows:
            assert use_row_embedding_grad(model).active
        trainer = Trainer(
            model,
            lambda p: torch.optim.AdamW(p, lr=1e-3),
            nn.BCEWithLogitsLoss(),
            batches,
            precision=precision,
            device="cpu",
            grad_accum=2,
            epochs=2,
            seed=0,
        )
        trainer.fit()
        weights.append([p.detach().clone() for p in model.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*weights))


def test_the_run_layer_gives_cpu_runs_row_gradients(tiny_bert_dir, tmp_path):
    from mixft.amp.precision import resolve_precision
    from mixft.config.run_config import RunConfig
    from mixft.recipe import get_recipe
    from mixft.runs.build import build_trainer

    recipe = get_recipe("bert-sst2")
    cfg = (
        RunConfig(
            recipe="bert-sst2",
            model=str(tiny_bert_dir),
            max_train_samples=16,
            max_eval_samples=8,
            device="cpu",
            output_dir=str(tmp_path),
        )
        .with_defaults(recipe.DEFAULTS)
        .validate()
    )
    device = torch.device("cpu")
    parts = recipe.build(cfg, recipe.prepare(cfg), resolve_precision("fp32", device), device, 0)
    trainer = build_trainer(parts, cfg, precision="fp32", device=device, seed=0)
    kinds = {type(m) for m in trainer.module.modules() if isinstance(m, nn.Embedding)}
    assert kinds == {RowGradEmbedding}
    assert trainer.cpu_swaps["row_embedding_grad"].modules == [
        m for m in trainer.module.modules() if isinstance(m, nn.Embedding)
    ]


def test_a_weight_also_used_densely_gets_the_dense_gradients():
    class AlsoOutput(nn.Module):
        """Uses its table as an output matrix in some forwards (a dense gradient for every row)."""

        def __init__(self):
            super().__init__()
            self.table = nn.Embedding(30, 4)

        def forward(self, ids, project=False):
            h = self.table(ids).mean(1)
            return h @ self.table.weight.t() if project else h

    torch.manual_seed(0)
    dense = AlsoOutput()
    rows = copy.deepcopy(dense)
    use_row_embedding_grad(rows)
    ids = torch.tensor([[1, 2]])
    for model in (dense, rows):
        model(ids).sum().backward()
        model(ids, project=True).sum().backward()  # second micro-batch: dense into every row
    assert torch.equal(dense.table.weight.grad, rows.table.weight.grad)
    for model in (dense, rows):
        model.table.weight.grad = None
        model(torch.tensor([[3]])).sum().backward()
    assert torch.equal(dense.table.weight.grad, rows.table.weight.grad)  # nothing left from the dense one


def test_a_loop_that_zeroes_in_place_keeps_exact_gradients():
    torch.manual_seed(0)
    dense = TwoLookups()
    rows = copy.deepcopy(dense)
    use_row_embedding_grad(rows)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (dense, rows)]
    gen = torch.Generator().manual_seed(4)
    for _ in range(30):
        a, b = torch.randint(0, 8, (3, 4), generator=gen), torch.randint(0, 8, (3, 2), generator=gen)
        for model, opt in zip((dense, rows), opts):
            opt.zero_grad(set_to_none=False)  # .grad is never None: the buffer lives on
            model(a, b).sum().backward()
            opt.step()
        assert torch.equal(dense.table.weight.grad, rows.table.weight.grad)


# ------------------------------------------------------------ writes outside backward: the dense path's semantics
# (issue 28: the kept buffer used to be cleaned only in the rows the last backward wrote, so a
# value written by anything else into another row survived into every later step)
class WriteEveryStep(Callback):
    """Calls ``write(trainer, step)`` on the embedding's gradient before each optimizer step."""

    def __init__(self, write):
        self.write = write

    def on_before_optimizer_step(self, trainer):
        self.write(trainer.module.table.weight.grad, trainer.state.step + 1)


def _batches(steps: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    # ids 1-9 only: rows 10-49 of the table are never used by a batch
    return [
        {
            "a": torch.randint(1, 10, (4, 7), generator=gen),
            "b": torch.randint(1, 10, (4, 5), generator=gen),
            "labels": torch.randn(4, 1, generator=gen),
        }
        for _ in range(steps)
    ]


def _train_dense_and_rows(make_callbacks, precision="fp32", steps=12, seed=0, model_seed=0, max_grad_norm=1.0):
    """The same run twice, dense embedding gradients and row gradients: (RunResult, weights, callbacks) each."""
    out = []
    for rows in (False, True):
        torch.manual_seed(model_seed)
        model = TwoLookups()
        callbacks = make_callbacks()
        trainer = Trainer(
            model,
            lambda p: torch.optim.AdamW(p, lr=1e-2),
            nn.MSELoss(),
            _batches(steps, seed),
            precision=precision,
            device="cpu",
            seed=seed,
            callbacks=callbacks,
            max_grad_norm=max_grad_norm,
        )
        if rows:
            assert use_row_embedding_grad(model).active
        result = trainer.fit()
        out.append((result, [p.detach().clone() for p in model.parameters()], callbacks))
    return out


def _same_weights(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b))


def test_an_inf_written_into_an_unused_row_skips_only_its_own_step():
    def inf_at_step_4(grad, step):
        if step == 4:
            grad[40, 0] = float("inf")

    (dense, w_dense, _), (rows, w_rows, _) = _train_dense_and_rows(lambda: [WriteEveryStep(inf_at_step_4)])
    assert dense.skipped_steps == 1 and rows.skipped_steps == 1  # was: steps 4-12 skipped with row gradients
    assert _same_weights(w_dense, w_rows)


def test_fp16_loss_scale_after_an_inf_in_an_unused_row_follows_the_dense_path():
    def inf_at_step_4(grad, step):
        if step == 4:
            grad[40, 0] = float("inf")

    (dense, w_dense, _), (rows, w_rows, _) = _train_dense_and_rows(
        lambda: [WriteEveryStep(inf_at_step_4)], precision="fp16"
    )
    # (the first steps overflow fp16 at the initial scale in both; step 4 is the inf's own)
    assert rows.history["skipped"] == dense.history["skipped"] and dense.history["skipped"][3:5] == [True, False]
    assert rows.history["loss_scale"] == dense.history["loss_scale"]  # was: halved every step from step 4 on
    assert _same_weights(w_dense, w_rows)


@pytest.mark.parametrize("seed", range(8))
def test_injected_nonfinite_gradients_and_collapse_detection_follow_the_dense_path(seed):
    from mixft.callbacks.faults import CollapseDetector, InjectNonFinite

    def callbacks():
        return [InjectNonFinite(0.25, seed=seed), CollapseDetector(diagnose=False)]  # the CLI's defaults

    (dense, w_dense, cb_dense), (rows, w_rows, cb_rows) = _train_dense_and_rows(callbacks, steps=30, seed=seed)
    assert cb_dense[0].injected_steps == cb_rows[0].injected_steps and cb_rows[0].injected_steps
    assert (rows.stopped_early, rows.steps, rows.skipped_steps) == (
        dense.stopped_early,
        dense.steps,
        dense.skipped_steps,
    )
    assert dense.stopped_early is None  # the dense path trains all 30 steps
    assert _same_weights(w_dense, w_rows)


@pytest.mark.parametrize("max_grad_norm", [1.0, None])  # clipping, or no write by the trainer at all
@pytest.mark.parametrize("through", ["tensor", "data"])
def test_gradient_noise_in_unused_rows_does_not_accumulate(through, max_grad_norm):
    # Fresh noise each step, in every row; through .data too, whose writes torch does not count.
    def noise(grad, step):
        gen = torch.Generator().manual_seed(step)
        target = grad.data if through == "data" else grad
        target.add_(torch.randn(grad.shape, generator=gen) * 1e-3)

    (_, w_dense, _), (_, w_rows, _) = _train_dense_and_rows(
        lambda: [WriteEveryStep(noise)], max_grad_norm=max_grad_norm
    )
    assert _same_weights(w_dense, w_rows)


def test_a_gradient_kept_from_an_earlier_step_is_not_overwritten():
    torch.manual_seed(0)
    model = TwoLookups()
    use_row_embedding_grad(model)
    model(torch.tensor([[1, 2]]), torch.tensor([[3]])).sum().backward()
    kept = model.table.weight.grad
    view = model.table.weight.grad[1:3]
    before = kept.clone()
    model.table.weight.grad = None  # as zero_grad(set_to_none=True); the caller still holds the old one
    model(torch.tensor([[4]]), torch.tensor([[5]])).sum().backward()
    assert model.table.weight.grad is not kept and torch.equal(kept, before)  # as the dense path leaves it
    del kept
    model.table.weight.grad = None
    model(torch.tensor([[6]]), torch.tensor([[7]])).sum().backward()
    assert torch.equal(view, before[1:3])  # a view keeps its memory too
    assert set(model.table.weight.grad.abs().sum(1).nonzero().flatten().tolist()) == {6, 7}
