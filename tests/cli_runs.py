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
    code = main(text_classification_args(model, train, dev, out, *args, batch_size=4))
    err = capsys.readouterr().err.strip() if capsys is not None else ""
    return code, err, out


def text_classification_args(model: Path, train: Path, dev: Path, out: Path, *extra: str, **options) -> list[str]:
    """``--recipe text-classification`` on ``model`` and two CSV files, written to ``out`` (see ``recipe_args``).

    Usage: ``main(text_classification_args(model, train, dev, out, "--lora", batch_size=4, lr="5e-3"))``
    """
    return recipe_args(
        "text-classification", model, ["--train-file", str(train), "--validation-file", str(dev)], out, extra, options
    )


def bert_sst2_args(model: Path, data: Path | str, out: Path, *extra: str, **options) -> list[str]:
    """``--recipe bert-sst2`` on ``model`` and the GLUE-layout folder ``data``, written to ``out`` (see ``recipe_args``).

    A test file fixes its job's options once: ``args = functools.partial(bert_sst2_args, epochs=3)``.
    """
    return recipe_args("bert-sst2", model, ["--data-dir", str(data)], out, extra, options)


def recipe_args(
    recipe: str, model: Path, data: list[str], out: Path, extra: tuple[str, ...], options: dict
) -> list[str]:
    """``--recipe recipe --model model`` with ``data``'s flags, then each keyword option as a flag (batch_size=4:
    --batch-size 4), the output directory, no progress bars, then ``extra`` as given; with ``--eval-only`` in
    ``extra``, without the options only training reads (see ``evaluation_only``)."""
    flags = [part for name, value in options.items() for part in (f"--{name.replace('_', '-')}", str(value))]
    argv = ["--recipe", recipe, "--model", str(model), *data, *flags, "--output-dir", str(out), "--no-progress", *extra]
    return evaluation_only(argv) if "--eval-only" in extra else argv


def evaluation_only(argv: list[str]) -> list[str]:
    """``argv`` without the options only training reads (``--eval-only`` refuses them): a training job's
    command line turned into the one that evaluates its saved model.

    Usage: ``main(evaluation_only(train_argv + ["--eval-only"]))``
    """
    from dataclasses import fields

    from mixft.config.run_config import RunConfig
    from mixft.options import flag_of

    takes_value = {flag_of(f): f.type not in (bool, "bool") for f in fields(RunConfig) if f.metadata.get("trains")}
    kept, skip = [], 0
    for part in argv:
        if skip:
            skip -= 1
        elif part in takes_value:
            skip = int(takes_value[part])
        else:
            kept.append(part)
    return kept
