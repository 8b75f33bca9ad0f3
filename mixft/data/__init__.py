"""Data sources for mixft: strict GLUE SST-2 TSV files and a built-in generated dataset.

Usage::

    from mixft.data import read_data_dir, generated_splits
    train, dev = read_data_dir("glue/SST-2")   # or: train, dev = generated_splits()

Both are pure Python (no torch, no tokenizer), so bad input fails before training work.
"""

from mixft.data.generated import DATASET_NAME, generate_sentiment, generated_splits
from mixft.data.tsv import read_data_dir, read_glue_tsv

__all__ = [
    "DATASET_NAME",
    "generate_sentiment",
    "generated_splits",
    "read_data_dir",
    "read_glue_tsv",
]
