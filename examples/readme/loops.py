"""The README's two training loops, corrected and otherwise as the README has them.

The script prints :func:`loop_diff`, taken from these functions' source: exactly the code
that runs. (The README's unused ``epoch`` loop variables are kept, as written.)

Usage::

    single_precision_loop(model, loader, optimizer, criterion, epochs=1, device=device)
    scaler = mixed_precision_loop(model, loader, optimizer, criterion, 1, device, torch.bfloat16, use_scaler=False)
    print(loop_diff())
"""

from __future__ import annotations

import difflib
import inspect

import torch


def single_precision_loop(model, loader, optimizer, criterion, epochs, device):
    for epoch in range(epochs):
        for batch in loader:
            ids, mask, labels = (batch[k].to(device) for k in ("input_ids", "attention_mask", "labels"))
            optimizer.zero_grad()
            out = model(input_ids=ids, attention_mask=mask)
            loss = criterion(out, labels)
            loss.backward()
            optimizer.step()


def mixed_precision_loop(model, loader, optimizer, criterion, epochs, device, amp_dtype, use_scaler):
    # fp16 needs loss scaling (its narrow exponent underflows small gradients); bf16 does
    # not, and a disabled scaler is a no-op, so the loop is the same for both.
    scaler = torch.amp.GradScaler(device.type, enabled=use_scaler)
    for epoch in range(epochs):
        for batch in loader:
            ids, mask, labels = (batch[k].to(device) for k in ("input_ids", "attention_mask", "labels"))
            optimizer.zero_grad()
            with torch.autocast(device.type, dtype=amp_dtype):
                out = model(input_ids=ids, attention_mask=mask)
                loss = criterion(out, labels)  # BCEWithLogitsLoss: autocast-safe
            scaler.scale(loss).backward()  # backward outside autocast
            scaler.step(optimizer)  # skipped when the gradients hold inf/NaN
            scaler.update()
    return scaler


def loop_diff(context: int = 3) -> str:
    """A unified diff from the single- to the mixed-precision loop, from their source.

    Usage: ``print(loop_diff())``
    """
    a = inspect.getsource(single_precision_loop).splitlines()
    b = inspect.getsource(mixed_precision_loop).splitlines()
    return "\n".join(
        difflib.unified_diff(a, b, "single precision (fp32)", "mixed precision (AMP)", lineterm="", n=context)
    )
