"""Demo data files a user can try the file options on (``scripts/make_demo_data.py``).

Usage::

    from mixft.data.demo_files import write_demo_files
    paths = write_demo_files("demo-data")
    # {"topics_train": .../topics_train.csv, "topics_validation": ..., "paraphrase_train": ...jsonl, ...}

Two tasks, each with a train and a validation file, disjoint and deterministic per seed:

- ``topics_{train,validation}.csv``: ``text,label`` with string labels (World, Sports,
  Business, Sci/Tech): a multi-class CSV as a user would export it (mixft.data.topics).
- ``paraphrase_{train,validation}.jsonl``: ``{"sentence1", "sentence2", "label"}`` per
  line, labels 1 equivalent / 0 not_equivalent as in MRPC: a sentence-pair JSON Lines file
  (mixft.data.paraphrase).
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

from mixft.atomic import write_text

DEMO_FILES = ("topics_train.csv", "topics_validation.csv", "paraphrase_train.jsonl", "paraphrase_validation.jsonl")


def _csv_text(rows: list[dict]) -> str:
    import io

    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["text", "label"])
    writer.writerows([r["text"], r["label"]] for r in rows)
    return buffer.getvalue()


def _jsonl_text(rows: list[dict]) -> str:
    return "".join(json.dumps({k: r[k] for k in ("sentence1", "sentence2", "label")}) + "\n" for r in rows)


def demo_file_texts(train_size: int = 2000, eval_size: int = 872, seed: int = 0) -> dict[str, str]:
    """File name -> contents of every demo file (nothing written). Usage: ``demo_file_texts(100, 50)``"""
    from mixft.data.paraphrase import paraphrase_splits
    from mixft.data.topics import TOPIC_NAMES, topics_splits

    topics_train, topics_dev = (
        [{"text": r["text"], "label": TOPIC_NAMES[r["label"]]} for r in split]
        for split in topics_splits(train_size, eval_size, seed)
    )
    pairs_train, pairs_dev = paraphrase_splits(train_size, eval_size, seed)
    return dict(zip(DEMO_FILES, (
        _csv_text(topics_train), _csv_text(topics_dev), _jsonl_text(pairs_train), _jsonl_text(pairs_dev),
    )))


def write_demo_files(out_dir: str | os.PathLike, *, train_size: int = 2000, eval_size: int = 872,
                     seed: int = 0) -> dict[str, Path]:
    """Write the demo files into ``out_dir`` (created if missing); returns ``{stem: path}``.

    Each file is written atomically; existing demo files are replaced (the content is a
    pure function of sizes and seed).

    Usage: ``paths = write_demo_files("demo-data", train_size=2000, eval_size=872)``
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, text in demo_file_texts(train_size, eval_size, seed).items():
        path = out / name
        write_text(path, text)
        paths[Path(name).stem] = path
    return paths
