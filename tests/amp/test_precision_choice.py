"""mixft.amp.precision.choose_precision: the --amp policy, with each machine's facts handed in.

Capability is torch's own check (simulated here as the dict ``mixft.amp.hardware.native_precisions``
returns); speed is a probe's measured step ratio. No CPU flag appears in any of it.
"""

from __future__ import annotations

import pytest

from mixft.amp.precision import choose_precision
from mixft.errors import UsageError

AVX2 = {"bf16": False, "fp16": False, "via": "oneDNN", "cpu_capability": "AVX2", "compute_capability": None}
AMX = {"bf16": True, "fp16": True, "via": "oneDNN", "cpu_capability": "AVX512", "compute_capability": None}
NO_ONEDNN = {"bf16": None, "fp16": None, "via": None, "cpu_capability": "AVX2", "compute_capability": None}
A100 = {"bf16": True, "fp16": True, "via": "CUDA", "cpu_capability": None, "compute_capability": "8.0"}
T4 = {"bf16": False, "fp16": True, "via": "CUDA", "cpu_capability": None, "compute_capability": "7.5"}
DATE = "2026-11-25"


def amp(native, ratios=None, device="cpu"):
    return choose_precision("amp", device, native, probe_ratios=ratios, probe_date=DATE if ratios else None)


# ---------------------------------------------------------------------------- --amp on a CPU
def test_no_native_bf16_chooses_fp32_and_says_why_and_how_to_force_bf16():
    choice = amp(AVX2)
    assert choice.precision == "fp32"
    assert choice.notice == (
        "notice: --amp chose fp32: this CPU has no native bf16 (torch: CPU capability AVX2, oneDNN has no bf16 "
        "here), so bf16 would run emulated; --precision bf16 forces bf16"
    )
    assert choice.reason == choice.notice.removeprefix("notice: ")


def test_no_native_bf16_with_a_cached_probe_cites_its_figure_and_date():
    choice = amp(AVX2, {"fp32": 1.0, "bf16": 0.04})
    assert choice.precision == "fp32"
    assert (
        "oneDNN has no bf16 here) and the probe of 2026-11-25 measured bf16 at 0.04x fp32 per training step; "
        "--precision bf16 forces bf16" in choice.notice
    )


def test_no_native_bf16_wins_over_a_probe_that_found_it_faster():
    # Capability is a fact: no hardware path means fp32 (the notice still cites the figure).
    choice = amp(AVX2, {"bf16": 1.3})
    assert choice.precision == "fp32" and "1.30x" in choice.notice


def test_native_bf16_without_a_probe_chooses_bf16_quietly():
    choice = amp(AMX)
    assert (choice.precision, choice.notice) == ("bf16", None)
    assert (
        choice.reason
        == "--amp chose bf16: this CPU runs bf16 natively (torch: CPU capability AVX512, oneDNN has bf16 here)"
    )


def test_native_bf16_that_a_probe_measured_faster_stays_bf16():
    choice = amp(AMX, {"fp32": 1.0, "bf16": 1.61})
    assert (choice.precision, choice.notice) == ("bf16", None)
    assert choice.reason.endswith("and the probe of 2026-11-25 measured bf16 at 1.61x fp32 per training step")


@pytest.mark.parametrize("ratio", [0.45, 0.99])
def test_native_bf16_that_a_probe_measured_slower_chooses_fp32(ratio):
    choice = amp(AMX, {"fp32": 1.0, "bf16": ratio})
    assert choice.precision == "fp32"
    assert choice.notice == (
        f"notice: --amp chose fp32: the probe of 2026-11-25 measured bf16 at {ratio:.2f}x fp32 "
        "per training step on this CPU; --precision bf16 forces bf16"
    )
    assert "keeps bf16" not in choice.notice  # the old notice only informed; --amp now acts on the measurement


def test_a_probe_without_a_bf16_figure_leaves_the_capability_to_decide():
    assert amp(AMX, {"fp32": 1.0}).precision == "bf16"


def test_torch_unable_to_tell_chooses_fp32_without_claiming_emulation():
    choice = amp(NO_ONEDNN)
    assert choice.precision == "fp32"
    assert "torch cannot tell whether this CPU has native bf16 (no oneDNN check in this torch build)" in choice.notice
    assert "emulated" not in choice.notice


# -------------------------------------------------------------------------- --amp on CUDA
def test_cuda_amp_is_fp16_with_or_without_native_bf16():
    with_bf16, without_bf16 = amp(A100, device="cuda"), amp(T4, device="cuda")
    assert (with_bf16.precision, with_bf16.notice) == ("fp16", None)
    assert (without_bf16.precision, without_bf16.notice) == ("fp16", None)
    assert "bf16 is native here too: --precision bf16 uses it" in with_bf16.reason
    assert "this GPU has no native bf16" in without_bf16.reason


def test_cuda_amp_measured_slower_keeps_fp16_and_says_fp32_would_be_faster():
    choice = amp(T4, {"fp32": 1.0, "fp16": 0.8}, device="cuda")
    assert choice.precision == "fp16"
    assert choice.notice.endswith(
        "the probe of 2026-11-25 measured fp16 at 0.80x fp32 per training step: --precision fp32 would be faster"
    )


def test_amp_on_a_device_type_without_mixed_precision_is_a_usage_error():
    with pytest.raises(UsageError, match="no mixed precision is defined for device type 'mps'"):
        amp({}, device="mps")


