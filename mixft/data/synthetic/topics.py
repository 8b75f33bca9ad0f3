"""A built-in, generated 4-topic news dataset in AG News's schema (no download).

Usage::

    from mixft.data.synthetic.topics import TOPIC_NAMES, generate_topics, topics_splits
    rows = generate_topics(100, seed=0)      # [{"text": str, "label": int}, ...]
    train, dev = topics_splits(2000, 872)    # disjoint texts

Labels follow AG News: 0 World, 1 Sports, 2 Business, 3 Sci/Tech. A sentence is one main
clause (an action of its topic, done by an actor of that topic or, in a third of them, of
another topic), often joined to a second clause from a
*different* topic by a subordinating connective ("after", "as", "amid reports that"...,
before or after the main clause). The main clause decides the topic; the subordinate one
is a distractor with as many topic words, so a keyword vote is near 65% while the label
stays a deterministic function of the text. Dateline lead-ins and attributions
("..., officials said") are neutral.
"""

from __future__ import annotations

import random

from mixft.data.synthetic.common import check_size, disjoint_splits, distinct_rows, split_rng

DATASET_NAME = "mixft-generated-topics"
TOPIC_NAMES = ("World", "Sports", "Business", "Sci/Tech")

# Per topic: actors and actions (past tense). Some words recur across topics on purpose
# ("signed", "record", "launched"): a single word must not decide the topic.
ACTORS = (
    (
        "the prime minister",
        "rebel forces",
        "the united nations",
        "peace negotiators",
        "the foreign ministry",
        "opposition leaders",
        "the president",
        "border guards",
        "election monitors",
        "aid agencies",
        "the parliament",
        "protesters",
    ),
    (
        "the striker",
        "the home team",
        "the defending champions",
        "the coach",
        "the goalkeeper",
        "the veteran pitcher",
        "the olympic sprinter",
        "the captain",
        "the tennis star",
        "the rookie quarterback",
        "the league leaders",
        "the cycling team",
    ),
    (
        "the retailer",
        "shareholders",
        "the central bank",
        "the airline",
        "the carmaker",
        "investors",
        "the chief executive",
        "the oil company",
        "the insurer",
        "analysts",
        "the supermarket chain",
        "the mortgage lender",
    ),
    (
        "the software maker",
        "researchers",
        "the space agency",
        "the chip maker",
        "astronomers",
        "the search engine",
        "hackers",
        "engineers",
        "the robotics startup",
        "the smartphone maker",
        "scientists",
        "the browser developer",
    ),
)
ACTIONS = (
    (
        "called for a ceasefire",
        "signed a peace accord",
        "announced early elections",
        "imposed a curfew",
        "withdrew troops from the border",
        "condemned the bombing",
        "held talks on the refugee crisis",
        "expelled two diplomats",
        "declared a state of emergency",
        "approved new sanctions",
        "opened an inquiry into the massacre",
        "pledged humanitarian aid",
    ),
    (
        "scored twice in the second half",
        "won the championship final",
        "signed a new contract with the club",
        "set a world record in the relay",
        "was sent off in the derby",
        "clinched the title on the last day",
        "lost in straight sets",
        "returned from a knee injury",
        "beat the holders on penalties",
        "qualified for the playoffs",
        "broke the course record",
        "was suspended for three matches",
    ),
    (
        "posted record profits",
        "cut its growth forecast",
        "raised interest rates",
        "announced a merger",
        "cut two thousand jobs",
        "reported weaker quarterly sales",
        "agreed a takeover bid",
        "issued a profit warning",
        "raised fuel prices",
        "filed for bankruptcy",
        "launched a share offering",
        "beat earnings expectations",
    ),
    (
        "released a security patch",
        "launched a new satellite",
        "unveiled a faster processor",
        "discovered a new planet",
        "fixed a critical software bug",
        "launched an open source browser",
        "sequenced the genome of a rare orchid",
        "announced a quantum computing breakthrough",
        "shipped a new operating system",
        "broke into the email servers",
        "launched a rocket to the space station",
        "published a study on climate models",
    ),
)
# Connectives that make the clause they introduce subordinate (never the topic).
TRAILING = ("after", "as", "while", "just days after", "even as", "hours before")
LEADING = ("after", "as", "while", "even as", "amid reports that", "despite news that")
DATELINES = ("london", "new york", "tokyo", "paris", "sydney", "geneva", "toronto", "berlin")
SOURCES = ("reuters", "ap", "afp")
ATTRIBUTIONS = (", officials said", ", according to reports", ", sources said", ", it was reported")


CROSSED_ACTOR = 0.3  # main clauses whose actor belongs to another topic: the action decides


def _clause(rng: random.Random, topic: int, actor_topic: int | None = None) -> str:
    actor_topic = topic if actor_topic is None else actor_topic
    return f"{rng.choice(ACTORS[actor_topic])} {rng.choice(ACTIONS[topic])}"


def _text(rng: random.Random, topic: int) -> str:
    # A third of the main clauses pair the action with another topic's actor ("the striker
    # posted record profits" is Business): the model must learn that the action, not the
    # actor, names the topic. Measured: without these the shipped MiniLM reached 1.0 after
    # one epoch, which leaves FP32-vs-AMP nothing to compare.
    crossed = rng.random() < CROSSED_ACTOR
    actor_topic = rng.choice([t for t in range(len(TOPIC_NAMES)) if t != topic]) if crossed else topic
    main = _clause(rng, topic, actor_topic)
    form = rng.random()
    if form < 0.35:
        s = main
    else:
        other = _clause(rng, rng.choice([t for t in range(len(TOPIC_NAMES)) if t != topic]))
        if form < 0.7:
            s = f"{main} {rng.choice(TRAILING)} {other}"
        else:
            s = f"{rng.choice(LEADING)} {other}, {main}"
    if rng.random() < 0.2:
        s += rng.choice(ATTRIBUTIONS)
    s = s[0].upper() + s[1:] + "."
    if rng.random() < 0.3:
        s = f"{rng.choice(DATELINES).title()} ({rng.choice(SOURCES).upper()}) - {s}"
    return s


def _generate(n: int, rng: random.Random, exclude: frozenset | set = frozenset()) -> list[dict]:
    """``n`` rows, classes balanced to within one, distinct texts none of which is in ``exclude``."""
    labels = [i % len(TOPIC_NAMES) for i in range(n)]
    rng.shuffle(labels)

    def draw(label: int):
        text = _text(rng, label)
        return {"text": text, "label": label}, text, (text,)

    # The text space is large (about 10^6 per topic).
    return distinct_rows(labels, draw, exclude=exclude, tries=200, what="topic texts")


def generate_topics(n: int, seed: int = 0) -> list[dict]:
    """``n`` generated news texts with topic labels (0..3, see TOPIC_NAMES), deterministic per seed.

    Usage: ``rows = generate_topics(400, seed=1)``
    """
    check_size("n", n)
    return _generate(n, split_rng(DATASET_NAME, "train", seed))


def topics_splits(train_size: int = 2000, eval_size: int = 872, seed: int = 0) -> tuple[list[dict], list[dict]]:
    """Train and eval rows with no text in both; train equals ``generate_topics(train_size, seed)``.

    Usage: ``train, dev = topics_splits(2000, 872, seed=0)``
    """
    return disjoint_splits(_generate, DATASET_NAME, train_size, eval_size, seed, texts=lambda row: (row["text"],))
