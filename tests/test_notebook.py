"""examples/quickstart.ipynb executes end to end (nbclient, kernel python3) on a tiny budget.

The kernel is this interpreter: the fixture installs a ``python3`` kernelspec for
``sys.executable`` into a temporary prefix and puts it first on JUPYTER_PATH, so the
test works on a fresh machine and never picks up a stale spec for another Python.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import nbformat
import pytest
import torch
from nbclient import NotebookClient

from mixft.data.synthetic.sentiment import generate_sentiment
from mixft.models.hub import shipped_model_dir

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "examples" / "quickstart.ipynb"
TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


@pytest.fixture
def kernel_python3(tmp_path, monkeypatch) -> str:
    from ipykernel.kernelspec import install
    from jupyter_client.kernelspec import KernelSpecManager

    prefix = tmp_path / "jupyter-prefix"
    install(kernel_name="python3", prefix=str(prefix))
    monkeypatch.setenv("JUPYTER_PATH", str(prefix / "share" / "jupyter"))
    spec = KernelSpecManager().get_kernel_spec("python3")
    assert spec.argv[0] == sys.executable  # the kernel runs where mixft is installed
    return "python3"


@pytest.fixture
def tiny_budget(tmp_path, monkeypatch) -> Path:
    """A tiny random BERT (with the shipped tokenizer) and tiny TSV data; env vars point the notebook at them."""
    from transformers import BertConfig, BertModel

    model_dir = tmp_path / "tiny-bert"
    torch.manual_seed(0)
    config = BertConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, max_position_embeddings=128
    )
    BertModel(config).save_pretrained(model_dir)
    for name in TOKENIZER_FILES:
        if (shipped_model_dir() / name).is_file():
            shutil.copy(shipped_model_dir() / name, model_dir / name)
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    for name, n, seed in (("train.tsv", 16, 1), ("dev.tsv", 8, 2)):
        rows = generate_sentiment(n, seed=seed)
        text = "sentence\tlabel\n" + "".join(f"{r['sentence']}\t{r['label']}\n" for r in rows)
        (data_dir / name).write_text(text, encoding="utf-8")
    monkeypatch.setenv("MIXFT_QUICKSTART_MODEL", str(model_dir))
    monkeypatch.setenv("MIXFT_QUICKSTART_DATA_DIR", str(data_dir))
    monkeypatch.setenv("MIXFT_QUICKSTART_TRAIN", "16")
    monkeypatch.setenv("MIXFT_QUICKSTART_EVAL", "8")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # nothing in this test may reach for the network
    return tmp_path


def test_notebook_is_committed_without_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    assert code_cells
    assert all(not c.outputs and c.execution_count is None for c in code_cells)
    assert any("parameters" in c.metadata.get("tags", []) for c in code_cells)


def test_notebook_runs_end_to_end(kernel_python3, tiny_budget):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(
        nb,
        kernel_name=kernel_python3,
        timeout=300,
        allow_errors=False,
        resources={"metadata": {"path": str(tiny_budget)}},
    )
    client.execute()  # raises CellExecutionError if any cell fails

    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "\n".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "16 train / 8 eval" in text
    assert "BCEWithLogitsLoss" in text  # the trap cell ran
    markdown = [o["data"]["text/markdown"] for o in outputs if "text/markdown" in o.get("data", {})]
    # What "amp" means here: fp16 on CUDA; on a CPU, bf16 where torch runs it natively, else fp32 (the --amp policy).
    from mixft.amp.hardware import native_precisions

    native_bf16 = native_precisions(torch.device("cpu"))["bf16"]
    amp = "fp16" if torch.cuda.is_available() else ("bf16" if native_bf16 else "fp32")
    assert any("| fp32 |" in m and f"| {amp} |" in m for m in markdown)  # the comparison table
    html = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert any("skipped_steps" in h for h in html)  # the results_frame DataFrame
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 2  # the charts, inline
