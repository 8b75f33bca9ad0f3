"""--lr-scheduler, --warmup-*, --weight-decay, --label-smoothing, --class-weights, --gradient-checkpointing
through the real CLI and the recipes, on tiny models: each changes what it should and nothing else.
"""

from __future__ import annotations

import json

import pytest
import torch

from mixft.amp.precision import PRECISIONS
from mixft.cli.main import main
from mixft.config.run_config import RunConfig
from recipes import bert_sst2, text_classification
from tests.cli_runs import text_classification_args
from tests.recipes.test_text_classification import NAMES, regression_tsv, three_class_csv, write_csv
from tests.tiny_models import TOY_ROWS

LR = 5e-5  # bert-sst2's default
STEPS = 8  # tiny_data_dir: 16 sentences, batches of 4, 2 epochs


def sst2_run(tmp_path, name, model, data, *extra) -> dict:
    out = tmp_path / name
    code = main(
        [
            "--recipe",
            "bert-sst2",
            "--model",
            str(model),
            "--data-dir",
            str(data),
            "--batch-size",
            "4",
            "--epochs",
            "2",
            "--output-dir",
            str(out),
            "--no-progress",
            *extra,
        ]
    )
    assert code == 0
    (run,) = json.loads((out / "results.json").read_text())["runs"]
    return run


def scheduled_lrs(make, steps: int = STEPS) -> list[float]:
    """transformers' own schedule: the LR before each of ``steps`` optimizer steps."""
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=LR)
    sched = make(opt)
    seen = []
    for _ in range(steps):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return seen


def test_schedules_in_a_real_runs_history(tmp_path, tiny_bert_dir, tiny_data_dir, capsys):
    from transformers import (
        get_constant_schedule_with_warmup,
        get_cosine_schedule_with_warmup,
        get_cosine_with_hard_restarts_schedule_with_warmup,
        get_linear_schedule_with_warmup,
    )

    default = sst2_run(tmp_path, "default", tiny_bert_dir, tiny_data_dir)
    assert "  schedule   " not in capsys.readouterr().out  # the defaults go unsaid in the header
    cosine = sst2_run(
        tmp_path, "cosine", tiny_bert_dir, tiny_data_dir, "--lr-scheduler", "cosine", "--warmup-steps", "2"
    )
    assert "  schedule   cosine, 2 warm-up steps, weight decay 0.01\n" in capsys.readouterr().out
    linear_half = sst2_run(tmp_path, "linear", tiny_bert_dir, tiny_data_dir, "--warmup-ratio", "0.5")
    warm_constant = sst2_run(
        tmp_path,
        "constant",
        tiny_bert_dir,
        tiny_data_dir,
        "--lr-scheduler",
        "constant_with_warmup",
        "--warmup-steps",
        "3",
    )

    # Today's schedule is unchanged: linear, warm-up int(0.1 * 8) = 0 steps.
    assert default["history"]["lr"] == pytest.approx(
        scheduled_lrs(lambda o: get_linear_schedule_with_warmup(o, 0, STEPS))
    )
    assert cosine["history"]["lr"] == pytest.approx(
        scheduled_lrs(lambda o: get_cosine_schedule_with_warmup(o, 2, STEPS))
    )
    assert linear_half["history"]["lr"] == pytest.approx(
        scheduled_lrs(lambda o: get_linear_schedule_with_warmup(o, 4, STEPS))
    )
    assert warm_constant["history"]["lr"] == pytest.approx(
        scheduled_lrs(lambda o: get_constant_schedule_with_warmup(o, 3))
    )
    restarts = sst2_run(
        tmp_path, "restarts", tiny_bert_dir, tiny_data_dir, "--lr-scheduler", "cosine_with_restarts", "--lr-cycles", "2"
    )
    assert "  schedule   cosine_with_restarts x 2 cycles, 0.1 warm-up, weight decay 0.01\n" in capsys.readouterr().out
    assert restarts["history"]["lr"] == pytest.approx(
        scheduled_lrs(lambda o: get_cosine_with_hard_restarts_schedule_with_warmup(o, 0, STEPS, num_cycles=2))
    )
    assert restarts["config"]["lr_cycles"] == 2
    # Nothing else: the same model, data and order (the first step's loss is taken before any update).
    for run in (cosine, linear_half, warm_constant, restarts):
        assert run["steps"] == STEPS and run["history"]["loss"][0] == default["history"]["loss"][0]
        assert run["history"]["lr"] != default["history"]["lr"]


def test_gradient_checkpointing_keeps_the_trajectory(tmp_path, tiny_bert_dir, tiny_data_dir, capsys):
    plain = sst2_run(tmp_path, "plain", tiny_bert_dir, tiny_data_dir)
    checkpointed = sst2_run(tmp_path, "ckpt", tiny_bert_dir, tiny_data_dir, "--gradient-checkpointing")
    assert checkpointed["history"]["loss"] == pytest.approx(plain["history"]["loss"], rel=1e-5)
    assert checkpointed["history"]["lr"] == plain["history"]["lr"]
    assert checkpointed["eval"]["accuracy"] == plain["eval"]["accuracy"]
    assert "use_cache" not in capsys.readouterr().err  # no transformers notice about a cache a classifier never uses


