#!/usr/bin/env python
"""Write mixft's demo data files, to try ``--train-file`` / ``--validation-file`` on.

``python scripts/make_demo_data.py --out demo-data [--train-size 2000] [--eval-size 872] [--seed 0]``

Writes four files (deterministic per seed, train and validation disjoint):

- ``topics_train.csv`` / ``topics_validation.csv``: ``text,label`` with string labels
  (World, Sports, Business, Sci/Tech), a 4-class news-topic task;
- ``paraphrase_train.jsonl`` / ``paraphrase_validation.jsonl``: ``sentence1``,
  ``sentence2``, ``label`` (1 equivalent, 0 not), a sentence-pair paraphrase task.

Existing files of these names in ``--out`` are replaced.
"""

from __future__ import annotations

import argparse
import sys


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="directory to write the files into (created if missing)")
    parser.add_argument("--train-size", type=_positive, default=2000, help="rows per training file (default 2000)")
    parser.add_argument("--eval-size", type=_positive, default=872, help="rows per validation file (default 872)")
    parser.add_argument("--seed", type=int, default=0, help="generator seed (default 0)")
    args = parser.parse_args(argv)

    from mixft.data.demo_files import write_demo_files

    try:
        paths = write_demo_files(args.out, train_size=args.train_size, eval_size=args.eval_size, seed=args.seed)
    except OSError as exc:
        print(f"error: --out {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    for path in paths.values():
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
