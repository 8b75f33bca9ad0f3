"""--save-model then --eval-only: a fine-tuned model evaluated alone, at each precision."""

import json

import pytest

from mixft.cli.main import main


def test_saved_model_evaluates_alone_to_the_same_accuracy(tmp_path, tiny_bert_dir, tiny_data_dir, capsys):
    train_out, eval_out = tmp_path / "train", tmp_path / "eval"
    common = ["--recipe", "bert-sst2", "--data-dir", str(tiny_data_dir), "--batch-size", "4", "--no-progress"]
    assert (
        main([*common, "--model", str(tiny_bert_dir), "--epochs", "2", "--save-model", "--output-dir", str(train_out)])
        == 0
    )
    saved = train_out / "model"
    assert (saved / "config.json").is_file() and (saved / "classifier_head.pt").is_file()
    trained = json.loads((train_out / "results.json").read_text())["runs"][0]

    capsys.readouterr()
    assert (
        main([*common, "--model", str(saved), "--eval-only", "--compare", "fp32,bf16", "--output-dir", str(eval_out)])
        == 0
    )
    printed = capsys.readouterr().out
    # Was: a training budget in the header and "0.0 samples/s | train 0.0 s" per run.
    assert "budget" not in printed and "--eval-only: no training" in printed
    lines = [line for line in printed.splitlines() if line.startswith("[")]
    assert len(lines) == 2 and all("inference" in line and "no training (--eval-only)" in line for line in lines)
    assert not any("train 0.0 s" in line for line in lines)
    runs = json.loads((eval_out / "results.json").read_text())["runs"]
    assert [r["precision"] for r in runs] == ["fp32", "bf16"]
    assert all(r["steps"] == 0 for r in runs)
    # The same weights in fp32 give exactly the trained run's final evaluation.
    assert runs[0]["eval"]["accuracy"] == trained["eval"]["accuracy"]
    assert runs[0]["eval"]["loss"] == trained["eval"]["loss"]
    assert all(r["eval"]["samples_per_s"] > 0 for r in runs)


