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
        (
            ["pos", "pos", "pos"],
            {},
            "--train-file t.csv: the training data has a single class ('pos') in column 'label'; "
            "classification needs at least two",
        ),
        ([1, 1], {}, "single class ('1')"),
        (
            ["1", "0", "pos"],
            {},
            "--train-file t.csv: mixed label types in column 'label': numbers ('0', '1') and text ('pos'); "
            "use one type for every label",
        ),
        (
            ["a", None, "b", None],
            {},
            "--train-file t.csv: 2 of 4 rows have no label in column 'label' (first: data row 2); "
            "fill them in or remove those rows",
        ),
        (
            [0.5, 0.5],
            {},
            "--train-file t.csv: every training label in column 'label' is the same value; nothing to learn",
        ),
        (
            [0.5, 1.5],
            {"task_kind": "classification"},
            "--train-file t.csv: labels in column 'label' have fractional values; classes must be whole numbers or text",
        ),
        (
            ["a", "b"],
            {"task_kind": "regression"},
            "--task-kind regression, but the labels in column 'label' are text ('a', 'b'); regression needs numbers",
        ),
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
    assert str(raised.value) == (
        "--validation-file d.csv: validation label 'Sci/Tech' never seen in training "
        "(training labels: 'Business', 'Sports', 'World')"
    )
    with pytest.raises(
        UsageError,
        match=r"mixed label types: validation labels in column 'label' are int but "
        r"training labels are string",
    ):
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


# ---------------------------------------------------------------- issue 19: one normalisation


def test_label_key_is_the_one_rule():
    from mixft.data.labels import label_key

    assert {label_key(v) for v in ("1", "01", " 1 ", "+1", "1.0", 1, 1.0)} == {1}
    assert {label_key(v) for v in ("007", "7", 7.0)} == {7}
    assert label_key(" pos ") == "pos" and label_key("Pos") != label_key("pos")  # case is kept
    assert label_key("0.5") == 0.5 and label_key(True) is True


def test_one_label_in_two_unicode_forms_is_one_class():
    # Was: "café" with a combining accent (e + U+0301) and with é: 3 classes (café, café, thé), macro-F1 over a
    # class that was the same.
    decomposed, composed = "cafe\u0301", "caf\u00e9"
    info = _info([composed, decomposed, "th\u00e9", composed])
    assert info.names == (composed, "th\u00e9") and info.encode([decomposed, composed]) == [0, 0]


def test_spellings_of_one_label_are_one_class():
    # Were: " pos"/"pos" two classes; "007"/"7" "a single class" in CSV but two in JSON.
    info = _info([" pos", "pos", "neg ", "neg"])
    assert info.names == ("neg", "pos") and info.encode([" pos", "neg "]) == [1, 0]
    info = _info(["01", "1", "007", "7", "2"])
    assert info.names == ("1", "2", "7") and info.encode(["007", "01", "2"]) == [2, 0, 1]
    with pytest.raises(UsageError, match=r"single class \('7'\)"):
        _info(["007", "7"])


def test_numbers_as_text_follow_the_rule_of_numbers():
    # Was: string "1.0" refused for classification while float 1.0 was accepted.
    for labels in (["1.0", "0.0", "1.0"], [1.0, 0.0, 1.0]):
        assert _info(labels).kind == "regression"
        info = _info(labels, task_kind="classification")
        assert (info.names, info.encode(labels)) == (("0", "1"), [1, 0, 1])
    # A CSV's "0"/"1" and a JSON file's 0/1 are the same classes.
    check_eval_labels(_ds([1, 0]), "label", _info(["0", "1", "1"]), where=V)


def test_words_and_booleans_cannot_be_regressed():
    # Was: booleans with task_kind="regression" trained as classes, silently.
    with pytest.raises(UsageError, match=r"--task-kind regression, but the labels in column 'label' are true/false"):
        _info([True, False, True], task_kind="regression")


