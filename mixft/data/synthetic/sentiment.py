"""A built-in, generated movie-review sentiment dataset (SST-2 schema, no download).

Usage::

    from mixft.data.synthetic.sentiment import DATASET_NAME, generate_sentiment, generated_splits
    train, dev = generated_splits()            # 4000 / 872 rows, disjoint sentences
    rows = generate_sentiment(100, seed=3)     # [{"sentence": str, "label": int}, ...]

The bert-sst2 recipe's stand-in for GLUE SST-2 (``stand_ins.SST2``) when there is no hub
access and no ``--data-dir``. Labels follow SST-2 (1 positive,
0 negative). The text is lowercase like SST-2 and is built so that no single keyword
decides the label: besides plain statements ("the acting was superb") it has negation
that flips polarity ("the plot was not good"), contrast clauses where the clause after
"but"/"yet" (or the main clause of an "although" sentence) decides, and intensifiers /
downtoners that do not change polarity. Every sentence contains exactly one
sentiment-bearing word per clause and at most one negator per clause, so the label is
a deterministic function of the text (a model can reach 100%), while a bag-of-words
keyword vote is near 60%.
"""

from __future__ import annotations

import random

from mixft.data.synthetic.common import check_size, disjoint_splits, distinct_rows

DATASET_NAME = "mixft-generated-sentiment"

# --- lexicon -----------------------------------------------------------------------
# Single words so a keyword baseline (and the tests) can count them directly.
POSITIVE_ADJECTIVES = (
    "superb",
    "wonderful",
    "brilliant",
    "moving",
    "gripping",
    "charming",
    "delightful",
    "clever",
    "lovely",
    "engaging",
    "stunning",
    "funny",
    "heartfelt",
    "powerful",
    "thoughtful",
    "witty",
    "memorable",
    "beautiful",
    "compelling",
    "inventive",
    "touching",
    "sharp",
    "elegant",
    "fresh",
    "haunting",
    "exhilarating",
    "masterful",
    "warm",
    "riveting",
    "tender",
    "smart",
    "satisfying",
    "graceful",
    "vivid",
    "good",
    "great",
    "excellent",
    "terrific",
)
NEGATIVE_ADJECTIVES = (
    "dull",
    "boring",
    "tedious",
    "clumsy",
    "bland",
    "awful",
    "dreadful",
    "lifeless",
    "predictable",
    "messy",
    "shallow",
    "forgettable",
    "pointless",
    "tiresome",
    "flat",
    "hollow",
    "stale",
    "incoherent",
    "sloppy",
    "lazy",
    "ugly",
    "grating",
    "overlong",
    "contrived",
    "muddled",
    "insipid",
    "wooden",
    "painful",
    "mediocre",
    "trite",
    "unfunny",
    "cheap",
    "bloated",
    "bad",
    "terrible",
    "weak",
    "annoying",
)
# (past tense, base form) for "i loved the cast" / "i did not love the cast".
POSITIVE_VERBS = (
    ("loved", "love"),
    ("enjoyed", "enjoy"),
    ("adored", "adore"),
    ("admired", "admire"),
    ("appreciated", "appreciate"),
    ("relished", "relish"),
    ("treasured", "treasure"),
)
NEGATIVE_VERBS = (
    ("hated", "hate"),
    ("disliked", "dislike"),
    ("loathed", "loathe"),
    ("resented", "resent"),
    ("despised", "despise"),
    ("detested", "detest"),
)
# Bare nouns; the article is chosen at generation time ("a triumph", "an embarrassment").
POSITIVE_NOUNS = (
    "triumph",
    "joy",
    "delight",
    "gem",
    "treat",
    "masterpiece",
    "pleasure",
    "revelation",
    "knockout",
    "marvel",
)
NEGATIVE_NOUNS = (
    "mess",
    "disaster",
    "chore",
    "slog",
    "failure",
    "letdown",
    "bore",
    "embarrassment",
    "misfire",
    "dud",
)

POSITIVE_WORDS = frozenset(POSITIVE_ADJECTIVES + POSITIVE_NOUNS + tuple(w for pair in POSITIVE_VERBS for w in pair))
NEGATIVE_WORDS = frozenset(NEGATIVE_ADJECTIVES + NEGATIVE_NOUNS + tuple(w for pair in NEGATIVE_VERBS for w in pair))