def small_cfg(recipe, **kwargs):
    return RunConfig(recipe=recipe.NAME, **kwargs).with_defaults(recipe.DEFAULTS).validate()


def test_weight_decay_reaches_adamw_param_groups(tmp_path, tiny_bert_dir, tiny_data_dir):
    train, dev = three_class_csv(tmp_path)
    cases = [
        (bert_sst2, dict(model=str(tiny_bert_dir), data_dir=str(tiny_data_dir))),
        (text_classification, dict(model=str(tiny_bert_dir), train_file=str(train), validation_file=str(dev))),
    ]
    for recipe, options in cases:
        for decay, expected in ((None, 0.01), (0.0, 0.0), (0.3, 0.3)):  # None: the default, today's 0.01
            cfg = small_cfg(recipe, **options, **({} if decay is None else {"weight_decay": decay}))
            parts = recipe.build(cfg, recipe.prepare(cfg), PRECISIONS["fp32"], torch.device("cpu"), seed=0)
            opt = parts.optimizer(parts.model.parameters())
            matrices = next(g for g in opt.param_groups if g["params"][0].ndim >= 2)
            vectors = next(g for g in opt.param_groups if g["params"][0].ndim < 2)
            assert matrices["weight_decay"] == expected and vectors["weight_decay"] == 0.0, (recipe.NAME, decay)
            assert opt.param_groups[0]["lr"] == cfg.lr


def test_batch_shapes_reach_the_train_and_eval_loaders_of_both_recipes(tmp_path, tiny_bert_dir, tiny_data_dir):
    """--batch-shapes ladder: every training batch's rows and width on the ladder (or at --max-length);
    exact, and evaluation batches either way: each padded batch as wide as its longest example.
    bert-sst2 packs its training batches."""
    from mixft.data.shape_ladder import ladder_up

    # Sentences of 9 to 30 words: lengths between the ladder's steps (up to 8 every length is one).
    rows = [
        (" ".join(TOY_ROWS[i % len(TOY_ROWS)][0].split()[:1] * (9 + (7 * i) % 22)), NAMES[i % 3]) for i in range(24)
    ]
    train = write_csv(tmp_path / "train.csv", ["text", "label"], rows)
    dev = write_csv(tmp_path / "dev.csv", ["text", "label"], rows[:9])
    cases = [
        (bert_sst2, dict(model=str(tiny_bert_dir), data_dir=str(tiny_data_dir))),
        (text_classification, dict(model=str(tiny_bert_dir), train_file=str(train), validation_file=str(dev))),
    ]
    for recipe, options in cases:
        for shapes in ("exact", "ladder"):
            cfg = small_cfg(recipe, **options, batch_size=3, max_length=40, batch_shapes=shapes)
            parts = recipe.build(cfg, recipe.prepare(cfg), PRECISIONS["fp32"], torch.device("cpu"), seed=0)
            assert parts.run_info["batch_shapes"] == shapes
            widened = 0  # training batches the ladder made wider than their longest sentence
            for loader in (parts.train_loader, parts.eval_loader):
                for batch in loader:
                    rows, width = batch["input_ids"].shape
                    packed = "sequence_ids" in batch
                    longest = int(batch["attention_mask"].sum(1).max())
                    if shapes == "ladder" and loader is parts.train_loader:
                        assert width in (ladder_up(width), cfg.max_length), (recipe.NAME, rows, width)
                        assert not packed or ladder_up(rows) == rows, (recipe.NAME, rows, width)
                        widened += width > longest
                    elif not packed:
                        assert width == longest, (recipe.NAME, width, longest)
            assert (widened > 0) == (shapes == "ladder"), (recipe.NAME, shapes)


def tc_run(tmp_path, name, model, train, dev, *extra) -> dict:
    out = tmp_path / name
    code = main(text_classification_args(model, train, dev, out, *extra, batch_size=8, max_steps=3))
    assert code == 0
    (run,) = json.loads((out / "results.json").read_text())["runs"]
    return run


def imbalanced_csv(d) -> tuple:
    """TOY_ROWS (4 rows of each class) twice, plus 8 more negative rows: 16 / 8 / 8."""
    rows = [(t, NAMES[c]) for t, c, _ in TOY_ROWS] * 2
    rows += [(t, "negative") for t, c, _ in TOY_ROWS if c == 0] * 2
    return (
        write_csv(d / "train.csv", ["text", "label"], rows),
        write_csv(d / "dev.csv", ["text", "label"], [(t, NAMES[c]) for t, c, _ in TOY_ROWS]),
    )


