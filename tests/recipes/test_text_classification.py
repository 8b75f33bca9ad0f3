"""text-classification and glue through the real CLI, in-process, on tiny models and files made here.

Covers each task kind (binary, multi-class with string labels, regression; single texts
and pairs), four encoder architectures, --compare, --seeds, --resume, --save-model /
--eval-only, the Python API, and the data-side bad inputs at the CLI (exit 2, nothing
overwritten).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mixft.cli.main import main
from tests.cli_runs import recipe_args
from tests.data_files import write_csv
from tests.tiny_models import TOY_ROWS, make_tiny_model_dir

NAMES = {0: "negative", 1: "neutral", 2: "positive"}  # string labels, as a user's CSV has them


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def three_class_csv(d: Path) -> tuple[Path, Path]:
    rows = [(t, NAMES[c]) for t, c, _ in TOY_ROWS]
    return write_csv(d / "train.csv", ["text", "label"], rows * 2), write_csv(d / "dev.csv", ["text", "label"], rows)


def regression_tsv(d: Path) -> tuple[Path, Path]:
    lines = "sentence\tscore\n" + "".join(f"{t}\t{s}\n" for t, _, s in TOY_ROWS)
    (d / "train.tsv").write_text(lines, encoding="utf-8")
    (d / "dev.tsv").write_text(lines, encoding="utf-8")
    return d / "train.tsv", d / "dev.tsv"


def pair_jsonl(d: Path) -> tuple[Path, Path]:
    texts = [t for t, _, _ in TOY_ROWS]
    rows = [{"sentence1": a, "sentence2": b, "label": int(a == b)} for a in texts[:6] for b in texts[:4]]
    return write_jsonl(d / "train.jsonl", rows), write_jsonl(d / "dev.jsonl", rows[:12])


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny-encoders")
    return {arch: make_tiny_model_dir(arch, root / arch) for arch in ("bert", "roberta", "distilbert", "deberta-v2")}


def run(out: Path, model: Path, *args: str) -> tuple[int, dict]:
    code = main(
        recipe_args("text-classification", model, [], out, args, {"batch_size": 4, "epochs": 1, "max_steps": 3})
    )
    doc = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else {}
    return code, doc


@pytest.mark.parametrize("arch", ["bert", "roberta", "distilbert", "deberta-v2"])
def test_multiclass_string_labels_on_four_architectures(tmp_path, models, arch, capsys):
    train, dev = three_class_csv(tmp_path)
    code, doc = run(tmp_path / "out", models[arch], "--train-file", str(train), "--validation-file", str(dev))
    assert code == 0, capsys.readouterr().err
    (r,) = doc["runs"]
    assert r["steps"] == 3 and all(0 < x < 5 for x in r["history"]["loss"])  # CE near log(3) at the start
    assert set(r["eval"]) >= {"accuracy", "f1", "loss"}
    assert r["task"] == {
        "kind": "classification",
        "names": ["negative", "neutral", "positive"],
        "text_columns": ["text"],
        "label_column": "label",
        "glue_task": None,
    }
    printed = capsys.readouterr().out
    assert "3 labels (negative, neutral, positive)" in printed and "f1" in printed


def test_regression_reports_correlations_and_no_accuracy(tmp_path, models):
    train, dev = regression_tsv(tmp_path)
    code, doc = run(
        tmp_path / "out",
        models["bert"],
        "--train-file",
        str(train),
        "--validation-file",
        str(dev),
        "--label-column",
        "score",
    )
    assert code == 0
    (r,) = doc["runs"]
    assert {"pearsonr", "spearmanr"} <= set(r["eval"]) and "accuracy" not in r["eval"]
    assert r["task"]["kind"] == "regression" and r["task"]["names"] is None


def test_sentence_pairs_are_detected_and_encoded_as_pairs(tmp_path, models):
    train, dev = pair_jsonl(tmp_path)
    code, doc = run(tmp_path / "out", models["roberta"], "--train-file", str(train), "--validation-file", str(dev))
    assert code == 0
    (r,) = doc["runs"]
    assert r["task"]["text_columns"] == ["sentence1", "sentence2"]
    assert r["task"]["names"] == ["0", "1"] and {"accuracy", "f1"} <= set(r["eval"])


def test_compare_writes_a_report_with_accuracy_and_macro_f1_per_precision(tmp_path, models):
    train, dev = three_class_csv(tmp_path)
    code, doc = run(
        tmp_path / "out",
        models["bert"],
        "--train-file",
        str(train),
        "--validation-file",
        str(dev),
        "--compare",
        "fp32,bf16",
    )
    assert code == 0
    assert [r["precision"] for r in doc["runs"]] == ["fp32", "bf16"]
    report = (tmp_path / "out" / "report.md").read_text()
    assert "f1" in report.lower() and "negative, neutral, positive" in report


def test_save_model_then_eval_only_keeps_the_labels(tmp_path, models):
    train, dev = three_class_csv(tmp_path)
    code, doc = run(
        tmp_path / "out",
        models["distilbert"],
        "--train-file",
        str(train),
        "--validation-file",
        str(dev),
        "--save-model",
    )
    assert code == 0
    saved = tmp_path / "out" / "model"
    config = json.loads((saved / "config.json").read_text())
    assert config["id2label"] == {"0": "negative", "1": "neutral", "2": "positive"}
    code, again = run(
        tmp_path / "eval",
        saved,
        "--train-file",
        str(train),
        "--validation-file",
        str(dev),
        "--eval-only",
        "--compare",
        "fp32,bf16",
    )
    assert code == 0
    assert [r["steps"] for r in again["runs"]] == [0, 0]
    assert again["runs"][0]["eval"]["accuracy"] == pytest.approx(doc["runs"][0]["eval"]["accuracy"])
    # Was: no eval predictions without training, so no agreement: the inference precisions are compared too.
    fp32, bf16 = again["runs"]
    assert len(fp32["eval_predictions"]) == len(fp32["eval_labels"]) == 12
    assert bf16["agreement_vs_fp32"]["n"] == 12
    assert "## Agreement with fp32" in (tmp_path / "eval" / "report.md").read_text()


def test_eval_only_of_a_seeds_model_scores_the_rows_its_training_held_out(tmp_path, models, capsys):
    # Was: every run of --seeds 1,2 held out the first seed's rows; --eval-only of the seed-2 model with
    # --seed 2 (the natural choice) scored other rows, some trained on, exit 0 and no word.
    train, _ = three_class_csv(tmp_path)
    split = ("--train-file", str(train), "--validation-split", "0.25")
    code, doc = run(tmp_path / "out", models["bert"], *split, "--seeds", "1,2", "--save-model", "--max-steps", "3")
    assert code == 0
    trained = doc["runs"][1]
    assert trained["seed"] == 2
    saved = tmp_path / "out" / "model-fp32-seed2"
    record = json.loads((saved / "held-out.json").read_text())
    assert {k: v for k, v in record.items() if k != "rows_sha256"} == {
        "format": 1,
        "fraction": 0.25,
        "seed": 1,
        "rows": 24,
    }
    assert len(record["rows_sha256"]) == 64
    capsys.readouterr()
    code, again = run(tmp_path / "eval", saved, *split, "--eval-only", "--seed", "2")
    assert code == 0
    assert again["runs"][0]["eval"]["loss"] == pytest.approx(trained["eval"]["loss"], rel=1e-6)
    assert "(--validation-split 0.25 with seed 1), not those --seed 2 would hold out" in capsys.readouterr().err
    code, _ = run(tmp_path / "other", saved, "--train-file", str(train), "--validation-split", "0.5", "--eval-only")
    assert code == 2 and "pass --validation-split 0.25" in capsys.readouterr().err


def test_eval_only_refuses_a_bare_encoder(tmp_path, models, capsys):
    train, dev = three_class_csv(tmp_path)
    code, _ = run(
        tmp_path / "out", models["bert"], "--train-file", str(train), "--validation-file", str(dev), "--eval-only"
    )
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and len(err) == 1 and "no fine-tuned classification head" in err[0]


def test_resume_and_seeds(tmp_path, models, capsys):
    train, dev = three_class_csv(tmp_path)
    args = ("--train-file", str(train), "--validation-file", str(dev), "--seeds", "0,1", "--checkpoint-every", "1")
    code, first = run(tmp_path / "out", models["bert"], *args)
    assert code == 0 and [r["seed"] for r in first["runs"]] == [0, 1]
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[")]
    # Each run's result line names its seed: two lines that both said "[fp32]" could not be told apart.
    assert [line.split("]")[0] for line in lines] == ["[fp32 seed 0", "[fp32 seed 1"], lines
    code, resumed = run(tmp_path / "out", models["bert"], *args, "--resume")  # all finished: kept as they were
    assert code == 0
    assert [r["eval"]["accuracy"] for r in resumed["runs"]] == [r["eval"]["accuracy"] for r in first["runs"]]
    kept = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[")]
    assert [line.split(":")[0] for line in kept] == [
        "[fp32 seed 0] finished earlier, kept by --resume",
        "[fp32 seed 1] finished earlier, kept by --resume",
    ], kept


def test_validation_split_and_the_whole_file_by_default(tmp_path, models):
    train, _ = three_class_csv(tmp_path)  # 24 rows
    code, doc = run(
        tmp_path / "out", models["bert"], "--train-file", str(train), "--validation-split", "0.25", "--max-steps", "100"
    )
    assert code == 0
    assert "(18 train / 6 eval)" in doc["runs"][0]["dataset"]  # no demo cap on the user's data
    assert doc["runs"][0]["steps"] == 5  # ceil(18 / 4): every row trained


def test_glue_offline_falls_back_to_the_paraphrase_stand_in(tmp_path, isolated_hf, tiny_bert_dir, capsys):
    code = main(
        [
            "--recipe",
            "glue",
            "--task",
            "mrpc",
            "--model",
            str(tiny_bert_dir),
            "--max-train-samples",
            "16",
            "--max-eval-samples",
            "16",
            "--batch-size",
            "8",
            "--max-steps",
            "2",
            "--output-dir",
            str(tmp_path / "out"),
            "--no-progress",
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "notice: glue/mrpc is not reachable or cached" in captured.err
    run_ = json.loads((tmp_path / "out" / "results.json").read_text())["runs"][0]
    assert {"f1", "accuracy"} <= set(run_["eval"]) and run_["task"]["glue_task"] == "mrpc"


@pytest.mark.parametrize("labels", [("0", "1"), ("negative", "positive")], ids=["glue-ids", "names"])
def test_a_glue_tasks_predict_file_is_scored_with_ids_or_names(tmp_path, isolated_hf, tiny_bert_dir, labels):
    # Was: the task's labels are a ClassLabel (the hub's, the stand-in's), so a GLUE TSV's 0/1 counted as
    # "mixed label types": predictions without metrics, with a warning.
    rows = [("a fine and moving film", 1), ("dull , lifeless and slow", 0), ("great fun", 1), ("a bore", 0)]
    tsv = tmp_path / "new.tsv"
    tsv.write_text("sentence\tlabel\n" + "".join(f"{t}\t{labels[c]}\n" for t, c in rows), encoding="utf-8")
    out = tmp_path / "out"
    argv = ["--recipe", "glue", "--task", "sst2", "--model", str(tiny_bert_dir), "--max-train-samples", "16"]
    argv += ["--max-eval-samples", "8", "--batch-size", "8", "--max-steps", "2", "--output-dir", str(out)]
    assert main([*argv, "--no-progress", "--predict-file", str(tsv)]) == 0
    predict = json.loads((out / "results.json").read_text())["runs"][0]["predict"]
    assert "metrics_skipped" not in predict
    lines = (out / "predictions.csv").read_text().splitlines()[1:]
    predicted = [line.split(",")[0] for line in lines]
    right = sum(name == ("negative", "positive")[c] for name, (_, c) in zip(predicted, rows))
    assert predict["metrics"]["accuracy"] == pytest.approx(right / len(rows))


SENTINEL = b'{"runs": [], "note": "an earlier run"}\n'


@pytest.mark.parametrize(
    "case",
    [
        "unsupported",
        "empty",
        "missing-column",
        "pair-on-single",
        "unseen-label",
        "one-class",
        "unknown-glue-task",
        "hub-unreachable",
        "no-data",
    ],
)
def test_bad_data_exits_2_with_one_line_and_touches_nothing(tmp_path, models, isolated_hf, capsys, case):
    train, dev = three_class_csv(tmp_path)
    recipe = ["--recipe", "text-classification"]
    args = {
        "unsupported": [
            "--train-file",
            str(write_csv(tmp_path / "t.xlsx", ["text", "label"], [])),
            "--validation-split",
            "0.2",
        ],
        "empty": ["--train-file", str(tmp_path / "empty.csv"), "--validation-file", str(dev)],
        "missing-column": ["--train-file", str(train), "--validation-file", str(dev), "--text-column", "body"],
        "pair-on-single": ["--train-file", str(train), "--validation-file", str(dev), "--text-pair-column", "other"],
        "unseen-label": [
            "--train-file",
            str(train),
            "--validation-file",
            str(write_csv(tmp_path / "d2.csv", ["text", "label"], [("fine", "surprised")])),
        ],
        "one-class": [
            "--train-file",
            str(write_csv(tmp_path / "t1.csv", ["text", "label"], [("a", "x"), ("b", "x")])),
            "--validation-split",
            "0.5",
        ],
        "unknown-glue-task": ["--task", "sst3"],
        "hub-unreachable": ["--dataset", "some/dataset-nobody-cached"],
        "no-data": [],
    }[case]
    if case == "empty":
        (tmp_path / "empty.csv").write_text("")
    if case == "unknown-glue-task":
        recipe = ["--recipe", "glue"]
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_bytes(SENTINEL)
    capsys.readouterr()
    code = main([*recipe, "--model", str(models["bert"]), "--output-dir", str(out), "--no-progress", *args])
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("finetune.py: error: "), captured.err
    assert sorted(p.name for p in out.iterdir()) == ["results.json"]
    assert (out / "results.json").read_bytes() == SENTINEL


def test_python_api_runs_the_recipe(tmp_path, models):
    import mixft

    train, dev = three_class_csv(tmp_path)
    results = mixft.run(
        mixft.RunConfig(
            recipe="text-classification",
            model=str(models["bert"]),
            train_file=str(train),
            validation_file=str(dev),
            batch_size=4,
            max_steps=2,
            output_dir=str(tmp_path / "out"),
        )
    )
    assert results[0].steps == 2 and "f1" in results[0].eval
