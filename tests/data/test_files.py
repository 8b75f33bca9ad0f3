"""mixft.data.files: each supported format read through datasets, and each unreadable file refused in one line."""

from __future__ import annotations

import json
import os

import pytest

from mixft.data.files import load_data_file
from mixft.errors import UsageError

pytestmark = pytest.mark.usefixtures("isolated_hf")  # a private datasets cache per test

ROWS = [
    {"text": 'he said "fine", then left', "label": "pos"},
    {"text": "dull, slow", "label": "neg"},
    {"text": "ok", "label": "pos"},
]


def _write(path, rows, fmt):
    if fmt == "csv":
        import csv

        with open(path, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    elif fmt == "tsv":
        path.write_text("text\tlabel\n" + "".join(f"{r['text']}\t{r['label']}\n" for r in rows), encoding="utf-8")
    elif fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    elif fmt == "json":
        path.write_text(json.dumps(rows), encoding="utf-8")
    elif fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.mark.parametrize("fmt", ["csv", "tsv", "json", "jsonl", "parquet"])
def test_each_format_reads_the_same_rows(tmp_path, fmt):
    path = _write(tmp_path / f"train.{fmt}", ROWS, fmt)
    ds = load_data_file(path)
    assert ds.column_names == ["text", "label"]
    assert ds.to_list() == ROWS  # quotes and commas survive each format's own quoting rules
    assert ds.cache_files, "file data must be memory-mapped Arrow in the datasets cache"


def test_tsv_quotes_are_literal(tmp_path):
    # GLUE convention: a lone quote in a TSV is text, not the start of a quoted field.
    path = tmp_path / "dev.tsv"
    path.write_text('sentence\tlabel\n"a quote that never closes\t1\nplain\t0\n', encoding="utf-8")
    assert load_data_file(path)["sentence"][:] == ['"a quote that never closes', "plain"]


@pytest.mark.parametrize(
    "name, content, message",
    [
        (
            "train.txt",
            "text,label\n",
            "--train-file {p}: unsupported file type (extension '.txt'); supported: .csv, .tsv, .json, .jsonl, .parquet",
        ),
        ("train", "text,label\n", "--train-file {p}: unsupported file type (no extension); supported"),
        ("train.csv", "", "--train-file {p}: file is empty"),
        ("train.csv", "text,label\n", "--train-file {p}: no data rows"),
        (
            "train.csv",
            'text,label\n"a",1\n"b",2,3\n',
            "--train-file {p}: data row 2 has more fields than the header's 2 "
            "(an unquoted comma in a text?); quote the fields that contain one",
        ),
        (
            "train.csv",
            'text,label\n"a",1,2\n"b",2,3,4\n',
            "--train-file {p}: line 3 has 4 fields, the header 2; quote fields",
        ),
        (
            "train.jsonl",
            '{"text": "a", "label": 1}\n{"text": "b", "label": \n',
            "--train-file {p}: cannot read as JSONL:",
        ),
        ("train.json", '[{"text": "a"', "--train-file {p}: cannot read as JSON:"),
        ("train.parquet", "not parquet at all", "--train-file {p}: cannot read as PARQUET:"),
    ],
)
def test_bad_files_are_one_line_usage_errors(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(UsageError) as info:
        load_data_file(path)
    text = str(info.value)
    assert text.startswith(message.format(p=path)), text
    assert "\n" not in text


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(UsageError, match=r"^--validation-file .*dev\.csv: file not found$"):
        load_data_file(tmp_path / "dev.csv", "--validation-file")
    (tmp_path / "dir.csv").mkdir()
    with pytest.raises(UsageError, match="is a directory"):
        load_data_file(tmp_path / "dir.csv")


def test_second_read_reuses_the_datasets_cache(tmp_path):
    path = _write(tmp_path / "train.csv", ROWS, "csv")
    first = load_data_file(path)
    second = load_data_file(path)
    assert first.cache_files == second.cache_files
    assert first._fingerprint == second._fingerprint


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_a_file_replaced_with_its_mtime_kept_is_read_anew(tmp_path, fmt):
    # Was: datasets knows a local file by path and mtime alone: after `cp -p new.csv train.csv` (or rsync -a,
    # an archive) the old rows came back from its cache, and everything tokenised from them.
    path = _write(tmp_path / f"train.{fmt}", ROWS, fmt)
    first = load_data_file(path)
    stat = path.stat()
    other = [{"text": "apple", "label": "fruit"}, {"text": "bus", "label": "vehicle"}]
    _write(path, other, fmt)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_mtime_ns == stat.st_mtime_ns
    second = load_data_file(path)
    assert second.to_list() == other
    assert second._fingerprint != first._fingerprint  # what is tokenised from it is not reused either


# ------------------------------------------------------------------- issue 19: read as written


@pytest.mark.parametrize("name", ["tr[1].csv", "tr?.csv", "tr*.csv", "[!x]tr.csv"])
def test_a_path_is_a_file_not_a_glob_pattern(tmp_path, name):
    # datasets expands data_files as patterns: "tr[1].csv" read tr1.csv (exit 0, wrong data).
    (tmp_path / "tr1.csv").write_text("text,label\nthe neighbour,x\n", encoding="utf-8")
    path = tmp_path / name
    path.write_text("text,label\nthe file given,y\n", encoding="utf-8")
    assert load_data_file(path).to_list() == [{"text": "the file given", "label": "y"}]


def test_a_fifo_is_refused_without_opening_it(tmp_path):
    import os

    path = tmp_path / "train.csv"
    os.mkfifo(path)  # opening it would block until a writer came
    with pytest.raises(UsageError, match=r"train\.csv: is a named pipe \(FIFO\), expected a regular"):
        load_data_file(path)


def test_csv_cells_are_strings_and_only_empty_cells_are_missing(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("text,label\nNone,NA\nnull,007\nn/a,\nNaN,1.0\n", encoding="utf-8")
    ds = load_data_file(path)
    assert ds.to_list() == [
        {"text": "None", "label": "NA"},
        {"text": "null", "label": "007"},
        {"text": "n/a", "label": None},
        {"text": "NaN", "label": "1.0"},
    ]


def test_repeated_header_names_are_refused(tmp_path):
    path = tmp_path / "t.tsv"
    path.write_text("text\tlabel\ttext\na\tb\tc\n", encoding="utf-8")
    with pytest.raises(UsageError, match=r"the header names column 'text' more than once"):
        load_data_file(path)


def test_one_field_too_many_in_every_row_is_refused_not_made_an_index(tmp_path):
    # pandas took each row's first field as a hidden index: half of every text lost, exit 0.
    path = tmp_path / "t.csv"
    path.write_text("text,label\ngood, really,pos\nbad, truly,neg\n", encoding="utf-8")
    with pytest.raises(UsageError) as info:
        load_data_file(path)
    assert str(info.value) == (
        f"--train-file {path}: data row 1 has more fields than the header's 2 (an unquoted "
        "comma in a text?); quote the fields that contain one"
    )


def test_bom_crlf_quoted_newlines_long_rows_and_one_row(tmp_path):
    path = tmp_path / "t.csv"
    long_text = "word " * 200_000
    path.write_bytes(
        "\ufefftext,label\r\n".encode() + b'"two\r\nlines, one cell",1\r\n' + f"{long_text},0\r\n".encode()
    )
    rows = load_data_file(path).to_list()
    assert rows == [{"text": "two\r\nlines, one cell", "label": "1"}, {"text": long_text, "label": "0"}]
    one = tmp_path / "one.csv"
    one.write_text('"a, b",c', encoding="utf-8")  # header only, no newline: no rows
    with pytest.raises(UsageError, match="no data rows"):
        load_data_file(one)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"text,label\ncaf\xe9,1\n", "line 2: b'\\xe9' is not UTF-8 (Invalid UTF8 sequence); save the file as UTF-8"),
        (
            "text,label\nok,1\n".encode("utf-16"),
            "line 1: a UTF-16 file (Invalid UTF8 sequence); save the file as UTF-8",
        ),
    ],
)
def test_an_encoding_other_than_utf8_is_named_with_the_fix(tmp_path, content, message):
    path = tmp_path / "t.csv"
    path.write_bytes(content)
    with pytest.raises(UsageError) as info:
        load_data_file(path)
    assert message in str(info.value)


