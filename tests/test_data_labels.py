"""mixft.data.labels: each label kind, names and ids, and each label error in one line."""

from __future__ import annotations

import pytest
from datasets import ClassLabel, Dataset, Features, Value

from mixft.data.files import load_data_file
from mixft.data.labels import MAX_CLASSES, analyze_labels, check_eval_labels
from mixft.errors import UsageError

W = "--train-file t.csv"
V = "--validation-file d.csv"


def _ds(labels, feature=None):
    features = Features({"text": Value("string"), "label": feature}) if feature is not None else None
    return Dataset.from_dict({"text": [f"t{i}" for i in range(len(labels))], "label": labels}, features=features)


def _info(labels, **kwargs):
    return analyze_labels(_ds(labels), "label", where=W, **kwargs)


# ------------------------------------------------------------------------------------ kinds


def test_string_labels_map_in_sorted_order():
    info = _info(["Sports", "World", "Business", "Sports", "Sci/Tech"])
    assert (info.kind, info.value_type, info.num_labels) == ("classification", "string", 4)
    assert info.id2label == {0: "Business", 1: "Sci/Tech", 2: "Sports", 3: "World"}
    assert info.label2id == {"Business": 0, "Sci/Tech": 1, "Sports": 2, "World": 3}
    assert info.encode(["World", "Business", "Sports"]) == [3, 0, 2]


def test_integer_labels_become_contiguous_ids():
    info = _info([0, 1, 1, 0])
    assert info.names == ("0", "1") and info.encode([1, 0]) == [1, 0]  # 0..K-1 stays as it is
    info = _info([5, 1, 3, 3])  # star ratings 1, 3, 5
    assert info.names == ("1", "3", "5") and info.encode([1, 3, 5]) == [0, 1, 2]


def test_integers_written_as_text_sort_numerically():
    info = _info(["10", "2", "1", "2"])
    assert info.names == ("1", "2", "10") and info.encode(["10", "1"]) == [2, 0]


def test_booleans():
    info = _info([True, False, True])
    assert info.names == ("false", "true") and info.encode([True, False]) == [1, 0]


def test_floats_are_regression_unless_told_classification():
    info = _info([0.5, 3.25, 4.0])
    assert (info.kind, info.num_labels, info.names) == ("regression", 1, ())
    assert info.encode([0.5, 4.0]) == [0.5, 4.0]
    # Whole-number floats: regression by default, classes when the caller says so.
    assert _info([1.0, 2.0, 1.0]).kind == "regression"
    info = _info([1.0, 2.0, 1.0], task_kind="classification")
    assert (info.kind, info.names, info.encode([2.0, 1.0])) == ("classification", ("1", "2"), [1, 0])
    # And integer labels can be a regression target.
    assert _info([1, 2, 5], task_kind="regression").encode([5]) == [5.0]


def test_classlabel_keeps_ids_and_names():
    feature = ClassLabel(names=["entailment", "neutral", "contradiction"])
    info = analyze_labels(_ds([2, 0, 1, 2], feature), "label", where=W)
    assert info.value_type == "classlabel"
    assert info.id2label == {0: "entailment", 1: "neutral", 2: "contradiction"}
    assert info.encode([2, 0]) == [2, 0]


# ----------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "labels, kwargs, message",
    [
        (["pos", "pos", "pos"], {},
         "--train-file t.csv: the training data has a single class ('pos') in column 'label'; "
         "classification needs at least two"),
        ([1, 1], {}, "single class ('1')"),
        (["1", "0", "pos"], {},
         "--train-file t.csv: mixed label types in column 'label': numbers ('0', '1') and text ('pos'); "
         "use one type for every label"),
        (["a", None, "b", None], {},
         "--train-file t.csv: 2 of 4 rows have no label in column 'label' (first: data row 2); "
         "fill them in or remove those rows"),
        ([0.5, 0.5], {}, "--train-file t.csv: every training label in column 'label' is the same value; nothing to learn"),
        ([0.5, 1.5], {"task_kind": "classification"},
         "--train-file t.csv: labels in column 'label' have fractional values; classes must be whole numbers or text"),
        (["a", "b"], {"task_kind": "regression"},
         "--task-kind regression, but the labels in column 'label' are text ('a', 'b'); regression needs numbers"),
        ([0, 1], {"task_kind": "ranking"}, "unknown task kind 'ranking'; task kinds: classification, regression"),
    ],
)
def test_label_errors(labels, kwargs, message):
    with pytest.raises(UsageError) as info:
        _info(labels, **kwargs)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_too_many_classes():
    with pytest.raises(UsageError, match=f"more than {MAX_CLASSES} distinct values"):
        _info([f"id{i}" for i in range(MAX_CLASSES + 1)])
    # ...but many distinct floats are just a regression target.
    assert _info([i / 7 for i in range(MAX_CLASSES + 5)]).kind == "regression"