def test_label_smoothing_and_class_weights_change_the_loss_only(tmp_path, tiny_bert_dir):
    train, dev = imbalanced_csv(tmp_path)
    plain = tc_run(tmp_path, "plain", tiny_bert_dir, train, dev)
    smoothed = tc_run(tmp_path, "smooth", tiny_bert_dir, train, dev, "--label-smoothing", "0.2")
    weighted = tc_run(tmp_path, "weighted", tiny_bert_dir, train, dev, "--class-weights", "balanced")
    for run in (smoothed, weighted):
        assert run["history"]["lr"] == plain["history"]["lr"] and run["steps"] == plain["steps"]
        # The first step's loss is taken before any update, on the same batch: only the loss differs.
        # (Batches of 8 mix the classes: a weighted mean over one class equals the plain one.)
        # Same computation is bit-identical here (fp32, CPU); a near-uniform tiny model's losses all sit
        # near log(3), so the difference is small but no rounding noise.
        assert run["history"]["loss"][0] != plain["history"]["loss"][0]

    cfg = small_cfg(
        text_classification,
        model=str(tiny_bert_dir),
        train_file=str(train),
        validation_file=str(dev),
        class_weights="balanced",
    )
    prepared = text_classification.prepare(cfg)
    # Label ids follow the task's own order of names: count the training rows through it.
    names = list(prepared.data.task.label_names)
    ids = [names.index({0: "negative", 1: "neutral", 2: "positive"}[c]) for c in [0] * 16 + [1] * 8 + [2] * 8]
    expected = [len(ids) / (3 * ids.count(k)) for k in range(3)]  # n / (k * n_c): 32/48 for negative, 32/24 else
    assert prepared.class_weights.tolist() == pytest.approx(expected)


def test_lora_with_gradient_checkpointing_trains(tmp_path, tiny_bert_dir):
    train, dev = three_class_csv(tmp_path)
    plain = tc_run(tmp_path, "lora", tiny_bert_dir, train, dev, "--lora")
    checkpointed = tc_run(tmp_path, "lora-ckpt", tiny_bert_dir, train, dev, "--lora", "--gradient-checkpointing")
    assert checkpointed["history"]["loss"] == pytest.approx(plain["history"]["loss"], rel=1e-5)


SENTINEL = b'{"runs": [], "note": "an earlier run"}\n'


@pytest.mark.parametrize(
    "args, message",
    [
        (["--warmup-ratio", "0.1", "--warmup-steps", "5"], "give --warmup-ratio or --warmup-steps, not both"),
        (["--lr-scheduler", "constant", "--warmup-steps", "3"], "use constant_with_warmup"),
        (["--lr-scheduler", "exponential"], "--lr-scheduler: must be one of: linear, cosine"),
        (["--warmup-ratio", "1.5"], "--warmup-ratio: must be a probability between 0 and 1"),
        (["--weight-decay", "-0.1"], "--weight-decay: must be a finite number >= 0"),
        (["--label-smoothing", "1"], "--label-smoothing 1 makes every target uniform"),
        (["--class-weights", "inverse"], "--class-weights: must be one of: balanced"),
        (["--eval-only", "--lr-scheduler", "cosine"], "--eval-only trains nothing: --lr-scheduler"),
        (["--eval-only", "--max-steps", "3"], "--eval-only trains nothing: --max-steps"),
        (["regression", "--label-smoothing", "0.1"], "for classification; this task is regression"),
        (["regression", "--class-weights", "balanced"], "for classification; this task is regression"),
        (["mlp-synthetic", "--weight-decay", "0.1"], "--weight-decay: not used by recipe mlp-synthetic"),
        (["mlp-synthetic", "--gradient-checkpointing"], "--gradient-checkpointing: not used by recipe mlp-synthetic"),
    ],
)
def test_bad_combinations_exit_2_in_one_line_and_touch_nothing(tmp_path, tiny_bert_dir, capsys, args, message):
    train, dev = three_class_csv(tmp_path)
    data = ["--model", str(tiny_bert_dir), "--train-file", str(train), "--validation-file", str(dev)]
    recipe = "text-classification"
    if args[0] == "regression":
        train, dev = regression_tsv(tmp_path)
        data = [
            "--model",
            str(tiny_bert_dir),
            "--train-file",
            str(train),
            "--validation-file",
            str(dev),
            "--label-column",
            "score",
        ]
        args = args[1:]
    elif args[0] == "mlp-synthetic":
        recipe, data, args = "mlp-synthetic", [], args[1:]
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_bytes(SENTINEL)
    capsys.readouterr()
    code = main(["--recipe", recipe, *data, "--output-dir", str(out), "--no-progress", *args])
    lines = capsys.readouterr().err.splitlines()
    assert code == 2 and len(lines) == 1 and message in lines[0], lines
    assert sorted(p.name for p in out.iterdir()) == ["results.json"]
    assert (out / "results.json").read_bytes() == SENTINEL
