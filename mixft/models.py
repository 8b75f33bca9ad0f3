"""The classic BERT sentence classifier: encoder + dropout + one linear unit (+ sigmoid).

The README's model ends in ``torch.sigmoid`` and trains with ``BCELoss``. Under
autocast that pair is refused ("unsafe to autocast"): in fp16, sigmoid saturates to
exactly 0 or 1 and ``log(0)`` is -inf. So ``forward`` returns the *logit*, the loss is
``BCEWithLogitsLoss`` (which autocast runs in fp32 and which folds the sigmoid into a
numerically stable log-sum-exp), and ``predict_proba`` applies the sigmoid for users.
"""

from __future__ import annotations

import torch
from torch import nn


class BertClassifier(nn.Module):
    """BERT encoder -> dropout -> Linear(hidden_size, 1). ``forward`` returns logits (B,).

    Usage::

        encoder = AutoModel.from_pretrained(path)
        model = BertClassifier(encoder)
        probs = model.predict_proba(**tokenizer(["a fine film"], return_tensors="pt"))
    """

    def __init__(self, encoder: nn.Module, dropout: float = 0.1):
        super().__init__()
        self.encoder = encoder
        self.dropout = nn.Dropout(dropout)
        # Sized from the encoder (the README hard-codes 512 on a 768-wide BERT).
        self.classifier = nn.Linear(encoder.config.hidden_size, 1)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None) -> torch.Tensor:
        out = self.encoder(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        # The pooled [CLS] representation (the README unpacks it as `_, pooled = ...`,
        # which no longer works: outputs are a ModelOutput, not a tuple).
        pooled = out.pooler_output if getattr(out, "pooler_output", None) is not None else out.last_hidden_state[:, 0]
        return self.classifier(self.dropout(pooled)).squeeze(-1)

    @torch.no_grad()
    def predict_proba(self, **inputs) -> torch.Tensor:
        """P(label = 1): the README model's sigmoid output, computed in fp32."""
        return torch.sigmoid(self.forward(**inputs).float())


def logits_to_labels(logits: torch.Tensor) -> torch.Tensor:
    """sigmoid(logit) > 0.5  <=>  logit > 0 (no sigmoid needed, no saturation)."""
    return (logits > 0).long()