@pytest.mark.parametrize(
    "labels, message",
    [
        (
            [0.5, float("inf"), 1.5],
            "data row 2: label inf in column 'label' is not a finite number; fix or remove that row",
        ),
        ([0.5, 1.5, float("nan")], "data row 3: label nan in column 'label' is not a finite number"),
        (["0.5", "-Infinity", "1.5"], "data row 2: label -inf in column 'label' is not a finite number"),
        (
            [0.5, 1e200, 1.5],
            "data row 2: regression target 1e+200 in column 'label' is too large (beyond 1.84e+19, its "
            "squared error overflows float32); rescale the targets",
        ),
        (["0.5", "1.5", "-3e30"], "data row 3: regression target -3e+30"),
    ],
)
def test_non_finite_and_overflowing_targets_are_bad_data_named_by_row(labels, message):
    # Were: trained into a numeric collapse (exit 3, "lower the learning rate"), or NaN called "no label".
    with pytest.raises(UsageError) as info:
        _info(labels)
    assert f"{W}: {message}" in str(info.value)


def test_float16_labels(tmp_path, isolated_hf):
    # Was: ArrowNotImplementedError (no floor kernel for halffloat) from a Parquet float16 column.
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "t.parquet"
    labels = np.array([0.5, 1.0, 2.5, 3.0], dtype=np.float16)
    pq.write_table(pa.table({"text": ["a", "b", "c", "d"], "label": pa.array(labels)}), path)
    info = analyze_labels(load_data_file(path), "label", where=W)
    assert info.kind == "regression" and info.encode(labels.tolist()) == [0.5, 1.0, 2.5, 3.0]
    whole = tmp_path / "w.parquet"
    pq.write_table(pa.table({"text": ["a", "b"], "label": pa.array(np.array([0, 1], dtype=np.float16))}), whole)
    assert analyze_labels(load_data_file(whole), "label", where=W, task_kind="classification").names == ("0", "1")


def test_many_distinct_numbers_written_as_text_are_a_regression_target():
    # CSV cells are strings now: a 2000-value score column must still be a target, not "too many classes".
    info = _info([f"{i / 3:.4f}" for i in range(2 * MAX_CLASSES)])
    assert info.kind == "regression"


# ------------------------------------------------------------------------------------ a saved model's labels


def test_a_saved_models_labels_are_matched_by_name_in_any_order():
    from mixft.data.labels import ModelLabels, labels_for_model

    model = ModelLabels(("positive", "neutral", "negative"), "--model out/model")
    words = labels_for_model(_ds(["negative", "positive", "neutral", "negative"]), "label", model, where=V)
    assert words.names == model.names and words.encode(["negative", " positive", "neutral"]) == [2, 0, 1]
    # A ClassLabel in another order: its ids become the model's, through the names.
    other = ClassLabel(names=["negative", "neutral", "positive"])
    stored = labels_for_model(_ds([0, 2, 1], other), "label", model, where=V)
    assert stored.encode([0, 2, 1]) == [2, 0, 1]
    # Numbers and true/false are named as training names them ("1", "true").
    numbers = labels_for_model(_ds(["01", "0"]), "label", ModelLabels(("0", "1"), "m"), where=V)
    assert numbers.encode(["1", "00"]) == [1, 0]
    assert labels_for_model(_ds([True, False]), "label", ModelLabels(("false", "true"), "m"), where=V).encode(
        [True, False]
    ) == [1, 0]
    with pytest.raises(
        UsageError,
        match=r"labels 'meh', 'so-so' in column 'label' are not among the labels "
        r"--model out/model was fine-tuned for \(positive, neutral, negative\)",
    ):
        labels_for_model(_ds(["positive", "so-so", "meh"]), "label", model, where=V)
    with pytest.raises(UsageError, match="is a regression model, but the labels in column 'label' are text"):
        labels_for_model(_ds(["positive"]), "label", ModelLabels(None, "--model reg"), where=V)
    assert labels_for_model(_ds([1.5, 2.0]), "label", ModelLabels(None, "m"), where=V).kind == "regression"
