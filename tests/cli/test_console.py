"""The CLI and its terminal: a closed stdout is not an error, and results come first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_a_closed_stdout_loses_no_results_and_no_progress_silences_the_libraries_bars(tmp_path, tiny_bert_dir):
    """One real process for two things only a process shows (each start costs the suite about 10 s):

    - `finetune.py ... | head -1`: the reader goes away after the first line; the run goes on to its
      results, without a BrokenPipe traceback.
    - Was: transformers' "Writing model shards" bar printed despite --no-progress when a model was
      saved. Library bars are process-wide switches only the CLI may turn.
    """
    rows = "".join(f"{'good fine film' if i % 2 else 'bad dull plot'},{'pos' if i % 2 else 'neg'}\n" for i in range(40))
    (tmp_path / "t.csv").write_text("text,label\n" + rows)
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        str(REPO / "scripts" / "finetune.py"),
        "--recipe",
        "text-classification",
        "--model",
        str(tiny_bert_dir),
        "--train-file",
        str(tmp_path / "t.csv"),
        "--validation-split",
        "0.25",
        "--max-steps",
        "2",
        "--output-dir",
        str(out),
        "--no-progress",
        "--save-model",
        "--num-workers",
        "2",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    first = proc.stdout.readline()
    proc.stdout.close()  # what `head -1` does once it has its line
    err = proc.stderr.read()
    code = proc.wait(timeout=300)
    assert first.startswith("mixft run")
    assert code == 0, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    run = json.loads((out / "results.json").read_text())["runs"][0]
    assert run["steps"] == 2 and (out / "model" / "config.json").is_file()
    assert "%|" not in err and "it/s]" not in err, err
    assert "TOKENIZERS_PARALLELISM" not in err, err  # the fork warning of DataLoader workers


def test_a_batch_larger_than_the_data_is_said_as_it_is(tmp_path, tiny_bert_dir, tiny_data_dir, capsys):
    # Was: "batch 1000 x 8 accumulation = 8000 effective" on 16 training rows: no step ever sees 8000.
    from mixft.cli.main import main

    out = tmp_path / "out"
    code = main(
        [
            "--recipe",
            "bert-sst2",
            "--model",
            str(tiny_bert_dir),
            "--data-dir",
            str(tiny_data_dir),
            "--batch-size",
            "1000",
            "--grad-accum",
            "8",
            "--epochs",
            "2",
            "--output-dir",
            str(out),
            "--no-progress",
        ]
    )
    assert code == 0, capsys.readouterr().err
    (line,) = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("  batch")]
    assert "8000 effective" not in line
    assert line.endswith(
        "= 8000 asked, but the training data has 16 rows: each optimizer step sees all 16 (one step per epoch)"
        "; random, packed (no padding computed)"  # bert-sst2's batch order, said after the size
    ), line
    assert json.loads((out / "results.json").read_text())["runs"][0]["steps"] == 2  # one per epoch, as said
    # A batch the data fills is said as before; under a launcher the global batch is what counts.
    from mixft.cli.console import batch_text

    assert batch_text(4, 2, 16) == "4 x 2 accumulation = 8 effective"
    assert batch_text(4, 4, 16) == "4 x 4 accumulation = 16 effective"
    assert batch_text(4, 2, 16, processes=4).endswith(
        "= 32 asked across 4 processes, but the training data has 16 "
        "rows: each optimizer step sees all 16 (one step per epoch)"
    )
    assert batch_text(4, 2, None) == "4 x 2 accumulation = 8 effective"  # a loader that cannot tell


def test_no_progress_silences_datasets_and_transformers_bars_whether_or_not_they_are_imported_yet():
    # In a process of its own: the bars are process-wide switches. Before the import, the switch is
    # datasets' environment variable and huggingface_hub's flag, which transformers reads when imported
    # (so a run that never loads a dataset or a transformers model imports neither); after, their calls.
    code = (
        "import sys\n"
        "from mixft.cli.console import quiet_library_progress\n"
        "quiet_library_progress()\n"
        "assert 'datasets' not in sys.modules and 'transformers' not in sys.modules, sorted(sys.modules)\n"
        "import datasets\n"
        "from transformers.utils import logging as hf_logging\n"
        "assert not datasets.is_progress_bar_enabled()\n"
        "assert not hf_logging.is_progress_bar_enabled()\n"
        "datasets.enable_progress_bars()\n"
        "hf_logging.enable_progress_bar()\n"
        "assert hf_logging.is_progress_bar_enabled()\n"
        "quiet_library_progress()\n"
        "assert not datasets.is_progress_bar_enabled()\n"
        "assert not hf_logging.is_progress_bar_enabled()\n"
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("HF_DATASETS_DISABLE_PROGRESS_BARS", "HF_HUB_DISABLE_PROGRESS_BARS")
    }
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
