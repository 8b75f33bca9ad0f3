"""mixft.amp.hardware: the CPU's name and flags from /proc/cpuinfo text, the GPU, the one-line form."""

from __future__ import annotations

import os
import platform

import pytest
import torch

from mixft.amp.hardware import (
    CPU_FLAGS,
    describe_cpu,
    describe_hardware,
    device_note,
    flags_text,
    hardware_key,
    hardware_line,
    native_line,
    native_precisions,
    parse_cpuinfo,
)
from mixft.errors import UsageError

XEON_AVX512_BF16 = """\
processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Processor @ 2.50GHz
flags\t\t: fpu vme sse sse2 avx avx2 avx512f avx512bw avx512_bf16 avx512_vnni
bugs\t\t: spectre_v1

processor\t: 1
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Processor @ 2.50GHz
flags\t\t: fpu vme sse sse2 avx avx2 avx512f avx512bw avx512_bf16 avx512_vnni
"""

SAPPHIRE_RAPIDS = """\
processor\t: 0
model name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz
flags\t\t: avx512f avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8
"""

# aarch64: no "model name", no "flags"; a "Features" line and a numeric "processor".
GRAVITON = """\
processor\t: 0
BogoMIPS\t: 243.75
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics bf16 i8mm
CPU implementer\t: 0x41
Hardware\t: AWS Graviton3
"""


def test_parse_cpuinfo_reads_the_first_cpus_model_and_the_three_flags():
    parsed = parse_cpuinfo(XEON_AVX512_BF16)
    assert parsed == {
        "model": "Intel(R) Xeon(R) Processor @ 2.50GHz",
        "flags": {"amx_bf16": False, "avx512_bf16": True, "avx512_fp16": False},
    }


def test_parse_cpuinfo_amx_machine_has_all_three():
    assert parse_cpuinfo(SAPPHIRE_RAPIDS)["flags"] == dict.fromkeys(CPU_FLAGS, True)


def test_parse_cpuinfo_arm_uses_features_and_hardware_not_the_processor_index():
    parsed = parse_cpuinfo(GRAVITON)
    assert parsed["model"] == "AWS Graviton3"
    assert parsed["flags"] == dict.fromkeys(CPU_FLAGS, False)  # x86 flags: known absent


def test_parse_cpuinfo_without_a_flags_line_says_unknown():
    parsed = parse_cpuinfo("processor\t: 0\nmodel name\t: Some CPU\n")
    assert parsed == {"model": "Some CPU", "flags": dict.fromkeys(CPU_FLAGS)}


def test_flag_names_are_matched_whole_not_as_substrings():
    # "amx_bf16x" or "xavx512_fp16" are not the flags asked about.
    parsed = parse_cpuinfo("model name: X\nflags: amx_bf16x xavx512_fp16 avx512_bf16\n")
    assert parsed["flags"] == {"amx_bf16": False, "avx512_bf16": True, "avx512_fp16": False}


