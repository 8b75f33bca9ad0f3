"""Data for mixft: a user's data read and checked into Arrow, tokenised once, batched for AMP.

Usage::

    from mixft.data import load_text_data, load_glue_data, tokenize_text_data, make_loader
    data = load_text_data(train_file="train.csv", validation_split=0.1)  # a user's file
    data = load_text_data(data_dir="glue/SST-2")                        # GLUE layout: train.tsv, dev.tsv
    data = load_glue_data("mrpc", stand_in=stand_in_for("glue", "mrpc"))  # hub or cache, else generated
    train, dev = tokenize_text_data(data, tokenizer, max_length=128)
    loader = make_loader(train, tokenizer, 32, shuffle=True)

One pipeline, in modules with one job each: files (CSV/TSV/JSON/Parquet) and glue_dir
(``--data-dir``) and hubdata (cache or hub) read; columns and labels check (label_key: one
normalisation of a written label, which held_out's stratified split uses too); user_data
puts a source, its checks and the caps together; tokenize tokenises; loaders and batching
batch. Reading and checking never load torch or a tokenizer, so bad input fails before
any training work. Generated stand-ins live apart, in ``mixft.data.synthetic``: a recipe
passes one in; nothing here imports a generator.
"""

from mixft.data.glue import GLUE_TASKS, glue_task
from mixft.data.tokenize import tokenize_text_data
from mixft.data.user_data import TextData, TextTask, load_glue_data, load_text_data

__all__ = [
    "GLUE_TASKS",
    "TextData",
    "TextTask",
    "glue_task",
    "load_glue_data",
    "load_text_data",
    "make_loader",
    "tokenize_text_data",
]


def __getattr__(name: str):
    # Batching needs torch: imported on first use, so that reading and checking data stays light.
    if name == "make_loader":
        from mixft.data.loaders import make_loader

        return make_loader
    raise AttributeError(f"module 'mixft.data' has no attribute {name!r}")
