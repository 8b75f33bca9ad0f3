"""What is wrong with the README code, and why: its three bugs, reproduced on a real encoder.

Usage::

    for report in reproduce_readme_bugs(encoder):
        print(report.bug.title, report.observed)
    print(format_bugs(reproduce_readme_bugs(encoder)))
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


@dataclass(frozen=True)
class Bug:
    title: str
    readme: str  # the README's line
    fix: str  # what mixft does instead
    why: str  # one line


BUGS: tuple[Bug, ...] = (
    Bug(
        "hidden size",
        "self.linear = nn.Linear(512, 1)",
        "nn.Linear(encoder.config.hidden_size, 1)",
        "bert-base-uncased is 768 wide (the shipped MiniLM 384); a hard-coded 512 fails with a shape error",
    ),
    Bug(
        "model outputs",
        "_, pooled = self.bert(input_ids, attention_mask)",
        "out = self.bert(input_ids=..., attention_mask=...); pooled = out.pooler_output",
        "outputs are a ModelOutput, and unpacking one yields its *keys*, so `pooled` is the string "
        "'pooler_output'; pass the mask by keyword too, positions are not a documented contract",
    ),
    Bug(
        "loss module",
        "criterion = torch.loss.BCELoss()",
        "criterion = nn.BCEWithLogitsLoss()",
        "there is no torch.loss (losses live in torch.nn); and see the autocast trap for why not BCELoss",
    ),
)


#: The README's model, as written (it loads the encoder itself; here the encoder is passed in).
README_MODEL_CODE = """\
class ClassificationModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.bert = AutoModel.from_pretrained('bert-base-uncased')
        self.dropout = nn.Dropout(0.1)
        self.linear = nn.Linear(512, 1)
        self.sigmoid = nn.Sigmoid()
    def forward(self, input_ids, attention_mask):
        _, pooled = self.bert(input_ids, attention_mask)
        return self.sigmoid(self.linear(self.dropout(pooled)))
criterion = torch.loss.BCELoss()"""


class ReadmeModelAsWritten(nn.Module):
    """The README's ``ClassificationModel`` line for line, bugs included (for showing them).

    Usage: ``ReadmeModelAsWritten(AutoModel.from_pretrained(path))(ids, mask)`` raises.
    """

    def __init__(self, encoder: nn.Module):
        super().__init__()
        self.bert = encoder
        self.dropout = nn.Dropout(0.1)
        self.linear = nn.Linear(512, 1)
        self.sigmoid = nn.Sigmoid()

    def forward(self, input_ids, attention_mask):
        _, pooled = self.bert(input_ids, attention_mask)
        return self.sigmoid(self.linear(self.dropout(pooled)))


class TupleOutputs(nn.Module):
    """An encoder that returns plain tuples, as transformers did when the README was written.

    With it the README's ``_, pooled = ...`` unpacks as intended, which is what lets the
    next bug (the 512-wide Linear) show.
    """

    def __init__(self, encoder: nn.Module):
        super().__init__()
        self.encoder = encoder

    def forward(self, *args, **kwargs):
        return self.encoder(*args, return_dict=False, **kwargs)


@dataclass(frozen=True)
class BugReport:
    bug: Bug
    observed: str | None  # "ExceptionType: message" (first line), or None when nothing failed


def _error_of(fn: Callable[[], Any]) -> str | None:
    try:
        fn()
    except Exception as exc:  # what the README code really raises, reported verbatim
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return None


@torch.no_grad()
def reproduce_readme_bugs(encoder: nn.Module) -> list[BugReport]:
    """Run the README's code on ``encoder`` and report what each bug raises.

    Usage: ``for r in reproduce_readme_bugs(encoder): print(r.bug.title, r.observed)``
    """
    was_training = encoder.training
    encoder.eval()
    ids = torch.ones(1, 4, dtype=torch.long, device=_device_of(encoder))
    mask = torch.ones_like(ids)
    try:
        # Outputs as tuples (the README's era), so the unpacking works and Linear(512) is reached.
        hidden = _error_of(lambda: ReadmeModelAsWritten(TupleOutputs(encoder)).to(ids.device)(ids, mask))
        outputs = _error_of(lambda: ReadmeModelAsWritten(encoder).to(ids.device)(ids, mask))
        loss = _error_of(lambda: torch.loss.BCELoss())
    finally:
        encoder.train(was_training)
    return [BugReport(bug, observed) for bug, observed in zip(BUGS, (hidden, outputs, loss))]


def _device_of(module: nn.Module) -> torch.device:
    param = next(module.parameters(), None)
    return param.device if param is not None else torch.device("cpu")


def format_bugs(reports: Sequence[BugReport] | None = None) -> str:
    """The three README bugs, one line each, with the error seen live when ``reports`` are given."""
    lines = []
    for i, bug in enumerate(BUGS, 1):
        lines.append(f"{i}. {bug.title}: `{bug.readme}` -> `{bug.fix}`")
        lines.append(f"   why: {bug.why}")
        if reports is not None:
            observed = reports[i - 1].observed
            lines.append(f"   raises here: {observed}" if observed else "   raises here: nothing (with this encoder)")
    return "\n".join(lines)
