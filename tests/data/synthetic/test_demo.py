"""The generated topic and paraphrase sets, and the demo files: deterministic, balanced, disjoint,
labelled as an independent reading of the text says, and not solvable by a keyword count."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from mixft.data.synthetic import paraphrase, topics
from mixft.data.synthetic.paraphrase import COMPANIES, VERBS, generate_paraphrase, paraphrase_splits
from mixft.data.synthetic.topics import TOPIC_NAMES, generate_topics, topics_splits
from scripts.make_demo_data import DEMO_FILES, write_demo_files

ROOT = Path(__file__).resolve().parents[3]

# ------------------------------------------------------------------------------------ topics


def _reference_topic(text: str) -> int:
    """The topic read back from the text: the action of the main clause (its actor may be another topic's)."""
    return _main_clause_topics(text)[1]


def _main_clause_topics(text: str) -> tuple[int, int]:
    """(the main clause's actor topic, its action topic), parsed back from the text."""
    s = re.sub(r"^[A-Z][A-Za-z ]+ \([A-Z]+\) - ", "", text).rstrip(".")
    s = s[0].lower() + s[1:]
    lead = next((c for c in sorted(topics.LEADING, key=len, reverse=True) if s.startswith(c + " ")), None)
    main = s.split(", ", 1)[1] if lead else s
    actor = [k for k in range(4) if any(main.startswith(a + " ") for a in topics.ACTORS[k])]
    assert len(actor) == 1, (text, actor)
    clause = next(main[len(a) + 1 :] for a in topics.ACTORS[actor[0]] if main.startswith(a + " "))
    found = [k for k in range(4) if any(clause.startswith(action) for action in topics.ACTIONS[k])]
    assert len(found) == 1, (text, found)
    return actor[0], found[0]


def _keyword_vote(text: str) -> int:
    """Bag-of-words: each word unique to one topic's vocabulary votes for it."""
    owner = {}
    for k in range(4):
        for phrase in topics.ACTORS[k] + topics.ACTIONS[k]:
            for word in phrase.split():
                owner.setdefault(word, set()).add(k)
    votes = Counter(next(iter(owner[w])) for w in re.findall(r"[a-z]+", text.lower()) if len(owner.get(w, ())) == 1)
    return votes.most_common(1)[0][0]


def test_topics_deterministic_balanced_and_disjoint():
    assert generate_topics(300, seed=4) == generate_topics(300, seed=4)
    assert generate_topics(300, seed=4) != generate_topics(300, seed=5)
    train, dev = topics_splits(400, 200, seed=1)
    assert train == generate_topics(400, seed=1)
    assert Counter(r["label"] for r in train) == {0: 100, 1: 100, 2: 100, 3: 100}
    assert not {r["text"] for r in train} & {r["text"] for r in dev}
    assert len({r["text"] for r in train}) == 400


def test_topics_labels_follow_the_main_clause_and_beat_a_keyword_vote():
    rows = generate_topics(2000, seed=0)
    assert all(_reference_topic(r["text"]) == r["label"] for r in rows)
    keyword = sum(_keyword_vote(r["text"]) == r["label"] for r in rows) / len(rows)
    assert 0.4 < keyword < 0.75, keyword  # learnable signal, but a keyword count is far from solving it
    # About a third of main clauses pair the action with another topic's actor.
    crossed = sum(_main_clause_topics(r["text"])[0] != r["label"] for r in rows) / len(rows)
    assert 0.25 < crossed < 0.35, crossed
    # Most texts carry a distractor: a clause whose actor belongs to another topic.
    distracted = sum(
        any(a in r["text"].lower() for k in range(4) if k != r["label"] for a in topics.ACTORS[k]) for r in rows
    )
    assert distracted > len(rows) // 2, distracted
    assert TOPIC_NAMES == ("World", "Sports", "Business", "Sci/Tech")  # AG News's label order


# -------------------------------------------------------------------------------- paraphrase

_NAMES = {name: i for i, pair in enumerate(COMPANIES) for name in pair}
# every verb form -> (event, passive, negated), longest first so "did not take over" beats "took over"
_FORMS = sorted(
    (
        (form, (event, index % 2 == 1, index >= 2))
        for event, groups in VERBS.items()
        for group in groups
        for index, form in enumerate(group)
    ),
    key=lambda item: -len(item[0]),
)
_WORD_NUMBERS = {word: n for n, word in paraphrase.NUMBER_WORDS.items()}


def _reference_event(sentence: str) -> tuple:
    """The event a sentence states, parsed back from the text alone."""
    s = sentence.rstrip(".")
    day = None
    m = re.match(r"On (\w+day), ", s) or re.search(r" on (\w+day)$", s)
    if m:
        day = m.group(1)
        s = s[len(m.group(0)) :] if m.start() == 0 else s[: m.start()]
    s = s.removesuffix(" in annual sales")
    amount = None
    m = re.search(r" for (?:\$(\d) (million|billion)|(\w+) (million|billion) dollars)( in damages)?$", s)
    if m:
        number = (
            int(m.group(1)) if m.group(1) else (int(m.group(3)) if m.group(3).isdigit() else _WORD_NUMBERS[m.group(3)])
        )
        amount = (number, m.group(2) or m.group(4))
        s = s[: m.start()]
    form, (event, passive, negated) = next((f, meaning) for f, meaning in _FORMS if f" {f} " in s)
    first, second = (_NAMES[part] for part in s.split(f" {form} "))
    agent, patient = (second, first) if passive else (first, second)
    return agent, event, patient, amount, day, negated


def test_paraphrase_deterministic_balanced_and_disjoint():
    assert generate_paraphrase(200, seed=2) == generate_paraphrase(200, seed=2)
    assert generate_paraphrase(200, seed=2) != generate_paraphrase(200, seed=3)
    train, dev = paraphrase_splits(400, 200, seed=0)
    assert Counter(r["label"] for r in train) == {0: 200, 1: 200}
    train_sentences = {s for r in train for s in (r["sentence1"], r["sentence2"])}
    assert not train_sentences & {s for r in dev for s in (r["sentence1"], r["sentence2"])}
    assert all(r["sentence1"] != r["sentence2"] for r in train + dev)
    assert [r["idx"] for r in train] == list(range(400))


def test_paraphrase_label_is_equality_of_meaning_and_beats_word_overlap():
    rows = generate_paraphrase(1000, seed=0)
    for r in rows:
        assert (_reference_event(r["sentence1"]) == _reference_event(r["sentence2"])) == bool(r["label"]), r

    def overlap(r):
        a, b = (set(re.findall(r"\w+", r[k].lower())) for k in ("sentence1", "sentence2"))
        return len(a & b) / len(a | b)

    best = max(
        sum((overlap(r) >= t) == bool(r["label"]) for r in rows) / len(rows) for t in [i / 50 for i in range(51)]
    )
    assert best < 0.75, best
    # Same words, other meaning: role swaps are in the set.
    assert any(r["label"] == 0 and sorted(r["sentence1"].split()) == sorted(r["sentence2"].split()) for r in rows)


# ------------------------------------------------------------------------------- demo files


def test_demo_files_and_script(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "make_demo_data.py"),
            "--out",
            str(tmp_path / "demo"),
            "--train-size",
            "40",
            "--eval-size",
            "12",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(tmp_path / "demo" / name) for name in DEMO_FILES]
    lines = (tmp_path / "demo" / "topics_train.csv").read_text(encoding="utf-8").splitlines()
    assert lines[0] == "text,label" and len(lines) == 41
    assert {line.rsplit(",", 1)[1] for line in lines[1:]} == set(TOPIC_NAMES)
    pairs = [json.loads(line) for line in (tmp_path / "demo" / "paraphrase_validation.jsonl").read_text().splitlines()]
    assert len(pairs) == 12 and set(pairs[0]) == {"sentence1", "sentence2", "label"}
    # The library call writes the same bytes.
    write_demo_files(tmp_path / "again", train_size=40, eval_size=12)
    for name in DEMO_FILES:
        assert (tmp_path / "again" / name).read_bytes() == (tmp_path / "demo" / name).read_bytes()


@pytest.mark.usefixtures("isolated_hf")
def test_demo_files_load_as_user_data(tmp_path):
    from mixft.data.user_data import load_text_data

    write_demo_files(tmp_path, train_size=60, eval_size=20, seed=0)
    data = load_text_data(train_file=tmp_path / "topics_train.csv", validation_file=tmp_path / "topics_validation.csv")
    assert (data.task.kind, data.task.text_columns) == ("classification", ("text",))
    assert data.task.id2label == {0: "Business", 1: "Sci/Tech", 2: "Sports", 3: "World"}  # sorted string labels
    pairs = load_text_data(
        train_file=tmp_path / "paraphrase_train.jsonl", validation_file=tmp_path / "paraphrase_validation.jsonl"
    )
    assert (pairs.task.text_columns, pairs.task.num_labels) == (("sentence1", "sentence2"), 2)
    assert (len(pairs.train), len(pairs.eval)) == (60, 20)
