"""mixft.amp.precision.precision_notice: it says what was (not) measured, never a rule about CPU flags."""

from __future__ import annotations

import torch

from mixft.amp.precision import PRECISIONS, precision_notice

CPU = torch.device("cpu")


def test_fp16_on_cpu_says_nothing_was_measured_and_offers_probe():
    text = precision_notice(PRECISIONS["fp16"], CPU)
    assert "not known until measured" in text and "--probe" in text
    for rule in ("AMX", "AVX", "emulated", "expect", "likely"):
        assert rule not in text


def test_no_notice_when_a_probe_measured_it_or_for_other_precisions():
    assert precision_notice(PRECISIONS["fp16"], CPU, measured=True) is None
    assert precision_notice(PRECISIONS["bf16"], CPU) is None
