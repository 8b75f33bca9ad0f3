"""The GLUE tasks: their columns, task kind, labels, official metrics and validation split.

Usage::

    from mixft.data.glue import glue_task
    task = glue_task("mnli")   # task.text_columns == ("premise", "hypothesis")
    task.validation_split      # "validation_matched"
    task.metrics               # ("accuracy",)

Pure data (no torch, no datasets), so a wrong ``--task`` fails in microseconds.
Label names and metrics follow the GLUE paper and ``nyu-mll/glue`` on the hub.
"""

from __future__ import annotations

from dataclasses import dataclass

from mixft.errors import UsageError

GLUE_REPO = "nyu-mll/glue"


@dataclass(frozen=True)
class GlueTask:
    """One GLUE task. ``kind`` is "classification" or "regression" (STS-B only)."""

    name: str
    text_columns: tuple[str, ...]  # one column (single texts) or two (pairs)
    kind: str
    label_names: tuple[str, ...]  # empty for regression
    metrics: tuple[str, ...]  # the official ones, as mixft.metrics names them
    validation_split: str = "validation"

    @property
    def num_labels(self) -> int:
        return len(self.label_names) if self.kind == "classification" else 1

    @property
    def is_pair(self) -> bool:
        return len(self.text_columns) == 2


_ENTAILMENT = ("entailment", "not_entailment")

GLUE_TASKS: dict[str, GlueTask] = {
    t.name: t
    for t in (
        GlueTask("cola", ("sentence",), "classification", ("unacceptable", "acceptable"), ("matthews_correlation",)),
        GlueTask("sst2", ("sentence",), "classification", ("negative", "positive"), ("accuracy",)),
        # MRPC and QQP are unbalanced, so GLUE reports F1 of the positive class beside accuracy.
        GlueTask(
            "mrpc", ("sentence1", "sentence2"), "classification", ("not_equivalent", "equivalent"), ("f1", "accuracy")
        ),
        GlueTask(
            "qqp", ("question1", "question2"), "classification", ("not_duplicate", "duplicate"), ("f1", "accuracy")
        ),
        GlueTask("stsb", ("sentence1", "sentence2"), "regression", (), ("pearsonr", "spearmanr")),
        # MNLI has two dev sets (matched / mismatched genres); "matched" is the headline one.
        GlueTask(
            "mnli",
            ("premise", "hypothesis"),
            "classification",
            ("entailment", "neutral", "contradiction"),
            ("accuracy",),
            validation_split="validation_matched",
        ),
        GlueTask("qnli", ("question", "sentence"), "classification", _ENTAILMENT, ("accuracy",)),
        GlueTask("rte", ("sentence1", "sentence2"), "classification", _ENTAILMENT, ("accuracy",)),
        GlueTask("wnli", ("sentence1", "sentence2"), "classification", ("not_entailment", "entailment"), ("accuracy",)),
    )
}


def glue_task(name: str) -> GlueTask:
    """The GLUE task called ``name`` (case-insensitive; "sst-2" and "sts-b" spellings accepted).

    Usage: ``glue_task("cola").metrics  # ("matthews_correlation",)``
    Raises UsageError listing the tasks for an unknown name.
    """
    key = str(name).strip().lower().replace("-", "")
    if key not in GLUE_TASKS:
        raise UsageError(f"unknown GLUE task {str(name)!r}; GLUE tasks: {', '.join(GLUE_TASKS)}")
    return GLUE_TASKS[key]
