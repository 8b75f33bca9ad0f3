"""Tiny encoders and decoders of several architectures, each saved with a working tokenizer (no hub).

Each model is 1 layer, 32 wide, built from a config; each tokenizer is built in memory
from a small vocabulary in the format its family uses: WordPiece for BERT, DistilBERT and
ELECTRA, byte-level BPE (trained with ``tokenizers``) for RoBERTa, GPT-2 and Qwen2, Unigram
pieces for XLM-R and DeBERTa-v2 (transformers 5 builds these without sentencepiece), and
metaspace BPE for Llama and Mistral. The decoders are saved as causal language models (what
a hub checkpoint holds); like the real ones, GPT-2's, Llama's and Mistral's tokenizers have
no padding token and Llama's pads on the left, Qwen2's pads with its end-of-text token.

Usage::

    path = make_tiny_model_dir("roberta", tmp_path / "roberta")
    model = load_classifier(str(path), seed=0, labels=["neg", "pos"])
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

ARCHITECTURES = ("bert", "roberta", "distilbert", "electra", "deberta-v2", "xlm-roberta")
DECODER_ARCHITECTURES = ("gpt2", "llama", "qwen2", "mistral")

# Enough words for the toy tasks below; every one is a whole token in each tokenizer.
WORDS = (
    "the a this film movie plot acting was is very really not good great fine okay bad awful boring fun and but it"
).split()
_LETTERS = list("abcdefghijklmnopqrstuvwxyz.,!'")

# Shared sizes: small enough that a training step takes milliseconds.
_SIZES = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 37}
MAX_POSITIONS = 64  # tokens each tiny model reads (RoBERTa-likes get 2 more positions)


def _wordpiece_vocab() -> dict[str, int]:
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, *_LETTERS, *("##" + c for c in _LETTERS)]
    return {token: i for i, token in enumerate(dict.fromkeys(tokens))}


def _unigram_pieces(specials: list[str], mask: str) -> list[tuple[str, float]]:
    pieces = [(s, 0.0) for s in specials] + [("\u2581" + w, -2.0) for w in WORDS]
    pieces += [("\u2581", -3.0)] + [(c, -5.0) for c in _LETTERS] + [(mask, 0.0)]
    return pieces


def _trained_bpe(specials: list[str], metaspace: bool = False) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """(vocab, merges) of a BPE trained on the toy words: byte-level, or metaspace (Llama's "\u2581word")."""
    from tokenizers import ByteLevelBPETokenizer, Tokenizer, models, pre_tokenizers, trainers

    if metaspace:
        bpe = Tokenizer(models.BPE(unk_token="<unk>"))
        bpe.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
        trainer = trainers.BpeTrainer(
            vocab_size=400,
            min_frequency=1,
            show_progress=False,
            special_tokens=specials,
            initial_alphabet=[*_LETTERS, "\u2581"],
        )
        bpe.train_from_iterator([" ".join(WORDS)] * 4, trainer)
    else:
        bpe = ByteLevelBPETokenizer()
        bpe.train_from_iterator(
            [" ".join(WORDS)] * 4, vocab_size=400, min_frequency=1, show_progress=False, special_tokens=specials
        )
    model = json.loads(bpe.to_str())["model"]
    return model["vocab"], [tuple(m) if isinstance(m, list) else tuple(m.split()) for m in model["merges"]]


def make_tokenizer(arch: str):
    """A working tokenizer of ``arch``'s family over the toy vocabulary."""
    from transformers import (
        BertTokenizer,
        DebertaV2Tokenizer,
        DistilBertTokenizer,
        ElectraTokenizer,
        RobertaTokenizer,
        XLMRobertaTokenizer,
    )

    if arch in ("bert", "distilbert", "electra"):
        cls = {"bert": BertTokenizer, "distilbert": DistilBertTokenizer, "electra": ElectraTokenizer}[arch]
        return cls(vocab=_wordpiece_vocab())
    if arch == "roberta":
        vocab, merges = _trained_bpe(["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
        return RobertaTokenizer(vocab=vocab, merges=merges)
    if arch in ("gpt2", "qwen2"):
        from transformers import GPT2Tokenizer, Qwen2Tokenizer

        vocab, merges = _trained_bpe(["<|endoftext|>"])
        return (GPT2Tokenizer if arch == "gpt2" else Qwen2Tokenizer)(vocab=vocab, merges=merges)
    if arch in ("llama", "mistral"):
        from transformers import LlamaTokenizer

        vocab, merges = _trained_bpe(["<unk>", "<s>", "</s>"], metaspace=True)
        return LlamaTokenizer(vocab=vocab, merges=merges)
    if arch == "xlm-roberta":
        return XLMRobertaTokenizer(vocab=_unigram_pieces(["<s>", "<pad>", "</s>", "<unk>"], "<mask>"))
    if arch == "deberta-v2":
        return DebertaV2Tokenizer(vocab=_unigram_pieces(["[PAD]", "[CLS]", "[SEP]", "[UNK]"], "[MASK]"), unk_id=3)
    raise ValueError(f"unknown tiny architecture {arch!r}; known: {ARCHITECTURES + DECODER_ARCHITECTURES}")


def tiny_config(arch: str, vocab_size: int, **overrides):
    """A 1-layer, 32-wide config of ``arch`` for a vocabulary of ``vocab_size``."""
    from transformers import (
        BertConfig,
        DebertaV2Config,
        DistilBertConfig,
        ElectraConfig,
        GPT2Config,
        LlamaConfig,
        MistralConfig,
        Qwen2Config,
        RobertaConfig,
        XLMRobertaConfig,
    )

    if arch == "bert":
        kwargs = dict(_SIZES, max_position_embeddings=MAX_POSITIONS)
        return BertConfig(vocab_size=vocab_size, **{**kwargs, **overrides})
    if arch in ("roberta", "xlm-roberta"):
        cls = RobertaConfig if arch == "roberta" else XLMRobertaConfig
        # fairseq's layout: positions start after padding_idx (1), so 2 more than tokens.
        kwargs = dict(
            _SIZES,
            max_position_embeddings=MAX_POSITIONS + 2,
            pad_token_id=1,
            bos_token_id=0,
            eos_token_id=2,
            type_vocab_size=1,
        )
        return cls(vocab_size=vocab_size, **{**kwargs, **overrides})
    if arch == "distilbert":
        kwargs = dict(dim=32, n_layers=1, n_heads=2, hidden_dim=37, max_position_embeddings=MAX_POSITIONS)
        return DistilBertConfig(vocab_size=vocab_size, **{**kwargs, **overrides})
    if arch == "electra":
        kwargs = dict(_SIZES, embedding_size=16, max_position_embeddings=MAX_POSITIONS)
        return ElectraConfig(vocab_size=vocab_size, **{**kwargs, **overrides})
    if arch == "deberta-v2":
        # DeBERTa-v3's layout: relative attention only, no absolute position input.
        kwargs = dict(
            _SIZES,
            max_position_embeddings=MAX_POSITIONS,
            relative_attention=True,
            position_biased_input=False,
            pos_att_type=["p2c", "c2p"],
            position_buckets=16,
            type_vocab_size=0,
            pad_token_id=0,
        )
        return DebertaV2Config(vocab_size=vocab_size, **{**kwargs, **overrides})
    if arch == "gpt2":
        kwargs = dict(
            n_embd=32, n_layer=1, n_head=2, n_inner=37, n_positions=MAX_POSITIONS, bos_token_id=0, eos_token_id=0
        )
        return GPT2Config(vocab_size=vocab_size, **{**kwargs, **overrides})
    if arch in ("llama", "qwen2", "mistral"):
        # Grouped-query attention (2 query heads share 1 key/value head), as in the real ones.
        cls = {"llama": LlamaConfig, "qwen2": Qwen2Config, "mistral": MistralConfig}[arch]
        ids = {"bos_token_id": 1, "eos_token_id": 2} if arch != "qwen2" else {"bos_token_id": None, "eos_token_id": 0}
        kwargs = dict(_SIZES, num_key_value_heads=1, max_position_embeddings=MAX_POSITIONS, **ids)
        if arch == "mistral":
            kwargs["sliding_window"] = None
        return cls(vocab_size=vocab_size, **{**kwargs, **overrides})
    raise ValueError(f"unknown tiny architecture {arch!r}; known: {ARCHITECTURES + DECODER_ARCHITECTURES}")


def make_tiny_model_dir(arch: str, path: Path, *, seed: int = 0, pooler: bool = True, dtype=None, **overrides) -> Path:
    """Save a tiny ``arch`` encoder (``AutoModel``, no task head) or decoder (a causal LM) and its tokenizer.

    ``pooler=False`` saves a BERT without its pooler, as sentence-embedding checkpoints are.
    ``dtype`` saves the weights in that dtype (``torch.bfloat16``: as most decoders are published).
    """
    from transformers import AutoModel, AutoModelForCausalLM, BertModel

    tokenizer = make_tokenizer(arch)
    config = tiny_config(arch, vocab_size=len(tokenizer), **overrides)
    torch.manual_seed(seed)
    if arch in DECODER_ARCHITECTURES:
        model = AutoModelForCausalLM.from_config(config)
    elif arch == "bert" and not pooler:
        model = BertModel(config, add_pooling_layer=False)
    else:
        model = AutoModel.from_config(config)
    if dtype is not None:
        model = model.to(dtype)
    path = Path(path)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


# ---------------------------------------------------------------------------------------
# Toy tasks
# ---------------------------------------------------------------------------------------

# (text, 3-class label, score): the score is what a regression head should learn.
TOY_ROWS = [
    ("the film was great", 2, 4.5),
    ("a really good movie", 2, 4.0),
    ("this plot is fun", 2, 3.5),
    ("the acting was okay", 1, 2.5),
    ("it is fine", 1, 2.0),
    ("the movie was not bad", 1, 2.5),
    ("the plot was boring", 0, 1.0),
    ("a very bad film", 0, 0.5),
    ("this movie is awful", 0, 0.0),
    ("boring and not fun", 0, 1.0),
    ("great acting and a fun plot", 2, 5.0),
    ("okay but boring", 1, 1.5),
]


def toy_batch(tokenizer, task: str, pairs: bool = False) -> dict[str, torch.Tensor]:
    """All toy rows as one padded batch with ``labels`` for ``task`` ("2-class", "3-class", "regression")."""
    texts = [t for t, _, _ in TOY_ROWS]
    if pairs:
        batch = tokenizer(texts, list(reversed(texts)), padding=True, return_tensors="pt")
    else:
        batch = tokenizer(texts, padding=True, return_tensors="pt")
    if task == "2-class":
        labels = torch.tensor([int(c == 2) for _, c, _ in TOY_ROWS])
    elif task == "3-class":
        labels = torch.tensor([c for _, c, _ in TOY_ROWS])
    elif task == "regression":
        labels = torch.tensor([s for _, _, s in TOY_ROWS], dtype=torch.float32)
    else:
        raise ValueError(f"unknown toy task {task!r}")
    return {**batch, "labels": labels}


def uneven_bert_batch() -> dict[str, torch.Tensor]:
    """Toy sentences of 1 to 4 toy rows' length (so real padding) and one pair (segment ids 0 and 1),
    tokenised by the tiny BERT tokenizer, with float 0/1 ``labels``: short ones share a packed row."""
    texts = [row[0] for row in TOY_ROWS]
    sentences = [" ".join(texts[i : i + 1 + i % 4]) for i in range(len(texts))]
    tokenizer = make_tokenizer("bert")
    batch = tokenizer(sentences, padding=True, return_tensors="pt")
    pair = tokenizer(
        ["okay but boring"],
        ["a very bad film"],
        padding="max_length",
        max_length=batch["input_ids"].shape[1],
        return_tensors="pt",
    )
    batch = {k: torch.cat([batch[k], pair[k]]) for k in batch}
    batch["labels"] = torch.tensor([float(i % 2) for i in range(len(sentences) + 1)])
    return batch
