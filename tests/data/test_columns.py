"""mixft.data.columns: given and detected text / pair / label columns; every failure one line listing the columns."""

from __future__ import annotations

import pytest

from mixft.data.columns import Columns, check_columns, resolve_columns
from mixft.errors import UsageError

W = "--train-file t.csv"


@pytest.mark.parametrize(
    "columns, expected",
    [
        (["sentence", "label"], Columns("sentence", None, "label")),
        (["text", "labels"], Columns("text", None, "labels")),
        (["idx", "sentence1", "sentence2", "label"], Columns("sentence1", "sentence2", "label")),
        (["question1", "question2", "label"], Columns("question1", "question2", "label")),
        (["premise", "hypothesis", "label"], Columns("premise", "hypothesis", "label")),
        # QNLI has "sentence" too: the pair is found before the single text.
        (["question", "sentence", "label", "idx"], Columns("question", "sentence", "label")),
    ],
)
def test_detects_the_usual_names(columns, expected):
    assert resolve_columns(columns, where=W) == expected


def test_given_names_win_and_single_text_stays_single():
    cols = ["sentence1", "sentence2", "title", "score"]
    assert resolve_columns(cols, where=W, text_column="title", label_column="score") == Columns("title", None, "score")
    assert resolve_columns(
        cols, where=W, text_column="sentence2", text_pair_column="sentence1", label_column="score"
    ) == Columns("sentence2", "sentence1", "score")
    # A pair column alone takes its usual partner.
    assert resolve_columns(["premise", "hypothesis", "label"], where=W, text_pair_column="hypothesis") == Columns(
        "premise", "hypothesis", "label"
    )


@pytest.mark.parametrize(
    "columns, kwargs, message",
    [
        (
            ["sentence", "text", "label"],
            {},
            "--train-file t.csv: text column is ambiguous (sentence or text); pass --text-column; "
            "columns: 'sentence', 'text', 'label'",
        ),
        (
            ["sentence1", "sentence2", "premise", "hypothesis", "label"],
            {},
            "--train-file t.csv: text columns are ambiguous (sentence1/sentence2 or premise/hypothesis); "
            "pass --text-column and --text-pair-column; columns: 'sentence1', 'sentence2', 'premise', 'hypothesis', 'label'",
        ),
        (
            ["review", "stars"],
            {},
            "--train-file t.csv: found no text column (looked for sentence, text or a pair such as sentence1/sentence2); "
            "pass --text-column; columns: 'review', 'stars'",
        ),
        (
            ["text", "label", "labels"],
            {},
            "--train-file t.csv: label column is ambiguous (label or labels); pass --label-column; "
            "columns: 'text', 'label', 'labels'",
        ),
        (
            ["text", "stars"],
            {},
            "--train-file t.csv: found no label column (looked for label, labels); pass --label-column; "
            "columns: 'text', 'stars'",
        ),
        (
            ["text", "label"],
            {"text_column": "review"},
            "--train-file t.csv: no column 'review' (--text-column); columns: 'text', 'label'",
        ),
        (
            ["text", "label"],
            {"label_column": "stars"},
            "--train-file t.csv: no column 'stars' (--label-column); columns: 'text', 'label'",
        ),
        # A pair column on single-text data.
        (
            ["text", "label"],
            {"text_pair_column": "text2"},
            "--train-file t.csv: no column 'text2' (--text-pair-column) (single-text data?); columns: 'text', 'label'",
        ),
        (
            ["text", "label"],
            {"text_column": "text", "text_pair_column": "text"},
            "--train-file t.csv: --text-pair-column text is also the text column; columns: 'text', 'label'",
        ),
        (
            ["text", "label"],
            {"text_column": "label"},
            "--train-file t.csv: column 'label' cannot be both text and label; columns: 'text', 'label'",
        ),
    ],
)
def test_failures_are_one_line_listing_the_columns(columns, kwargs, message):
    with pytest.raises(UsageError) as info:
        resolve_columns(columns, where=W, **kwargs)
    assert str(info.value) == message


def test_validation_data_must_have_the_chosen_columns():
    chosen = Columns("sentence1", "sentence2", "label")
    check_columns(["label", "sentence2", "sentence1", "idx"], chosen, where="--validation-file d.csv")
    with pytest.raises(UsageError) as info:
        check_columns(["sentence1", "label"], chosen, where="--validation-file d.csv")
    assert str(info.value) == (
        "--validation-file d.csv: no column 'sentence2' (found in the training data); columns: 'sentence1', 'label'"
    )