@pytest.mark.parametrize(
    "name, content, line",
    [
        ("p.csv", "sentence\ngood film\n\nbad film\n", 3),  # a one-column CSV: pandas drops the line
        ("p.csv", "sentence\r\ngood\r\n   \r\nbad\r\n", 3),  # whitespace only, Windows line ends
        ("p.csv", 'text,label\n"a",1\n"b\n\nc",0\n\n"d",1\n', 6),  # the blank inside quotes is text
        ("p.tsv", "sentence\tlabel\na\t1\n\nb\t0\n", 3),
        ("p.jsonl", '{"text": "a"}\n\n{"text": "b"}\n', 2),
        ("p.json", '{"text": "a"}\n{"text": "b"}\n\n{"text": "c"}\n', 3),  # .json holding JSON Lines
    ],
)
def test_a_blank_line_between_rows_is_refused_with_its_line(tmp_path, name, content, line):
    # Skipped in silence, it would shift every later prediction of a --predict-file off its input line.
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(UsageError) as info:
        load_data_file(path, "--predict-file")
    assert str(info.value).startswith(f"--predict-file {path}: line {line} is blank, between rows; remove blank lines")


@pytest.mark.parametrize(
    "name, content, rows",
    [
        ("p.csv", "sentence\ngood\nbad\n\n  \n", ["good", "bad"]),  # blank lines after the last row: the file's end
        ("p.csv", "\nsentence\ngood\nbad\n", ["good", "bad"]),  # before the header
        ("p.csv", 'sentence\n"two\n\nparagraphs"\nbad\n', ["two\n\nparagraphs", "bad"]),
        ("p.json", '[\n  {"sentence": "good"},\n\n  {"sentence": "bad"}\n]\n', ["good", "bad"]),  # an array's layout
        ("p.jsonl", '{"sentence": "good"}\n{"sentence": "bad"}\n\n', ["good", "bad"]),
    ],
)
def test_blank_lines_that_shift_no_row_are_read_as_before(tmp_path, name, content, rows):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    assert load_data_file(path)["sentence"][:] == rows


