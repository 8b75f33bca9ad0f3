"""Error of bf16 attention with dropout against float64, mixft's fast-dropout attention vs torch's sdpa.

``python benchmarks/attention_error.py --data-dir DIR [--batch-size 32] [--p 0.1] [--seeds 0,1,2] [--json FILE]``

The inputs are real: the query, key, value and mask of every attention layer of the
shipped MiniLM (``bert-base-uncased`` resolves to it offline) on the first ``--batch-size``
training sentences of ``--data-dir`` (GLUE layout), captured in a forward pass under bf16
autocast, i.e. the bf16 tensors a bf16 training step hands its attention. On those same
inputs, with dropout ``--p``:

* ``torch``: ``scaled_dot_product_attention(dropout_p=p)`` under bf16 autocast (on the CPU its
  math kernel: fp32 inside, ``aten::dropout``);
* ``mixft``: ``mixft.train.fast_dropout.attention_math`` under bf16 autocast, the function a
  fast-dropout run uses (whichever mixft is imported: run it with ``PYTHONPATH`` set to an
  older checkout to measure that one; the file measured is printed and recorded);

each against the float64 computation of the same attention with the *same* keep mask
(each mask replayed from the seed: ``bernoulli_`` on the fp32 probabilities for torch,
``keep_mask`` for mixft). Printed: max and mean absolute error of the output over all
layers and seeds, and the ratio mixft / torch. The CPU model and flags are printed too.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import mixft
from mixft.amp.hardware import describe_hardware, hardware_line
from mixft.amp.precision import resolve_device
from mixft.train.fast_dropout import attention_math, keep_mask


def capture_attention_inputs(model_name: str, data_dir: str, batch_size: int) -> list[tuple]:
    """(query, key, value, bool mask) of each attention layer, bf16, from one forward under bf16 autocast."""
    from transformers import AttentionInterface, AutoModel, AutoTokenizer
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    from transformers.utils import logging as hf_logging

    from mixft.models.hub import resolve_model

    hf_logging.disable_progress_bar()  # the per-tensor "Loading weights" bar

    path = resolve_model(model_name).path
    sentences = _sentences(data_dir, batch_size)
    tokenizer = AutoTokenizer.from_pretrained(path)
    batch = tokenizer(sentences, padding=True, truncation=True, max_length=128, return_tensors="pt")
    captured = []

    def capture(module, query, key, value, attention_mask, **kwargs):
        captured.append(
            tuple(t.detach().clone() if t is not None else None for t in (query, key, value, attention_mask))
        )
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)

    AttentionInterface.register("mixft_capture", capture)
    AttentionMaskInterface.register("mixft_capture", sdpa_mask)
    model = AutoModel.from_pretrained(path, dtype=torch.float32).eval()
    model.config._attn_implementation_internal = "mixft_capture"
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        model(**batch)
    return captured


def _sentences(data_dir: str, n: int) -> list[str]:
    lines = (Path(data_dir) / "train.tsv").read_text(encoding="utf-8").splitlines()[1 : n + 1]
    return [line.split("\t")[0] for line in lines]


def float64_attention(q, k, v, mask, keep: torch.Tensor, p: float) -> torch.Tensor:
    """The same attention in float64 from the same (exactly upcast) inputs and the same keep mask."""
    q, k, v = q.double(), k.double(), v.double()
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    probs = torch._safe_softmax(scores, -1)
    return (probs * keep.double() / (1 - p)) @ v


def errors(layers, p: float, seeds: list[int]) -> dict[str, dict[str, float]]:
    out = {}
    for name in ("torch", "mixft"):
        worst, total, count = 0.0, 0.0, 0
        for seed in seeds:
            for q, k, v, mask in layers:
                shape = (q.shape[0], q.shape[1], q.shape[2], k.shape[2])
                torch.manual_seed(seed)
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    if name == "torch":
                        got = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
                    else:
                        got = attention_math(q, k, v, mask, p, None, False)
                torch.manual_seed(seed)  # the same draws again: the mask that was used
                if name == "torch":  # aten::dropout on the fp32 probabilities
                    keep = torch.empty(shape, dtype=torch.float32).bernoulli_(1 - p).bool()
                else:
                    keep = keep_mask(math.prod(shape), p).view(shape).bool()
                diff = (got.double() - float64_attention(q, k, v, mask, keep, p)).abs()
                worst = max(worst, diff.max().item())
                total += diff.sum().item()
                count += diff.numel()
        out[name] = {"max_abs_error": worst, "mean_abs_error": total / count}
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="bert-base-uncased")
    parser.add_argument("--data-dir", required=True, help="GLUE-layout directory (real text, e.g. SST-2)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--p", type=float, default=0.1, help="attention dropout (MiniLM's is 0.1)")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # small matmuls, and a result that does not depend on the thread count
    seeds = [int(s) for s in args.seeds.split(",")]
    layers = capture_attention_inputs(args.model, args.data_dir, args.batch_size)
    hw = describe_hardware(resolve_device("cpu"))
    result = errors(layers, args.p, seeds)
    q = layers[0][0]
    print(
        f"attention vs float64, bf16 autocast, dropout {args.p}: {len(layers)} layers x {len(seeds)} seeds, "
        f"q {tuple(q.shape)} {q.dtype}; mixft from {Path(mixft.__file__).parent}"
    )
    print(f"{hardware_line(hw)}; torch {torch.__version__}")
    for name, figures in result.items():
        print(f"{name:6s} max {figures['max_abs_error']:.3e}  mean {figures['mean_abs_error']:.3e}")
    ratio = {k: result["mixft"][k] / result["torch"][k] for k in result["torch"]}
    print(f"mixft / torch: max {ratio['max_abs_error']:.2f}x, mean {ratio['mean_abs_error']:.2f}x")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "args": vars(args),
                    "mixft": str(Path(mixft.__file__).parent),
                    "hardware": hw,
                    "torch": torch.__version__,
                    "errors": result,
                    "ratio": ratio,
                },
                indent=1,
                default=str,
            )
            + "\n",
            encoding="utf-8",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