def test_describe_cpu_from_a_file(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text(SAPPHIRE_RAPIDS)
    cpu = describe_cpu(path)
    assert cpu["model"] == "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz"
    assert cpu["flags"]["amx_bf16"] is True
    assert cpu["source"] == str(path)
    assert cpu["cores"] == os.cpu_count()


def test_a_process_pinned_to_fewer_cores_says_so_beside_its_figures(tmp_path, monkeypatch):
    """Was: "2 cores" beside figures measured under ``taskset -c 0`` (one usable CPU): os.cpu_count() counts the
    machine's."""
    path = tmp_path / "cpuinfo"
    path.write_text(SAPPHIRE_RAPIDS)
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    cpu = describe_cpu(path)
    assert cpu["cores"] == 8 and cpu["usable_cores"] == 2
    assert ", 8 cores (2 usable by this process), flags:" in hardware_line({"cpu": cpu})
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    cpu = describe_cpu(path)
    assert "usable_cores" not in cpu and ", 8 cores, flags:" in hardware_line({"cpu": cpu})


def test_describe_cpu_without_proc_cpuinfo_falls_back_to_platform(tmp_path):
    cpu = describe_cpu(tmp_path / "absent")  # macOS, Windows
    assert cpu["source"] == "platform"
    assert cpu["model"] == (platform.processor() or platform.machine() or "unknown CPU")
    assert cpu["flags"] == dict.fromkeys(CPU_FLAGS)  # unknown, not "absent"


def test_describe_hardware_cpu(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text(XEON_AVX512_BF16)
    hw = describe_hardware("cpu", cpuinfo_path=path)
    assert hw["device"] == "cpu"
    assert hw["gpu"] is None
    assert hw["torch"] == torch.__version__
    assert hw["torch_threads"] == torch.get_num_threads()
    assert hw["cpu"]["flags"]["avx512_bf16"] is True


def test_native_precisions_are_torchs_own_answers_on_this_cpu():
    facts = native_precisions(torch.device("cpu"))
    assert facts == {
        "bf16": torch.ops.mkldnn._is_mkldnn_bf16_supported(),
        "fp16": torch.ops.mkldnn._is_mkldnn_fp16_supported(),
        "via": "oneDNN",
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "compute_capability": None,
    }
    assert describe_hardware("cpu")["native"] == facts  # results.json's hardware carries them


def test_native_precisions_is_the_one_place_describe_hardware_asks(monkeypatch):
    import mixft.amp.hardware

    fake = {"bf16": False, "fp16": False, "via": "oneDNN", "cpu_capability": "AVX2", "compute_capability": None}
    monkeypatch.setattr(mixft.amp.hardware, "native_precisions", lambda device: fake)
    assert describe_hardware("cpu")["native"] == fake


@pytest.mark.parametrize(
    "native,line",
    [
        (
            {"bf16": True, "fp16": True, "via": "oneDNN", "cpu_capability": "AVX512"},
            "bf16: yes (oneDNN; CPU capability AVX512), fp16: yes",
        ),
        (
            {"bf16": False, "fp16": False, "via": "oneDNN", "cpu_capability": "AVX2"},
            "bf16: no (emulated: CPU capability AVX2, oneDNN has no bf16 here), fp16: no (emulated)",
        ),
        (
            {"bf16": None, "fp16": None, "via": None, "cpu_capability": "AVX2"},
            "bf16: unknown (this torch build cannot tell), fp16: unknown (this torch build cannot tell)",
        ),
        (
            {"bf16": True, "fp16": True, "via": "CUDA", "compute_capability": "8.0"},
            "bf16: yes (compute capability 8.0), fp16: yes",
        ),
        (
            {"bf16": False, "fp16": True, "via": "CUDA", "compute_capability": "7.5"},
            "bf16: no (compute capability 7.5), fp16: yes",
        ),
        (None, "bf16: unknown, fp16: unknown"),  # results.json written before the facts were recorded
    ],
)
def test_native_line(native, line):
    assert native_line(native) == line


def test_describe_hardware_refuses_an_absent_gpu():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(UsageError, match="no CUDA device"):
        describe_hardware("cuda")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_describe_hardware_gpu():
    hw = describe_hardware("cuda")
    major, minor = torch.cuda.get_device_capability()
    assert hw["gpu"]["name"] == torch.cuda.get_device_name()
    assert hw["gpu"]["compute_capability"] == f"{major}.{minor}"
    assert hw["gpu"]["tf32"] == (major >= 8)
    assert hw["gpu"]["name"] in hardware_line(hw)
    assert hw["native"]["bf16"] == torch.cuda.is_bf16_supported(including_emulation=False)
    assert hw["native"]["compute_capability"] == f"{major}.{minor}"


def _hw(
    flags: dict,
    model: str = "Intel(R) Xeon(R) Processor @ 2.50GHz",
    cores: int = 2,
    gpu=None,
    torch_version="2.13.0+cpu",
):
    return {
        "device": "cuda:0" if gpu else "cpu",
        "cpu": {"model": model, "cores": cores, "flags": flags, "source": "x"},
        "gpu": gpu,
        "torch": torch_version,
    }


def test_hardware_line_matches_the_documented_form():
    hw = _hw({"amx_bf16": False, "avx512_bf16": True, "avx512_fp16": False})
    assert (
        hardware_line(hw)
        == "Intel(R) Xeon(R) Processor @ 2.50GHz, 2 cores, flags: avx512_bf16 (no amx_bf16, no avx512_fp16)"
    )


def test_flags_text_all_none_and_unknown():
    assert flags_text(dict.fromkeys(CPU_FLAGS, True)) == "flags: amx_bf16 avx512_bf16 avx512_fp16"
    assert flags_text(dict.fromkeys(CPU_FLAGS, False)) == "flags: none of amx_bf16, avx512_bf16, avx512_fp16"
    assert flags_text(dict.fromkeys(CPU_FLAGS)) == "flags: unknown"


def test_hardware_line_gpu_names_capability_and_host():
    gpu = {"name": "NVIDIA A100-SXM4-40GB", "compute_capability": "8.0", "tf32": True, "bf16": True, "memory_bytes": 1}
    hw = _hw(dict.fromkeys(CPU_FLAGS, False), gpu=gpu)
    assert hardware_line(hw) == (
        "NVIDIA A100-SXM4-40GB (compute capability 8.0, TF32, bf16); host: "
        "Intel(R) Xeon(R) Processor @ 2.50GHz, 2 cores, flags: none of amx_bf16, avx512_bf16, avx512_fp16"
    )
    old = {**gpu, "name": "Tesla T4", "compute_capability": "7.5", "tf32": False, "bf16": False}
    assert hardware_line(_hw(dict.fromkeys(CPU_FLAGS, False), gpu=old)).startswith(
        "Tesla T4 (compute capability 7.5); host:"
    )


def test_device_note():
    assert device_note(_hw({"amx_bf16": False, "avx512_bf16": True, "avx512_fp16": False})) == "this CPU has no AMX"
    assert device_note(_hw(dict.fromkeys(CPU_FLAGS, True))) == "this CPU has AMX"
    assert device_note(_hw(dict.fromkeys(CPU_FLAGS))) is None
    assert device_note(_hw(dict.fromkeys(CPU_FLAGS), gpu={"name": "NVIDIA H100"})) == "NVIDIA H100"


def test_hardware_key_tells_flags_and_torch_apart_but_not_core_counts():
    base = _hw({"amx_bf16": False, "avx512_bf16": True, "avx512_fp16": False})
    assert hardware_key(base) == hardware_key(_hw(base["cpu"]["flags"], cores=16))
    assert hardware_key(base) != hardware_key(_hw({**base["cpu"]["flags"], "amx_bf16": True}))
    assert hardware_key(base) != hardware_key(_hw(base["cpu"]["flags"], torch_version="2.14.0+cpu"))
    assert hardware_key(base) != hardware_key(_hw(base["cpu"]["flags"], model="AMD EPYC 9654"))
    # The same CPU under ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 runs other kernels: another key.
    native = {"bf16": True, "fp16": True, "via": "oneDNN", "cpu_capability": "AVX512"}
    capped = {"bf16": False, "fp16": False, "via": "oneDNN", "cpu_capability": "AVX2"}
    assert hardware_key({**base, "native": native}) != hardware_key({**base, "native": capped})


def test_importing_mixft_hardware_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, mixft.amp.hardware; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"