@pytest.mark.parametrize(
    "name, content, said",
    [
        # Was: the array's reader kept the last value in silence (label 0 here); a CSV header's repeat was refused.
        ("t.json", '[{"text": "a", "label": 1, "label": 0}, {"text": "b", "label": 0}]', ""),
        (
            "t.jsonl",
            '{"text": "a", "label": 1}\n{"text": "b", "label": 0, "label": 1}\n',
            "line 2: ",
        ),  # "Trailing data"
    ],
)
def test_a_key_repeated_in_a_json_record_is_refused_like_a_repeated_header_name(tmp_path, name, content, said):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(UsageError) as info:
        load_data_file(path)
    assert str(info.value).startswith(f"--train-file {path}: {said}a record names column 'label' more than once")


def test_reading_and_tokenising_leave_the_processs_datasets_bars_as_they_were(tmp_path):
    """Was: load_text_data / tokenize_text_data switched datasets' progress bars off for the whole process, for
    good: a notebook's own ds.map lost its bars."""
    import datasets
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from mixft.data.labels import analyze_labels
    from mixft.data.tokenize import tokenize_dataset

    path = tmp_path / "t.csv"
    path.write_text("text,label\na good film,pos\na bad film,neg\n", encoding="utf-8")
    backend = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1, "good": 2, "bad": 3, "film": 4}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", pad_token="[UNK]")
    try:
        for on in (True, False):
            datasets.enable_progress_bars() if on else datasets.disable_progress_bars()
            ds = load_data_file(path)
            info = analyze_labels(ds, "label", where="t.csv")
            tokenize_dataset(ds, tokenizer, text_columns=("text",), label_column="label", labels=info, max_length=8)
            assert datasets.is_progress_bar_enabled() is on
    finally:
        datasets.disable_progress_bars()