# --- neutral vocabulary (must contain no sentiment words and no negators) ------------
SUBJECTS = (
    "the film",
    "the movie",
    "the plot",
    "the cast",
    "the script",
    "the soundtrack",
    "the director",
    "the acting",
    "the dialogue",
    "the cinematography",
    "the pacing",
    "the ending",
    "the lead performance",
    "the screenplay",
    "the story",
    "the score",
    "the editing",
    "the camera work",
    "the humor",
    "the visual effects",
    "the final act",
    "the premise",
    "this picture",
    "the opening",
    "the villain",
    "the production design",
    "the central romance",
    "the supporting cast",
    "the third act",
    "the sequel",
    "the documentary",
    "the animation",
    "it",
)
# Countable nouns for "a thoroughly charming thriller".
KINDS = (
    "film",
    "movie",
    "picture",
    "thriller",
    "comedy",
    "drama",
    "romance",
    "documentary",
    "western",
    "musical",
    "sequel",
    "debut",
    "story",
)
INTENSIFIERS = (
    "absolutely",
    "remarkably",
    "truly",
    "really",
    "incredibly",
    "thoroughly",
    "utterly",
    "genuinely",
    "deeply",
    "surprisingly",
    "consistently",
    "very",
)
DOWNTONERS = (
    "somewhat",
    "rather",
    "fairly",
    "slightly",
    "a bit",
    "a little",
    "mildly",
    "mostly",
    "quite",
    "occasionally",
)
# Adverbs that read naturally after a negator ("not particularly funny").
NEGATED_ADVERBS = ("very", "particularly", "especially", "all that", "remotely", "terribly")
PREFIXES = ("honestly, ", "frankly, ", "overall, ", "in the end, ", "to be fair, ", "for what it is worth, ")
SUFFIXES = (
    " from start to finish",
    " for the most part",
    " in my opinion",
    " if you ask me",
    " at times",
    " throughout",
    " by the end",
    " for most of its running time",
)
ENDINGS = ("", "", " .", " .", ".", "!", " !")

_VOWELS = "aeiou"


def _article(word: str) -> str:
    return "an" if word[0] in _VOWELS else "a"


def _adverb(rng: random.Random) -> str:
    """Optional intensifier or downtoner; they change strength, never polarity."""
    r = rng.random()
    if r < 0.3:
        return rng.choice(INTENSIFIERS) + " "
    if r < 0.5:
        return rng.choice(DOWNTONERS) + " "
    return ""


def _adj(rng: random.Random, pol: int) -> str:
    return rng.choice(POSITIVE_ADJECTIVES if pol else NEGATIVE_ADJECTIVES)


def _be(rng: random.Random) -> str:
    return rng.choice(("is", "was"))


def _plain_clause(rng: random.Random, pol: int) -> str:
    """A clause whose polarity is the polarity of its one sentiment word."""
    subj = rng.choice(SUBJECTS)
    t = rng.randrange(7)
    if t == 0:
        return f"{subj} {_be(rng)} {_adverb(rng)}{_adj(rng, pol)}"
    if t == 1:
        verb = rng.choice(("feels", "felt", "seems", "comes across as", "looks", "sounds"))
        return f"{subj} {verb} {_adverb(rng)}{_adj(rng, pol)}"
    if t == 2:
        return f"i found {subj} {_adverb(rng)}{_adj(rng, pol)}"
    if t == 3:
        # Intensifiers only: "a a bit clever film" is not English.
        adv = rng.choice(INTENSIFIERS) + " " if rng.random() < 0.4 else ""
        adj = _adj(rng, pol)
        return f"{_article(adv or adj)} {adv}{adj} {rng.choice(KINDS)}"
    if t == 4:
        past, _ = rng.choice(POSITIVE_VERBS if pol else NEGATIVE_VERBS)
        return f"i {rng.choice(('', 'really ', 'mostly ', 'genuinely '))}{past} {subj}"
    if t == 5:
        noun = rng.choice(POSITIVE_NOUNS if pol else NEGATIVE_NOUNS)
        return f"{subj} {_be(rng)} {_article(noun)} {noun}"
    return f"{subj} {_be(rng)} {_adj(rng, pol)} {rng.choice(('to watch', 'on screen', 'overall', 'here'))}"


