"""Tests for mixft.data.synthetic.sentiment: determinism, balance, disjoint splits, and that the
task is not a keyword task while its labels still follow the generator's own rules."""

import random
import re
import time

import pytest

from mixft.data.synthetic import sentiment as generated
from mixft.data.synthetic.sentiment import (
    DATASET_NAME,
    NEGATIVE_WORDS,
    POSITIVE_WORDS,
    generate_sentiment,
    generated_splits,
)

_WORD = re.compile(r"[a-z']+")


def _words(text):
    return _WORD.findall(text)


def _keyword_vote(sentence):
    """Bag-of-single-words majority baseline: positive-lexicon count vs negative."""
    ws = _words(sentence)
    pos = sum(w in POSITIVE_WORDS for w in ws)
    neg = sum(w in NEGATIVE_WORDS for w in ws)
    return 1 if pos >= neg else 0


_NEGATORS = {"not", "never", "hardly", "nobody", "no", "nothing"}


def _clause_polarity(clause):
    ws = _words(clause)
    sentiment = [w for w in ws if w in POSITIVE_WORDS or w in NEGATIVE_WORDS]
    assert len(sentiment) == 1, (clause, sentiment)
    pol = 1 if sentiment[0] in POSITIVE_WORDS else 0
    negators = [w for w in ws if w in _NEGATORS or w.endswith("n't")] + (["far from"] if "far from" in clause else [])
    assert len(negators) <= 1, (clause, negators)
    return 1 - pol if negators else pol


def _reference_label(sentence):
    """An independent re-derivation of the label from the surface text."""
    s = sentence
    m = re.search(r" (but|yet) ", s)
    if m:
        return _clause_polarity(s[m.end() :])
    m = re.search(r"(^|, )(although|even though|while) ", s)
    if m and m.start() == 0:
        # "although A, B": the main clause B decides.
        return _clause_polarity(s[s.index(", ", m.end()) + 2 :])
    if m:
        # "B, although A": B still decides.
        return _clause_polarity(s[: m.start()])
    return _clause_polarity(s)


def test_dataset_name():
    assert DATASET_NAME == "mixft-generated-sentiment"


def test_schema_and_labels():
    rows = generate_sentiment(500, seed=1)
    assert len(rows) == 500
    for r in rows:
        assert set(r) == {"sentence", "label"}
        assert isinstance(r["sentence"], str) and r["sentence"].strip()
        assert r["label"] in (0, 1) and type(r["label"]) is int
        assert r["sentence"] == r["sentence"].lower()
        assert "\t" not in r["sentence"] and "\n" not in r["sentence"]


def test_deterministic_per_seed():
    assert generate_sentiment(300, seed=7) == generate_sentiment(300, seed=7)
    assert generate_sentiment(300, seed=7) != generate_sentiment(300, seed=8)
    assert generated_splits(200, 50, seed=3) == generated_splits(200, 50, seed=3)


def test_does_not_touch_global_random_state():
    random.seed(123)
    before = random.getstate()
    generate_sentiment(100, seed=0)
    generated_splits(100, 20, seed=0)
    assert random.getstate() == before


@pytest.mark.parametrize("n", [0, 1, 2, 3, 101, 1000])
def test_balanced(n):
    labels = [r["label"] for r in generate_sentiment(n, seed=2)]
    assert len(labels) == n
    assert labels.count(1) == n // 2
    assert labels.count(0) == n - n // 2


def test_rejects_bad_n():
    for bad in (-1, 1.5, "10", True):
        with pytest.raises(ValueError):
            generate_sentiment(bad)


def test_splits_disjoint_and_sized():
    train, dev = generated_splits()
    assert len(train) == 4000 and len(dev) == 872
    train_s = {r["sentence"] for r in train}
    dev_s = {r["sentence"] for r in dev}
    assert not train_s & dev_s
    assert len(dev_s) == len(dev)
    assert abs(sum(r["label"] for r in dev) - len(dev) / 2) <= 1
    assert train == generate_sentiment(4000, seed=0)


