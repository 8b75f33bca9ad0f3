"""Data sources for mixft.

Usage::

    from mixft.data import load_text_data, load_glue_data, read_data_dir, generated_splits
    data = load_text_data(train_file="train.csv", validation_split=0.1)  # a user's file, Arrow
    data = load_glue_data("mrpc")                                      # a GLUE task (hub, cache or stand-in)
    train, dev = read_data_dir("glue/SST-2")   # strict GLUE SST-2 TSV reader (lists of rows)
    train, dev = generated_splits()            # the generated sentiment set

Reading and checking data never loads torch or a tokenizer, so bad input fails before
any training work. Tokenisation is in ``mixft.data.tokenize`` (Arrow) and
``mixft.data.text`` (lists; batching).
"""

from mixft.data.generated import DATASET_NAME, generate_sentiment, generated_splits
from mixft.data.glue import GLUE_TASKS, glue_task
from mixft.data.textdata import TextData, TextTask, load_glue_data, load_text_data
from mixft.data.tsv import read_data_dir, read_glue_tsv

__all__ = [
    "DATASET_NAME",
    "GLUE_TASKS",
    "TextData",
    "TextTask",
    "generate_sentiment",
    "generated_splits",
    "glue_task",
    "load_glue_data",
    "load_text_data",
    "read_data_dir",
    "read_glue_tsv",
]
