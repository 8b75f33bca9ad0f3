"""Device assumptions that would break on a GPU, checked where they can be: on the CPU, without a GPU.

What needs the GPU itself is in tests/gpu (run by scripts/gpu_check.sh on a lent one).
"""

from __future__ import annotations

import pytest
import torch

from mixft.amp.precision import PRECISIONS, configure_matmul
from mixft.data.loaders import pad_multiple


@pytest.fixture
def matmul_settings():
    """The process's matmul settings through the per-backend API, put back after the test."""
    backends = torch.backends
    saved = (backends.cuda.matmul.fp32_precision, backends.mkldnn.matmul.fp32_precision, backends.cudnn.allow_tf32)
    yield
    backends.cuda.matmul.fp32_precision, backends.mkldnn.matmul.fp32_precision, backends.cudnn.allow_tf32 = saved
    torch.set_float32_matmul_precision("highest")  # torch's own default: the legacy level readable again


def test_the_probe_keeps_tf32_set_through_pytorchs_per_backend_api(matmul_settings):
    """A GPU user sets TF32 as PyTorch documents it (``torch.backends.cuda.matmul.fp32_precision``);
    torch's legacy getters then raise. The probe read them (``get_float32_matmul_precision`` on every
    device, ``allow_tf32`` on CUDA) and failed before measuring anything; it must run, and leave the
    setting as it found it."""
    from mixft.runs.probe import _isolated_global_state

    torch.backends.cuda.matmul.fp32_precision = "tf32"
    with pytest.raises(RuntimeError):  # what the probe's old reads ran into
        torch.get_float32_matmul_precision()
    with _isolated_global_state(torch.device("cpu")), configure_matmul(PRECISIONS["fp32"], torch.device("cuda")):
        assert torch.backends.cuda.matmul.fp32_precision == "ieee"  # the probe's fp32 rows: TF32 off
    assert torch.backends.cuda.matmul.fp32_precision == "tf32"


@pytest.mark.parametrize("device", ["cuda", "cuda:1", torch.device("cuda", 0), torch.device("cuda")])
def test_batches_pad_to_multiples_of_8_on_any_cuda_device(device):
    assert pad_multiple(device) == 8


@pytest.mark.parametrize("device", ["cpu", torch.device("cpu")])
def test_batches_pad_to_their_longest_on_the_cpu(device):
    assert pad_multiple(device) is None
