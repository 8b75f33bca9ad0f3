"""A tiny text-classification command line run in-process (``mixft.cli.main``), for the tests of bad input.

Usage: ``code, err, out = run_cli(tmp_path, model, "--max-steps", "2")`` (``out``: the output directory)
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
    code = main(
        [
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
            *args,
        ]
    )
    err = capsys.readouterr().err.strip() if capsys is not None else ""
    return code, err, out
