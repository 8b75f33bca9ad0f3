#!/usr/bin/env python
"""Write mixft's demo data files, to try ``--train-file`` / ``--validation-file`` on.

``python scripts/make_demo_data.py --out demo-data [--train-size 2000] [--eval-size 872] [--seed 0]``

Writes four files (deterministic per seed, train and validation disjoint):

- ``topics_train.csv`` / ``topics_validation.csv``: ``text,label`` with string labels
  (World, Sports, Business, Sci/Tech), a 4-class news-topic task;
- ``paraphrase_train.jsonl`` / ``paraphrase_validation.jsonl``: ``sentence1``,
  ``sentence2``, ``label`` (1 equivalent, 0 not), a sentence-pair paraphrase task.

Existing files of these names in ``--out`` are replaced. Importable too::

    from scripts.make_demo_data import write_demo_files
    paths = write_demo_files("demo-data")   # {"topics_train": .../topics_train.csv, ...}
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import sys
from pathlib import Path

DEMO_FILES = ("topics_train.csv", "topics_validation.csv", "paraphrase_train.jsonl", "paraphrase_validation.jsonl")


def _csv_text(rows: list[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["text", "label"])
    writer.writerows([r["text"], r["label"]] for r in rows)
    return buffer.getvalue()


def _jsonl_text(rows: list[dict]) -> str:
    return "".join(json.dumps({k: r[k] for k in ("sentence1", "sentence2", "label")}) + "\n" for r in rows)


def demo_file_texts(train_size: int = 2000, eval_size: int = 872, seed: int = 0) -> dict[str, str]:
    """File name -> contents of every demo file (nothing written). Usage: ``demo_file_texts(100, 50)``

    Topics as a user would export them (string labels World, Sports, Business, Sci/Tech);
    paraphrase pairs as MRPC labels them (1 equivalent, 0 not_equivalent).
    """
    from mixft.data.synthetic.paraphrase import paraphrase_splits
    from mixft.data.synthetic.topics import TOPIC_NAMES, topics_splits

    topics_train, topics_dev = (
        [{"text": r["text"], "label": TOPIC_NAMES[r["label"]]} for r in split]
        for split in topics_splits(train_size, eval_size, seed)
    )
    pairs_train, pairs_dev = paraphrase_splits(train_size, eval_size, seed)
    return dict(
        zip(
            DEMO_FILES,
            (
                _csv_text(topics_train),
                _csv_text(topics_dev),
                _jsonl_text(pairs_train),
                _jsonl_text(pairs_dev),
            ),
        )
    )


def write_demo_files(
    out_dir: str | os.PathLike, *, train_size: int = 2000, eval_size: int = 872, seed: int = 0
) -> dict[str, Path]:
    """Write the demo files into ``out_dir`` (created if missing); returns ``{stem: path}``.

    Each file is written atomically; existing demo files are replaced (the content is a
    pure function of sizes and seed).

    Usage: ``paths = write_demo_files("demo-data", train_size=2000, eval_size=872)``
    """
    from mixft.atomic import write_text

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, text in demo_file_texts(train_size, eval_size, seed).items():
        path = out / name
        write_text(path, text)
        paths[Path(name).stem] = path
    return paths


def main(argv: list[str] | None = None) -> int:
    from mixft.errors import UsageError
    from mixft.options import POSITIVE_INT, SEED

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="directory to write the files into (created if missing)")
    parser.add_argument(
        "--train-size", type=POSITIVE_INT.parse, default=2000, help="rows per training file (default 2000)"
    )
    parser.add_argument(
        "--eval-size", type=POSITIVE_INT.parse, default=872, help="rows per validation file (default 872)"
    )
    parser.add_argument("--seed", type=SEED.parse, default=0, help="generator seed (default 0)")
    args = parser.parse_args(argv)

    try:
        paths = write_demo_files(args.out, train_size=args.train_size, eval_size=args.eval_size, seed=args.seed)
    except OSError as exc:
        print(f"error: --out {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except UsageError as exc:  # sizes past what the generators offer
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for path in paths.values():
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