# ------------------------------------------------------------- names are honoured as asked
def test_bf16_by_name_on_a_cpu_without_native_bf16_runs_emulated_with_a_notice():
    choice = choose_precision("bf16", "cpu", AVX2)
    assert choice.precision == "bf16"
    assert choice.notice == (
        "notice: this CPU has no native bf16 (torch: CPU capability AVX2, oneDNN has no bf16 here): --precision bf16 "
        "runs it emulated, as asked; the estimate after the first steps says how long it takes"
    )
    assert choice.reason.startswith("bf16 as asked (--precision bf16); this CPU has no native bf16")


def test_a_comparison_runs_bf16_and_amp_as_the_devices_mixed_precision_with_the_notice():
    bf16 = choose_precision("bf16", "cpu", AVX2, option="--compare fp32,bf16", comparing=True)
    assert bf16.precision == "bf16" and "--compare fp32,bf16 runs it emulated, as asked" in bf16.notice
    listed = choose_precision("amp", "cpu", AVX2, option="--compare fp32,amp", comparing=True)
    assert listed.precision == "bf16"  # comparing is what was asked: no fallback to fp32 (that would run fp32 twice)
    fp32 = choose_precision("fp32", "cpu", AVX2, option="--compare fp32,bf16", comparing=True)
    assert (fp32.precision, fp32.notice) == ("fp32", None)


def test_a_name_measured_slower_is_kept_with_advice_except_in_a_comparison():
    ratios = {"fp32": 1.0, "bf16": 0.5, "fp16": 1.2}
    single = choose_precision("bf16", "cpu", AMX, probe_ratios=ratios, probe_date=DATE)
    assert single.precision == "bf16"
    assert single.notice == (
        "notice: the probe of 2026-11-25 measured bf16 at 0.50x fp32 per training step on this "
        "CPU; --precision bf16 keeps bf16 as asked; --precision fp16 would be faster"
    )
    compared = choose_precision(
        "bf16", "cpu", AMX, probe_ratios=ratios, probe_date=DATE, option="--compare fp32,bf16", comparing=True
    )
    assert compared.notice is None and "0.50x" in compared.reason


def test_fp16_on_a_cpu_with_native_fp16_is_unmeasured_until_probed():
    assert "not known until measured" in choose_precision("fp16", "cpu", AMX).notice
    assert choose_precision("fp16", "cpu", AMX, probe_ratios={"fp16": 1.1}, probe_date=DATE).notice is None
    emulated = choose_precision("fp16", "cpu", AVX2)
    assert "this CPU has no native fp16 (torch: CPU capability AVX2, oneDNN has no fp16 here)" in emulated.notice


def test_fp32_is_fp32_everywhere():
    for native in (AVX2, AMX, NO_ONEDNN, {}):
        choice = choose_precision("fp32", "cpu", native)
        assert (choice.precision, choice.reason, choice.notice) == ("fp32", "fp32 as asked (--precision fp32)", None)


# ------------------------------------------------- the library's "amp": the same policy as --amp
@pytest.mark.parametrize("native, expected", [(AVX2, "fp32"), (AMX, "bf16"), (NO_ONEDNN, "fp32")])
def test_resolve_precision_amp_follows_the_amp_policy_on_a_cpu(monkeypatch, caplog, native, expected):
    # resolve_precision("amp") (and so Trainer(precision="amp")) asks choose_precision with torch's
    # native check, as an --amp run does: no bf16 on a CPU that would only emulate it.
    import torch

    import mixft.amp.hardware
    from mixft.amp.precision import resolve_precision

    monkeypatch.setattr(mixft.amp.hardware, "native_precisions", lambda device: dict(native))
    with caplog.at_level("WARNING", logger="mixft"):
        precision = resolve_precision("amp", torch.device("cpu"))
    assert precision.name == expected
    notices = [r.getMessage() for r in caplog.records if r.getMessage().startswith("notice: --amp chose fp32")]
    assert bool(notices) == (expected == "fp32"), notices
    # bf16 on torch's word alone (no recipe or model to probe here): said, with how to measure it.
    unmeasured = [r.getMessage() for r in caplog.records if "not measured to train faster here" in r.getMessage()]
    assert unmeasured == (
        [
            'notice: precision "amp" is bf16 on torch\'s word that this CPU runs it natively (torch: CPU capability '
            "AVX512, oneDNN has bf16 here), not measured to train faster here: --probe or mixft.run_probe measures "
            "it (an --amp run, or mixft.run, measures before it chooses)"
        ]
        if expected == "bf16"
        else []
    )
    # policy=False: the device's mixed precision as it is (what --compare and --probe measure).
    assert resolve_precision("amp", torch.device("cpu"), policy=False).name == "bf16"


def test_trainer_amp_trains_in_what_the_policy_chose(monkeypatch):
    import torch
    from torch import nn

    import mixft.amp.hardware
    from mixft.train.trainer import Trainer

    model = nn.Linear(4, 2)
    loader = [(torch.randn(3, 4), torch.tensor([0, 1, 0]))]
    for native, expected in ((AVX2, "fp32"), (AMX, "bf16")):
        monkeypatch.setattr(mixft.amp.hardware, "native_precisions", lambda device, n=native: dict(n))
        trainer = Trainer(
            model,
            torch.optim.SGD(model.parameters(), lr=0.1),
            nn.CrossEntropyLoss(),
            loader,
            precision="amp",
            device="cpu",
        )
        assert trainer.precision.name == expected