def test_word_lists_large_and_disjoint():
    assert len(generated.POSITIVE_ADJECTIVES) >= 25
    assert len(generated.NEGATIVE_ADJECTIVES) >= 25
    assert not POSITIVE_WORDS & NEGATIVE_WORDS
    # Neutral vocabulary must carry no sentiment, or the labels would be ambiguous.
    neutral = " ".join(
        generated.SUBJECTS
        + generated.KINDS
        + generated.INTENSIFIERS
        + generated.DOWNTONERS
        + generated.NEGATED_ADVERBS
        + generated.PREFIXES
        + generated.SUFFIXES
    )
    assert not set(_words(neutral)) & (POSITIVE_WORDS | NEGATIVE_WORDS)


def test_hard_phenomena_present():
    rows = generate_sentiment(2000, seed=0)

    def frac(pred):
        return sum(pred(r["sentence"]) for r in rows) / len(rows)

    has = lambda *ws: lambda s: any(w in _words(s) for w in ws)  # noqa: E731
    assert frac(has("not", "never")) > 0.1
    assert frac(lambda s: any(w.endswith("n't") for w in _words(s))) > 0.02
    assert frac(has("but", "yet")) > 0.1
    assert frac(has("although", "while")) > 0.05
    assert frac(lambda s: "even though" in s) > 0.02
    assert frac(has("absolutely", "remarkably", "truly", "thoroughly")) > 0.02
    assert frac(has("somewhat", "rather", "fairly", "slightly")) > 0.02
    subjects = {w for r in rows for w in _words(r["sentence"])}
    for w in ("film", "movie", "plot", "cast", "script", "soundtrack", "director"):
        assert w in subjects


def test_labels_follow_the_rules():
    # Every row's label matches an independent clause-level re-derivation:
    # the deciding clause's one sentiment word, flipped by its (at most one) negator.
    for r in generate_sentiment(2000, seed=5):
        assert _reference_label(r["sentence"]) == r["label"], r


def _is_contrast(sentence):
    return bool(re.search(r"\b(but|yet|although|though|while)\b", sentence))


def test_specific_phenomena_labelled_correctly():
    rows = generate_sentiment(3000, seed=11)
    single = [r for r in rows if not _is_contrast(r["sentence"])]
    # "the plot was not good": negation over a positive word is negative, and vice versa.
    neg_pos = [
        r for r in single if " not " in r["sentence"] and any(w in POSITIVE_WORDS for w in _words(r["sentence"]))
    ]
    neg_neg = [
        r for r in single if " never " in r["sentence"] and any(w in NEGATIVE_WORDS for w in _words(r["sentence"]))
    ]
    assert neg_pos and all(r["label"] == 0 for r in neg_pos)
    assert neg_neg and all(r["label"] == 1 for r in neg_neg)
    # "the score is lovely, but the story is a mess": the clause after "but" decides.
    contrast = [r for r in rows if ", but " in r["sentence"]]
    assert contrast
    for r in contrast:
        assert r["label"] == _clause_polarity(r["sentence"].split(", but ", 1)[1])
    # "although the start drags, the ending is wonderful": the main clause decides.
    although = [r for r in rows if r["sentence"].startswith("although ")]
    assert although
    for r in although:
        assert r["label"] == _clause_polarity(r["sentence"].split(", ", 1)[1])


def test_not_a_keyword_task():
    rows = generate_sentiment(2000, seed=0)
    acc = sum(_keyword_vote(r["sentence"]) == r["label"] for r in rows) / len(rows)
    assert acc < 0.75, acc  # clearly below 90%
    # ...while plain single-clause sentences alone are keyword-solvable, i.e. the lexicon
    # baseline is a fair one and the difficulty really comes from negation/contrast.
    plain = [r for r in rows if _reference_label(r["sentence"]) == _keyword_vote(r["sentence"])]
    assert len(plain) / len(rows) > 0.4


def test_fast():
    t = time.perf_counter()
    generate_sentiment(10_000, seed=0)
    assert time.perf_counter() - t < 1.0