def test_eval_only_needs_a_model_and_a_savable_recipe(tmp_path, capsys):
    assert main(["--recipe", "bert-sst2", "--eval-only", "--output-dir", str(tmp_path / "o")]) == 2
    assert "--eval-only needs --model" in capsys.readouterr().err
    assert main(["--recipe", "mlp-synthetic", "--save-model", "--output-dir", str(tmp_path / "o")]) == 2
    assert "no saved-model format" in capsys.readouterr().err
    assert (
        main(
            [
                "--recipe",
                "bert-sst2",
                "--eval-only",
                "--model",
                str(tmp_path),
                "--resume",
                "--output-dir",
                str(tmp_path / "o"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cannot be combined with --resume" in err


# ---------------------------------------------------------------------------- issue 19: eval-only
# A 3-class model whose label names are NOT in sorted order (a ClassLabel's order, as a hub
# dataset or a Parquet file written by `datasets` keeps it): positive=0, neutral=1, negative=2.
CLASS_NAMES = ("positive", "neutral", "negative")


def _toy(c: int) -> str:
    return CLASS_NAMES[2 - c]  # TOY_ROWS: 2 good, 1 so-so, 0 bad


def _parquet(path, rows):
    import datasets

    features = datasets.Features(
        {"text": datasets.Value("string"), "label": datasets.ClassLabel(names=list(CLASS_NAMES))}
    )
    columns = {"text": [t for t, _ in rows], "label": [CLASS_NAMES.index(n) for _, n in rows]}
    datasets.Dataset.from_dict(columns, features=features).to_parquet(path)
    return path


def _csv(path, rows):
    path.write_text("text,label\n" + "".join(f"{t},{n}\n" for t, n in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def saved3(tmp_path_factory):
    """(saved model dir, data dir, its results.json run): trained on Parquet files with a ClassLabel."""
    from tests.tiny_models import TOY_ROWS, make_tiny_model_dir

    base = tmp_path_factory.mktemp("saved3")
    model = make_tiny_model_dir("bert", base / "bert")
    rows = [(t, _toy(c)) for t, c, _ in TOY_ROWS]
    data = base / "data"
    data.mkdir()
    _parquet(data / "train.parquet", rows * 2)
    _parquet(data / "dev.parquet", rows)
    _csv(data / "train.csv", rows * 2)
    _csv(data / "dev.csv", rows)  # the same rows; as text the names sort negative, neutral, positive
    _csv(data / "dev-reversed.csv", rows[::-1])  # negative first
    out = base / "train"
    assert (
        main(
            [
                "--recipe",
                "text-classification",
                "--model",
                str(model),
                "--train-file",
                str(data / "train.parquet"),
                "--validation-file",
                str(data / "dev.parquet"),
                "--epochs",
                "3",
                "--batch-size",
                "4",
                "--lr",
                "0.003",
                "--save-model",
                "--output-dir",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    run = json.loads((out / "results.json").read_text())["runs"][0]
    assert run["task"]["names"] == list(CLASS_NAMES)  # the premise: the model's ids are not in sorted order
    return out / "model", data, run


def _eval_only(saved, out, *data_args, compare=None):
    args = [
        "--recipe",
        "text-classification",
        "--model",
        str(saved),
        "--eval-only",
        *data_args,
        "--output-dir",
        str(out),
        "--no-progress",
    ]
    code = main(args + (["--compare", compare] if compare else []))
    doc = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else None
    return code, doc


def test_eval_only_compare_report_shows_inference_not_train_zeros(saved3, tmp_path, capsys):
    # Was: report.md's table had "train time (s) 0.00 | speedup n/a | samples/s 0.0" per precision,
    # while the inference speed that was measured sat only in results.json.
    from mixft.report.summary import summarize
    from tests.report.test_markdown import table_rows

    saved, data, _ = saved3
    out = tmp_path / "cmp"
    code, doc = _eval_only(
        saved,
        out,
        "--train-file",
        str(data / "train.parquet"),
        "--validation-file",
        str(data / "dev.parquet"),
        compare="fp32,bf16",
    )
    assert code == 0, capsys.readouterr().err
    md = (out / "report.md").read_text()
    rows = table_rows(md)
    header = set(rows["fp32"])
    assert {"eval time (s)", "inference speedup", "inference samples/s"} <= header
    assert not header & {"train time (s)", "speedup", "samples/s", "skipped steps", "final loss scale"}
    for run in doc["runs"]:
        shown = float(rows[run["precision"]]["inference samples/s"])
        assert shown == pytest.approx(run["eval"]["samples_per_s"], abs=0.05) and shown > 0
    assert rows["fp32"]["inference speedup"] == "1.00×"
    assert "trained nothing (`--eval-only`)" in md and "no training" in md
    # The aggregate (compare_frame's rows) agrees with the table and the console: no train figures.
    summary = {r["precision"]: r for r in summarize(doc)}
    assert all(
        r["eval_only"]
        and r["train_time_s_mean"] is None
        and r["samples_per_s_mean"] is None
        and r["speedup"] is None
        and r["skipped_steps_total"] is None
        for r in summary.values()
    )
    assert summary["bf16"]["inference_speedup"] == pytest.approx(
        summary["fp32"]["eval_time_s_mean"] / summary["bf16"]["eval_time_s_mean"]
    )
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[")]
    assert len(printed) == 2 and all("inference" in line and "no training" in line for line in printed)


def test_eval_only_needs_no_training_data(saved3, tmp_path, capsys):
    # Was: "pass either --train-file (with --validation-file or --validation-split) or --dataset NAME".
    saved, data, trained = saved3
    code, doc = _eval_only(saved, tmp_path / "eval", "--validation-file", str(data / "dev.parquet"))
    assert code == 0, capsys.readouterr().err
    (run,) = doc["runs"]
    assert run["dataset"] == f"{data / 'dev.parquet'} (12 eval)"  # no training rows claimed
    assert run["task"]["names"] == list(CLASS_NAMES)  # the labels are the saved model's
    assert run["eval"]["accuracy"] == trained["eval"]["accuracy"]
    assert run["eval"]["loss"] == pytest.approx(trained["eval"]["loss"], rel=1e-5)
    # Nothing to evaluate on is still one line.
    code, _ = _eval_only(saved, tmp_path / "none")
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and len(err) == 1 and "pass --validation-file" in err[0], err


def test_a_saved_model_reads_its_label_names_in_any_order(saved3, tmp_path, capsys):
    # Was: "the model was fine-tuned for labels ['positive', 'neutral', 'negative'], the data has
    # ['negative', 'neutral', 'positive']": the same names, refused because they sort differently.
    saved, data, _ = saved3
    code, doc = _eval_only(
        saved,
        tmp_path / "parquet",
        "--train-file",
        str(data / "train.parquet"),
        "--validation-file",
        str(data / "dev.parquet"),
    )
    assert code == 0, capsys.readouterr().err
    original = doc["runs"][0]["eval"]
    for name in ("dev.csv", "dev-reversed.csv"):
        code, doc = _eval_only(
            saved, tmp_path / name, "--train-file", str(data / "train.csv"), "--validation-file", str(data / name)
        )
        assert code == 0, capsys.readouterr().err
        got = doc["runs"][0]["eval"]
        assert doc["runs"][0]["task"]["names"] == list(CLASS_NAMES)
        assert got["accuracy"] == original["accuracy"] and got["f1"] == pytest.approx(original["f1"])
        assert got["loss"] == pytest.approx(original["loss"], rel=1e-5)  # each row scored against its own name


def test_a_label_name_the_saved_model_lacks_is_one_line(saved3, tmp_path, capsys):
    saved, data, _ = saved3
    dev = _csv(
        tmp_path / "dev.csv",
        [("the film was great", "positive"), ("it is fine", "so-so"), ("a very bad film", "negative")],
    )
    out = tmp_path / "out"
    code, _ = _eval_only(saved, out, "--validation-file", str(dev))
    lines = capsys.readouterr().err.splitlines()
    assert code == 2 and len(lines) == 1, lines
    assert "label 'so-so'" in lines[0] and "positive, neutral, negative" in lines[0], lines[0]
    assert not out.exists()