def test_missing_labels_in_a_csv(tmp_path, isolated_hf):
    # pandas reads an empty cell as NaN; the Arrow column then holds a null.
    path = tmp_path / "t.csv"
    path.write_text("text,label\na,1\nb,\nc,0\n", encoding="utf-8")
    with pytest.raises(UsageError, match=r"1 of 3 rows have no label in column 'label' \(first: data row 2\)"):
        analyze_labels(load_data_file(path), "label", where=W)


def test_mixed_types_in_a_json_lines_file(tmp_path, isolated_hf):
    path = tmp_path / "t.jsonl"
    path.write_text('{"text": "a", "label": 1}\n{"text": "b", "label": "pos"}\n', encoding="utf-8")
    with pytest.raises(UsageError, match=r"mixed label types in column 'label' \(int and str\)"):
        analyze_labels(load_data_file(path), "label", where=W)


def test_classlabel_negative_ids_are_missing_labels():
    feature = ClassLabel(names=["negative", "positive"])
    with pytest.raises(UsageError, match="1 of 3 rows have no label"):
        analyze_labels(_ds([0, -1, 1], feature), "label", where=W)


# ------------------------------------------------------------------------- validation data


def test_validation_labels_checked_against_training():
    info = _info(["Sports", "World", "Business"])
    check_eval_labels(_ds(["World", "Sports"]), "label", info, where=V)
    with pytest.raises(UsageError) as raised:
        check_eval_labels(_ds(["World", "Sci/Tech"]), "label", info, where=V)
    assert str(raised.value) == ("--validation-file d.csv: validation label 'Sci/Tech' never seen in training "
                                 "(training labels: 'Business', 'Sports', 'World')")
    with pytest.raises(UsageError, match=r"mixed label types: validation labels in column 'label' are int but "
                                         r"training labels are string"):
        check_eval_labels(_ds([0, 1]), "label", info, where=V)
    with pytest.raises(UsageError, match="no label"):
        check_eval_labels(_ds(["World", None]), "label", info, where=V)


def test_validation_numbers_mix_ints_and_whole_floats():
    info = _info([0, 1, 2])
    check_eval_labels(_ds([0.0, 2.0]), "label", info, where=V)
    with pytest.raises(UsageError, match=r"validation label 3 never seen in training"):
        check_eval_labels(_ds([3.0, 2.0]), "label", info, where=V)
    with pytest.raises(UsageError, match="fractional"):
        check_eval_labels(_ds([0.5, 2.0]), "label", info, where=V)


def test_validation_classlabel_ids_unseen_in_training():
    feature = ClassLabel(names=["entailment", "neutral", "contradiction"])
    info = analyze_labels(_ds([0, 1, 0], feature), "label", where=W)
    with pytest.raises(UsageError, match="validation label 'contradiction' never seen in training"):
        check_eval_labels(_ds([0, 2], feature), "label", info, where=V)


def test_regression_validation_accepts_any_numbers():
    info = _info([0.5, 3.25, 4.0])
    check_eval_labels(_ds([10.0, -2.5]), "label", info, where=V)
    check_eval_labels(_ds([1, 2]), "label", info, where=V)
    with pytest.raises(UsageError, match="mixed label types"):
        check_eval_labels(_ds(["high", "low"]), "label", info, where=V)
