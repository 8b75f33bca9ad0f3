"""glue: a GLUE task (``--task cola|sst2|mrpc|qqp|stsb|mnli|qnli|rte|wnli``) with its official metric.

The text-classification recipe's model (encoders and decoder-only models, ``--lora``
included), loss and loop on GLUE's train split and official validation split
(``validation_matched`` for MNLI); metrics as GLUE reports them (CoLA:
Matthews correlation; MRPC, QQP: F1 and accuracy; STS-B: Pearson and Spearman; the rest:
accuracy). From the datasets cache or the hub; with neither, ``sst2`` and ``mrpc`` fall
back to mixft's generated stand-ins (with a notice) and the other tasks stop with one line.

Raises UsageError (before any training) for a missing or unknown task, unreachable data,
and everything text-classification refuses.
"""

from __future__ import annotations

from mixft.config.run_config import RunConfig
from mixft.errors import UsageError
from recipes.text_classification import (  # noqa: F401
    BATCHING_OPTIONS,
    DEFAULTS,
    LORA_OPTIONS,
    OPTIMISATION_OPTIONS,
    Prepared,
    build,
    check_run_model,
    prepare_model_and_tokens,
    save_model,
)

NAME = "glue"
USES = frozenset(
    {
        "model",
        "task",
        "max_train_samples",
        "max_eval_samples",
        "num_workers",
        "max_length",
        *LORA_OPTIONS,
        *OPTIMISATION_OPTIONS,
        *BATCHING_OPTIONS,
    }
)


def prepare(cfg: RunConfig) -> Prepared:
    """The task's data (official splits), then the model and tokens as text-classification does
    (``--eval-only``: the saved model first; the validation labels are matched to its labels by name)."""
    from mixft.data.glue import GLUE_TASKS, glue_task
    from mixft.data.synthetic.stand_ins import stand_in_for
    from mixft.data.user_data import load_glue_data

    if cfg.task is None:
        raise UsageError(f"--recipe glue needs --task, one of: {', '.join(GLUE_TASKS)}")
    # Offline, sst2 and mrpc train on mixft's generated stand-ins; the other tasks stop with one line.
    stand_in = stand_in_for("glue", glue_task(cfg.task).name)
    model = check_run_model(cfg) if cfg.eval_only else None
    data = load_glue_data(
        cfg.task,
        max_train_samples=cfg.max_train_samples,
        max_eval_samples=cfg.max_eval_samples,
        seed=cfg.seeds[0],
        stand_in=stand_in,
        shown=f"--task {cfg.task}",
        other_data="use --task sst2 or mrpc (generated stand-ins offline), or your own copy of the "
        "task's files with --recipe text-classification --train-file/--validation-file",
        model_labels=model.labels if model else None,
    )
    return prepare_model_and_tokens(cfg, data, model)