def _negated_clause(rng: random.Random, pol: int) -> str:
    """A clause with exactly one negator, so its sentiment word has polarity ``1 - pol``."""
    word_pol = 1 - pol
    subj = rng.choice(SUBJECTS)
    t = rng.randrange(7)
    if t == 0:
        neg = rng.choice(
            (
                "is not",
                "was not",
                "isn't",
                "wasn't",
                "never feels",
                "is never",
                "is hardly",
                "is far from",
                "never seemed",
            )
        )
        # "not particularly funny" reads naturally; "far from all that funny" does not.
        adv = ""
        if neg in ("is not", "was not", "isn't", "wasn't") and rng.random() < 0.4:
            adv = rng.choice(NEGATED_ADVERBS) + " "
        return f"{subj} {neg} {adv}{_adj(rng, word_pol)}"
    if t == 1:
        return f"i would never call {subj} {_adj(rng, word_pol)}"
    if t == 2:
        who = rng.choice(("nobody could call", "no one would call", "nobody would call"))
        return f"{who} {subj} {_adj(rng, word_pol)}"
    if t == 3:
        _, base = rng.choice(POSITIVE_VERBS if word_pol else NEGATIVE_VERBS)
        neg = rng.choice(("did not", "didn't", "could not", "couldn't", "never"))
        if neg == "never":
            past, _ = rng.choice(POSITIVE_VERBS if word_pol else NEGATIVE_VERBS)
            return f"i never {past} {subj}"
        return f"i {neg} {base} {subj}"
    if t == 4:
        noun = rng.choice(POSITIVE_NOUNS if word_pol else NEGATIVE_NOUNS)
        if rng.random() < 0.5:
            return f"{subj} {_be(rng)} no {noun}"
        return f"{subj} {_be(rng)} hardly {_article(noun)} {noun}"
    if t == 5:
        return f"nothing about {subj} felt {_adj(rng, word_pol)}"
    past, _ = rng.choice(POSITIVE_VERBS if word_pol else NEGATIVE_VERBS)
    return f"i can't say i {past} {subj}"


def _clause(rng: random.Random, pol: int) -> str:
    return _negated_clause(rng, pol) if rng.random() < 0.35 else _plain_clause(rng, pol)


def _sentence(rng: random.Random, label: int) -> str:
    kind = rng.random()
    ending = rng.choice(ENDINGS)
    if kind < 0.35:  # (a)/(d) plain polarity, with intensifiers and downtoners
        s = _plain_clause(rng, label)
    elif kind < 0.6:  # (b) negation flips the sentiment word
        s = _negated_clause(rng, label)
    else:  # (c) contrast: the clause after but/yet, or the main clause, decides
        # Mostly the two clauses disagree; that is what defeats a keyword vote.
        other = 1 - label if rng.random() < 0.8 else label
        decisive = _clause(rng, label)
        concession = _clause(rng, other)
        form = rng.randrange(4)
        if form == 0:
            s = f"{concession}, {rng.choice(('but', 'but', 'yet'))} {decisive}"
        elif form == 1:
            s = f"{concession} but {decisive}"
        elif form == 2:
            s = f"{rng.choice(('although', 'even though', 'while'))} {concession}, {decisive}"
        else:
            s = f"{decisive}, {rng.choice(('although', 'even though'))} {concession}"
        # Contrast sentences get no prefix: its comma would make "honestly, although A, B"
        # read like "B, although A" to a simple clause splitter.
        if rng.random() < 0.15:
            s += rng.choice(SUFFIXES)
        return s + ending
    # Natural variety for single-clause sentences: optional lead-in and trailing phrase.
    if rng.random() < 0.15:
        s = rng.choice(PREFIXES) + s
    if rng.random() < 0.2:
        s += rng.choice(SUFFIXES)
    return s + ending


def _generate(n: int, rng: random.Random, exclude: frozenset | set = frozenset()) -> list[dict]:
    """``n`` balanced rows (n//2 and n - n//2 per label) with distinct sentences not in ``exclude``."""
    labels = [1] * (n // 2) + [0] * (n - n // 2)
    rng.shuffle(labels)

    def draw(label: int):
        sentence = _sentence(rng, label)
        return {"sentence": sentence, "label": label}, sentence, (sentence,)

    return distinct_rows(labels, draw, exclude=exclude, tries=100, what="sentences")


def generate_sentiment(n: int, seed: int = 0) -> list[dict]:
    """Generate ``n`` labelled sentences, deterministic per ``seed``.

    Usage: ``rows = generate_sentiment(1000, seed=0)``

    Labels are balanced: ``n // 2`` positive (1) and ``n - n // 2`` negative (0).
    Uses its own ``random.Random(seed)``; global random state is never touched.
    """
    check_size("n", n)
    return _generate(n, random.Random(seed))


def generated_splits(train_size: int = 4000, eval_size: int = 872, seed: int = 0) -> tuple[list[dict], list[dict]]:
    """Train and eval splits with no sentence in both. 872 matches SST-2's dev size.

    Usage: ``train, dev = generated_splits(train_size=4000, eval_size=872, seed=0)``

    Train equals ``generate_sentiment(train_size, seed)``; eval comes from the same
    generator with a derived seed and is deduplicated against train, so eval accuracy
    measures generalisation rather than memorisation.
    """
    # The train split's rng is random.Random(seed), older than the shared per-split naming:
    # kept so the generated set (and every figure measured on it) stays the same.
    return disjoint_splits(
        _generate,
        DATASET_NAME,
        train_size,
        eval_size,
        seed,
        texts=lambda row: (row["sentence"],),
        train_rng=random.Random(seed),
    )
