"""mixft.data.glue_dir: the strict GLUE SST-2 TSV reader (into Arrow) and its one-line errors."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mixft.data.glue_dir import LABEL_NAMES, read_glue_dir, read_glue_tsv
from mixft.errors import UsageError


def _rows(path) -> list[dict]:
    return read_glue_tsv(path).to_list()


HEADER = b"sentence\tlabel\n"


def _write(tmp_path, data: bytes, name="dev.tsv"):
    p = tmp_path / name
    p.write_bytes(data)
    return p


def _error(path, *fragments):
    """read_glue_tsv(path) must raise UsageError with a one-line message naming the file."""
    with pytest.raises(UsageError) as info:
        read_glue_tsv(path)
    msg = str(info.value)
    assert "\n" not in msg and "\r" not in msg
    assert str(path) in msg
    for f in fragments:
        assert f in msg, (f, msg)
    return msg


def test_happy_path(tmp_path):
    p = _write(tmp_path, HEADER + b"a gripping film \t1\nit 's \"dull\" and 'flat'\t0\n")
    assert _rows(p) == [
        {"sentence": "a gripping film ", "label": 1},
        {"sentence": "it 's \"dull\" and 'flat'", "label": 0},
    ]


def test_accepts_str_path_and_no_final_newline_and_crlf(tmp_path):
    p = _write(tmp_path, b"sentence\tlabel\r\ngood\t1\r\nbad\t0")
    assert _rows(str(p)) == [{"sentence": "good", "label": 1}, {"sentence": "bad", "label": 0}]


def test_utf8_text(tmp_path):
    p = _write(tmp_path, HEADER + "café – naïve 🎬\t1\n".encode())
    assert _rows(p)[0]["sentence"] == "café – naïve 🎬"


def test_bom_stripped(tmp_path):
    p = _write(tmp_path, b"\xef\xbb\xbf" + HEADER + b"good\t1\n")
    assert _rows(p) == [{"sentence": "good", "label": 1}]


def test_extra_columns_any_order(tmp_path):
    p = _write(tmp_path, b"label\tid\tsentence\n1\t7\tgood\n0\t8\tbad\n")
    assert _rows(p) == [{"sentence": "good", "label": 1}, {"sentence": "bad", "label": 0}]


def test_long_sentence_accepted(tmp_path):
    long = "word " * 20_000  # 100k characters
    p = _write(tmp_path, HEADER + long.encode() + b"\t1\n")
    assert _rows(p)[0]["sentence"] == long


# --- error cases -----------------------------------------------------------------


def test_missing_file(tmp_path):
    _error(tmp_path / "nope.tsv", "not found")


def test_directory(tmp_path):
    _error(tmp_path, "is a directory")


def test_empty_file(tmp_path):
    _error(_write(tmp_path, b""), "empty")


def test_header_only(tmp_path):
    _error(_write(tmp_path, HEADER), "no data rows")


def test_header_without_label(tmp_path):
    msg = _error(_write(tmp_path, b"sentence\tscore\ngood\t1\n"), "line 1", "'label'")
    assert "'sentence', 'score'" in msg  # says which columns were found


def test_header_without_sentence(tmp_path):
    msg = _error(_write(tmp_path, b"text\tlabel\ngood\t1\n"), "line 1", "'sentence'")
    assert "'text'" in msg


def test_no_header(tmp_path):
    _error(_write(tmp_path, b"good\t1\nbad\t0\n"), "line 1", "header")


def test_duplicate_column(tmp_path):
    _error(_write(tmp_path, b"sentence\tlabel\tlabel\ngood\t1\t1\n"), "line 1", "more than once")


def test_wrong_field_count(tmp_path):
    _error(_write(tmp_path, HEADER + b"good\t1\nbad\t0\textra\n"), "line 3", "expected 2", "got 3")


def test_missing_tab(tmp_path):
    _error(_write(tmp_path, HEADER + b"good 1\n"), "line 2", "got 1")


def test_blank_line_in_middle(tmp_path):
    _error(_write(tmp_path, HEADER + b"good\t1\n\nbad\t0\n"), "line 3", "blank line")


def test_blank_line_at_end(tmp_path):
    _error(_write(tmp_path, HEADER + b"good\t1\n\n"), "line 3", "blank line")


@pytest.mark.parametrize("label", ["2", "-1", "pos", "1.0", "", " 1", "01"])
def test_bad_label(tmp_path, label):
    p = _write(tmp_path, HEADER + b"good\t1\n" * 5 + f"meh\t{label}\n".encode())
    _error(p, "line 7", "label must be 0 or 1", f"got {label!r}")


def test_empty_sentence(tmp_path):
    _error(_write(tmp_path, HEADER + b"\t1\n"), "line 2", "sentence is empty")


def test_whitespace_sentence(tmp_path):
    _error(_write(tmp_path, HEADER + b"good\t1\n   \t0\n"), "line 3", "sentence is empty")


def test_invalid_utf8(tmp_path):
    _error(_write(tmp_path, HEADER + b"good\t1\ncaf\xe9\t0\n"), "line 3", "UTF-8")


def test_invalid_utf8_in_header(tmp_path):
    _error(_write(tmp_path, b"sent\xffence\tlabel\ngood\t1\n"), "line 1", "UTF-8")


def test_nul_byte(tmp_path):
    _error(_write(tmp_path, HEADER + b"good\t1\nb\x00ad\t0\n"), "line 3", "NUL")


def test_utf16_file(tmp_path):
    _error(_write(tmp_path, "sentence\tlabel\ngood\t1\n".encode("utf-16")), "line 1")


def test_long_bad_label_message_is_short(tmp_path):
    msg = _error(_write(tmp_path, HEADER + b"good\t" + b"x" * 10_000 + b"\n"), "line 2")
    assert len(msg) < 400 + len(str(tmp_path))


# --- read_glue_dir ----------------------------------------------------------------


def _make_dir(tmp_path, files=("train.tsv", "dev.tsv")):
    d = tmp_path / "sst2"
    d.mkdir()
    for name in files:
        (d / name).write_bytes(HEADER + f"{name} good\t1\n{name} bad\t0\n".encode())
    return d


def test_read_glue_dir(tmp_path):
    train, dev = read_glue_dir(_make_dir(tmp_path))
    assert train[0] == {"sentence": "train.tsv good", "label": 1}
    assert dev[1] == {"sentence": "dev.tsv bad", "label": 0}
    # Arrow in GLUE SST-2's schema on the hub: a ClassLabel, 0 negative, 1 positive.
    assert train.features["label"].names == list(LABEL_NAMES) == ["negative", "positive"]


def _dir_error(d, *fragments):
    with pytest.raises(UsageError) as info:
        read_glue_dir(d)
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith(f"--data-dir {d}:")
    for f in fragments:
        assert f in msg, (f, msg)
    return msg


def test_data_dir_missing(tmp_path):
    _dir_error(tmp_path / "nope", "not found", "train.tsv and dev.tsv")


def test_data_dir_is_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    _dir_error(f, "not a directory")


def test_data_dir_missing_train(tmp_path):
    d = _make_dir(tmp_path, files=("dev.tsv",))
    msg = _dir_error(d, "missing train.tsv")
    assert msg == (
        f"--data-dir {d}: missing train.tsv (expected GLUE SST-2 layout: train.tsv and "
        "dev.tsv with header 'sentence<TAB>label')"
    )


def test_data_dir_missing_dev(tmp_path):
    _dir_error(_make_dir(tmp_path, files=("train.tsv",)), "missing dev.tsv")


def test_data_dir_bad_file_names_file(tmp_path):
    d = _make_dir(tmp_path)
    (d / "dev.tsv").write_bytes(HEADER + b"good\t5\n")
    with pytest.raises(UsageError, match=r"dev\.tsv line 2: label must be 0 or 1"):
        read_glue_dir(d)


# --- fuzz --------------------------------------------------------------------------

_pieces = st.sampled_from(
    [
        b"sentence",
        b"label",
        b"\t",
        b"\n",
        b"\r\n",
        b"0",
        b"1",
        b"2",
        b"good",
        b" ",
        b"\xef\xbb\xbf",
        b"\x00",
        b"\xff",
        b"\xe9",
        b'"',
        b"'",
        b"\r",
    ]
)
_fuzz_bytes = st.one_of(
    st.binary(max_size=300),
    st.lists(_pieces, max_size=40).map(b"".join),
    st.lists(_pieces, max_size=40).map(lambda ps: HEADER + b"".join(ps)),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=_fuzz_bytes)
def test_fuzz_never_crashes(tmp_path, data):
    p = _write(tmp_path, data, name="fuzz.tsv")
    try:
        rows = _rows(p)
    except UsageError as exc:
        assert "\n" not in str(exc) and str(p) in str(exc)
        return
    assert rows
    for r in rows:
        assert r["label"] in (0, 1)
        assert isinstance(r["sentence"], str) and r["sentence"].strip()
