"""Command lines of tiny runs for the tests: a text-classification job run in-process
(``mixft.cli.main``), for the tests of bad input, and the argument list of a bert-sst2 job.

Usage: ``code, err, out = run_cli(tmp_path, model, "--max-steps", "2")`` (``out``: the output directory);
``main(bert_sst2_args(model, data, out, "--resume", batch_size=4, epochs=3))``
"""

from __future__ import annotations

from pathlib import Path

from mixft.cli.main import main
from tests.data_files import write_csv
from tests.tiny_models import TOY_ROWS

LABELS = ("neg", "pos")


def toy_files(folder: Path) -> tuple[Path, Path]:
    """24 training rows (6 batches of 4) and 12 validation rows, labels neg/pos."""
    rows = [(t, LABELS[int(c == 2)]) for t, c, _ in TOY_ROWS]
    folder.mkdir(parents=True, exist_ok=True)
    return (
        write_csv(folder / "train.csv", ["text", "label"], rows * 2),
        write_csv(folder / "dev.csv", ["text", "label"], rows),
    )


def run_cli(tmp_path: Path, model: Path, *args: str, capsys=None) -> tuple[int, str, Path]:
    """Run the toy job with ``args``; returns (exit code, stderr stripped when ``capsys`` is given, output dir)."""
    train, dev = toy_files(tmp_path / "data")
    out = tmp_path / "out"
    code = main(text_classification_args(model, train, dev, out, *args))
    err = capsys.readouterr().err.strip() if capsys is not None else ""
    return code, err, out


def text_classification_args(model: Path, train: Path, dev: Path, out: Path, *extra: str) -> list[str]:
    """``--recipe text-classification`` on ``model`` and two CSV files, batch 4, written to ``out``,
    without progress bars, then ``extra`` as given."""
    return [
        "--recipe",
        "text-classification",
        "--model",
        str(model),
        "--train-file",
        str(train),
        "--validation-file",
        str(dev),
        "--batch-size",
        "4",
        "--output-dir",
        str(out),
        "--no-progress",
        *extra,
    ]


def bert_sst2_args(model: Path, data: Path | str, out: Path, *extra: str, **options) -> list[str]:
    """``--recipe bert-sst2`` on ``model`` and the GLUE-layout folder ``data``, written to ``out``, without
    progress bars: each keyword option a flag (``batch_size=4``: ``--batch-size 4``), then ``extra`` as given.

    A test file fixes its job's options once: ``args = functools.partial(bert_sst2_args, epochs=3)``.
    """
    flags = [part for name, value in options.items() for part in (f"--{name.replace('_', '-')}", str(value))]
    return [
        "--recipe",
        "bert-sst2",
        "--model",
        str(model),
        "--data-dir",
        str(data),
        *flags,
        "--output-dir",
        str(out),
        "--no-progress",
        *extra,
    ]
