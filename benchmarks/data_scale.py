#!/usr/bin/env python
"""How reading and tokenising a user's CSV scales: time and peak memory at 10k and 100k rows.

``python benchmarks/data_scale.py [--sizes 10000 100000] [--max-length 128]``

For each size: writes a generated 4-topic CSV (``text,label``, string labels), then in a
fresh process (so peak RSS is that run's own) reads and checks it with
``mixft.data.user_data.load_text_data`` (datasets converts it to Arrow in its cache) and
tokenises it with the shipped MiniLM tokenizer (``mixft.data.tokenize``); then a second
fresh process repeats both, which must come from the datasets cache. Prints the times,
the peak RSS and its growth over the process's RSS before reading the data, per size,
and the 100k/10k ratios: time should grow with the rows, memory should not.
The datasets cache is a temporary directory, deleted at the end.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def worker(path: str, max_length: int) -> dict:
    """Read, check and tokenise ``path`` once; the measurements as a dict."""
    from transformers import AutoTokenizer

    from mixft.data.tokenize import tokenize_text_data
    from mixft.data.user_data import load_text_data
    from mixft.models.hub import shipped_model_dir

    tokenizer = AutoTokenizer.from_pretrained(shipped_model_dir())
    tokenizer("warm up the tokenizer and its threads")
    before = _rss_mb()
    start = time.perf_counter()
    data = load_text_data(train_file=path, validation_split=0.1, seed=0)
    loaded = time.perf_counter()
    train, dev = tokenize_text_data(data, tokenizer, max_length=max_length)
    done = time.perf_counter()
    tokens = sum(train.select_columns(["lengths"]).with_format("arrow")[:].column(0).to_pylist())
    return {
        "rows": len(data.train) + len(data.eval),
        "load_s": loaded - start,
        "tokenize_s": done - loaded,
        "rss_before_mb": before,
        "peak_rss_mb": _peak_rss_mb(),
        "train_tokens": tokens,
    }


def _write_csv(path: Path, rows: int) -> None:
    from mixft.data.synthetic.topics import TOPIC_NAMES, generate_topics

    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        writer.writerows((r["text"], TOPIC_NAMES[r["label"]]) for r in generate_topics(rows, seed=0))


def _run_worker(path: Path, max_length: int, cache: Path) -> dict:
    env = {**os.environ, "HF_DATASETS_CACHE": str(cache), "TOKENIZERS_PARALLELISM": "true"}
    done = subprocess.run(
        [sys.executable, __file__, "--worker", str(path), "--max-length", str(max_length)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"worker failed for {path}:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _cpu() -> str:
    """The CPU line every mixft figure carries (model, cores, amx_bf16/avx512_bf16/avx512_fp16)."""
    from mixft.amp.hardware import describe_hardware, hardware_line

    return hardware_line(describe_hardware("cpu"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.max_length)))
        return 0

    print(f"data scale: {_cpu()}; python {platform.python_version()}; max_length {args.max_length}")
    results = {}
    with tempfile.TemporaryDirectory(prefix="mixft-data-scale-") as tmp:
        tmp = Path(tmp)
        for rows in args.sizes:
            path = tmp / f"topics_{rows}.csv"
            _write_csv(path, rows)
            cold = _run_worker(path, args.max_length, tmp / "cache")
            before = set((tmp / "cache").rglob("*.arrow"))
            warm = _run_worker(path, args.max_length, tmp / "cache")
            new_files = len(set((tmp / "cache").rglob("*.arrow")) - before)
            results[rows] = (cold, warm, path.stat().st_size, new_files)

    header = (
        f"{'rows':>8} {'file MB':>8} {'load s':>7} {'tokenise s':>10} {'rows/s':>8} {'RSS before MB':>13} "
        f"{'peak RSS MB':>11} {'growth MB':>9} {'cached run s':>12} {'new files':>9}"
    )
    print(header)
    for rows, (cold, warm, size, new_files) in results.items():
        growth = cold["peak_rss_mb"] - cold["rss_before_mb"]
        print(
            f"{rows:>8} {size / 2**20:>8.1f} {cold['load_s']:>7.2f} {cold['tokenize_s']:>10.2f} "
            f"{rows / cold['tokenize_s']:>8.0f} {cold['rss_before_mb']:>13.0f} {cold['peak_rss_mb']:>11.0f} "
            f"{growth:>9.0f} {warm['load_s'] + warm['tokenize_s']:>12.2f} {new_files:>9}"
        )
    print("(cached run: a second fresh process on the same file; new files: what it added to the datasets cache)")
    sizes = sorted(results)
    if len(sizes) >= 2:
        small, large = results[sizes[0]][0], results[sizes[-1]][0]

        def ratio(key):
            return large[key] / small[key]

        small_growth = max(small["peak_rss_mb"] - small["rss_before_mb"], 1e-9)
        growth = (large["peak_rss_mb"] - large["rss_before_mb"]) / small_growth
        print(
            f"ratios {sizes[-1]}/{sizes[0]} rows (x{sizes[-1] / sizes[0]:g}): "
            f"tokenise time x{ratio('tokenize_s'):.1f}, "
            f"load time x{ratio('load_s'):.1f}, peak RSS x{ratio('peak_rss_mb'):.2f}, RSS growth x{growth:.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
