"""A built-in, generated sentence-pair paraphrase dataset in GLUE MRPC's schema (no download).

Usage::

    from mixft.data.synthetic.paraphrase import LABEL_NAMES, generate_paraphrase, paraphrase_splits
    rows = generate_paraphrase(100, seed=0)  # [{"sentence1", "sentence2", "label", "idx"}, ...]
    train, dev = paraphrase_splits(2000, 872)

Labels follow MRPC: 1 equivalent, 0 not_equivalent. Each pair describes a business event
(who bought, sued or overtook whom, for how much, on which day). Equivalent pairs render
the *same* event twice in independently chosen wording: active or passive voice,
synonymous verbs ("acquired" / "bought" / "took over"), a company's short or long name,
"$3 million" / "three million dollars", the day in front or at the end. Non-equivalent
pairs render an event and a copy with exactly one change of meaning: roles swapped (same
words, other meaning), another company, verb, amount or day, or a negation. Both classes
overlap heavily in words, so word overlap does not decide the label, yet the label is a
deterministic function of the two texts.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from mixft.data.synthetic.common import check_size, disjoint_splits, distinct_rows, split_rng

DATASET_NAME = "mixft-generated-paraphrase"
LABEL_NAMES = ("not_equivalent", "equivalent")

# (short name, long name): either one names the company.
COMPANIES = (
    ("Acme", "Acme Corp"),
    ("Globex", "Globex Corporation"),
    ("Initech", "Initech Inc"),
    ("Hooli", "Hooli Inc"),
    ("Soylent", "Soylent Group"),
    ("Vandelay", "Vandelay Industries"),
    ("Umbrella", "Umbrella Holdings"),
    ("Cyberdyne", "Cyberdyne Systems"),
    ("Wonka", "Wonka Industries"),
    ("Tyrell", "Tyrell Corp"),
    ("Massive Dynamic", "Massive Dynamic Inc"),
    ("Oscorp", "Oscorp Industries"),
)
# Per event: synonymous (active, passive-with-agent, negated active, negated passive) forms.
# The passive form is followed by the agent: "B was acquired by A" means "A acquired B".
VERBS = {
    "buy": (
        ("acquired", "was acquired by", "did not acquire", "was not acquired by"),
        ("bought", "was bought by", "did not buy", "was not bought by"),
        ("took over", "was taken over by", "did not take over", "was not taken over by"),
    ),
    "sue": (
        ("sued", "was sued by", "did not sue", "was not sued by"),
        (
            "filed a lawsuit against",
            "faced a lawsuit from",
            "did not file a lawsuit against",
            "did not face a lawsuit from",
        ),
        (
            "took legal action against",
            "was taken to court by",
            "did not take legal action against",
            "was not taken to court by",
        ),
    ),
    "overtake": (
        ("overtook", "was overtaken by", "did not overtake", "was not overtaken by"),
        ("surpassed", "was surpassed by", "did not surpass", "was not surpassed by"),
        ("moved ahead of", "fell behind", "did not move ahead of", "did not fall behind"),
    ),
}
EVENTS = tuple(VERBS)
NUMBER_WORDS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine"}
UNITS = ("million", "billion")
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday")


@dataclass(frozen=True)
class Event:
    """The meaning of a sentence: two sentences are equivalent exactly when their events are equal."""

    agent: int  # index into COMPANIES
    event: str  # key of VERBS
    patient: int
    amount: tuple[int, str] | None  # (number, unit); "buy" and "sue" only
    day: str | None
    negated: bool


def _random_event(rng: random.Random) -> Event:
    agent, patient = rng.sample(range(len(COMPANIES)), 2)
    event = rng.choice(EVENTS)
    amount = None
    if event != "overtake" and rng.random() < 0.5:
        amount = (rng.choice(tuple(NUMBER_WORDS)), rng.choice(UNITS))
    day = rng.choice(DAYS) if rng.random() < 0.6 else None
    return Event(agent, event, patient, amount, day, rng.random() < 0.15)


def _changed(rng: random.Random, e: Event) -> Event:
    """A copy of ``e`` with exactly one change of meaning."""
    options = ["swap", "company", "event", "negation"]
    if e.amount is not None:
        options.append("amount")
    if e.day is not None:
        options.append("day")
    change = rng.choice(options)
    if change == "swap":
        return replace(e, agent=e.patient, patient=e.agent)
    if change == "company":
        taken = {e.agent, e.patient}
        new = rng.choice([i for i in range(len(COMPANIES)) if i not in taken])
        return replace(e, agent=new) if rng.random() < 0.5 else replace(e, patient=new)
    if change == "event":
        event = rng.choice([v for v in EVENTS if v != e.event])
        return replace(e, event=event, amount=None if event == "overtake" else e.amount)
    if change == "negation":
        return replace(e, negated=not e.negated)
    if change == "amount":
        number, unit = e.amount
        if rng.random() < 0.5:
            return replace(e, amount=(rng.choice([n for n in NUMBER_WORDS if n != number]), unit))
        return replace(e, amount=(number, "billion" if unit == "million" else "million"))
    return replace(e, day=rng.choice([d for d in DAYS if d != e.day]))


def _company(rng: random.Random, index: int) -> str:
    return rng.choice(COMPANIES[index])


def _amount(rng: random.Random, e: Event) -> str:
    if e.amount is None:
        return ""
    number, unit = e.amount
    money = rng.choice((f"${number} {unit}", f"{number} {unit} dollars", f"{NUMBER_WORDS[number]} {unit} dollars"))
    return f" for {money}" + (" in damages" if e.event == "sue" else "")


def render(rng: random.Random, e: Event) -> str:
    """One sentence stating ``e``, in randomly chosen but meaning-preserving wording.

    Usage: ``render(random.Random(0), Event(0, "buy", 1, (3, "million"), "Monday", False))``
    """
    forms = rng.choice(VERBS[e.event])
    passive = rng.random() < 0.5
    verb = forms[2 * e.negated + passive]
    first, second = (e.patient, e.agent) if passive else (e.agent, e.patient)
    clause = f"{_company(rng, first)} {verb} {_company(rng, second)}{_amount(rng, e)}"
    if e.event == "overtake":
        clause += " in annual sales"
    if e.day is None:
        return clause + "."
    if rng.random() < 0.5:
        return f"On {e.day}, {clause}."
    return f"{clause} on {e.day}."


def _pair(rng: random.Random, label: int) -> tuple[str, str]:
    first = _random_event(rng)
    second = first if label == 1 else _changed(rng, first)
    s1 = render(rng, first)
    for _ in range(20):  # an equivalent pair should never be the same string twice
        s2 = render(rng, second)
        if s2 != s1:
            break
    return s1, s2


def _generate(n: int, rng: random.Random, exclude: frozenset | set = frozenset()) -> list[dict]:
    """``n`` rows, balanced labels, no sentence repeated as a first sentence and none in ``exclude``."""
    labels = [1] * (n // 2) + [0] * (n - n // 2)
    rng.shuffle(labels)
    index = iter(range(n))

    def draw(label: int):
        s1, s2 = _pair(rng, label)
        return {"sentence1": s1, "sentence2": s2, "label": label}, s1, (s1, s2)

    rows = distinct_rows(labels, draw, exclude=exclude, tries=200, what="sentence pairs")
    return [{**row, "idx": next(index)} for row in rows]


def generate_paraphrase(n: int, seed: int = 0) -> list[dict]:
    """``n`` generated sentence pairs labelled 1 (equivalent) or 0, deterministic per seed.

    Usage: ``rows = generate_paraphrase(200, seed=0)``
    """
    check_size("n", n)
    return _generate(n, split_rng(DATASET_NAME, "train", seed))


def paraphrase_splits(train_size: int = 2000, eval_size: int = 872, seed: int = 0) -> tuple[list[dict], list[dict]]:
    """Train and eval pairs; no eval sentence appears anywhere in train.

    Usage: ``train, dev = paraphrase_splits(2000, 872, seed=0)``
    """
    return disjoint_splits(
        _generate, DATASET_NAME, train_size, eval_size, seed, texts=lambda row: (row["sentence1"], row["sentence2"])
    )
