"""A catalogue of bad inputs: each ends with exit code 2, one stderr line naming it, nothing touched.

Every case runs the real CLI in-process (``mixft.cli.main.main``) against an output directory
that already holds a results.json; afterwards that file must be byte-for-byte the same
and no other file may have appeared. The budget (8 samples, 1 step, a 1-layer BERT)
keeps a case that wrongly got as far as training cheap.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from mixft.cli.main import main
from tests.cli_runs import evaluation_only

SENTINEL = b'{"runs": [], "note": "an earlier run; must survive every bad input"}\n'
HEADER = "sentence\tlabel\n"
GOOD_ROWS = "a gripping , heartfelt film\t1\nflat and lifeless\t0\n"


@dataclass
class Ctx:
    tmp: Path
    model: Path
    data: Path  # a good GLUE-layout directory
    out: Path  # holds results.json = SENTINEL

    def data_dir(self, train: bytes | str | None, dev: bytes | str | None = HEADER + GOOD_ROWS) -> Path:
        d = self.tmp / "bad-data"
        d.mkdir(exist_ok=True)
        for name, content in (("train.tsv", train), ("dev.tsv", dev)):
            if content is not None:
                (d / name).write_bytes(content if isinstance(content, bytes) else content.encode())
        return d

    def checkpoint(self, precision="fp32", damage=None) -> Path:
        """A real mixft checkpoint in OUTPUT_DIR (from a tiny Trainer), optionally damaged."""
        from torch import nn

        from mixft.cli.main import build_parser, config_from_args
        from mixft.recipe import get_recipe
        from mixft.runs.identity import run_meta
        from mixft.train.checkpoint import save_checkpoint
        from mixft.train.trainer import Trainer

        cfg = config_from_args(build_parser().parse_args(base_args(self)))
        cfg = cfg.with_defaults(get_recipe(cfg.recipe).DEFAULTS)
        trainer = Trainer(nn.Linear(2, 1), lambda p: torch.optim.SGD(p, lr=0.1), nn.MSELoss(), [], precision=precision)
        path = self.out / "checkpoint.pt"
        save_checkpoint(trainer, path, run_meta(cfg, precision, 0))
        if damage == "truncate":
            path.write_bytes(path.read_bytes()[:-200])
        elif damage == "garbage":
            path.write_bytes(os.urandom(4096))
        return path


def base_args(ctx: Ctx) -> list[str]:
    return [
        "--recipe",
        "bert-sst2",
        "--model",
        str(ctx.model),
        "--data-dir",
        str(ctx.data),
        "--max-train-samples",
        "8",
        "--max-eval-samples",
        "8",
        "--max-steps",
        "1",
        "--output-dir",
        str(ctx.out),
        "--no-progress",
    ]


# id -> setup(ctx) returning (extra args appended after the base ones, a fragment the error must name).
# argparse keeps the last value of a repeated option, so appending overrides the base.
CASES = {
    "unknown-recipe": lambda c: (["--recipe", "bert-sst3"], "bert-sst3"),
    "unknown-precision": lambda c: (["--precision", "fp8"], "fp8"),
    "unknown-device": lambda c: (["--device", "tpu"], "tpu"),
    "data-dir-missing": lambda c: (["--data-dir", str(c.tmp / "nowhere")], "nowhere"),
    "data-dir-is-a-file": lambda c: (["--data-dir", str(c.data / "train.tsv")], "not a directory"),
    "data-dir-empty": lambda c: (["--data-dir", str(c.data_dir(None, None))], "missing train.tsv and dev.tsv"),
    "dev-tsv-missing": lambda c: (["--data-dir", str(c.data_dir(HEADER + GOOD_ROWS, None))], "missing dev.tsv"),
    "no-header": lambda c: (["--data-dir", str(c.data_dir(GOOD_ROWS))], "train.tsv line 1: header has no"),
    "wrong-columns": lambda c: (["--data-dir", str(c.data_dir("text\ttarget\n" + GOOD_ROWS))], "'sentence' or 'label'"),
    "label-2": lambda c: (
        ["--data-dir", str(c.data_dir(HEADER + "fine\t2\n"))],
        "train.tsv line 2: label must be 0 or 1",
    ),
    "label-not-numeric": lambda c: (["--data-dir", str(c.data_dir(HEADER + "fine\tpos\n"))], "got 'pos'"),
    "blank-line": lambda c: (["--data-dir", str(c.data_dir(HEADER + "fine\t1\n\nbad\t0\n"))], "line 3: blank line"),
    "not-utf8": lambda c: (["--data-dir", str(c.data_dir(HEADER.encode() + b"caf\xe9\t1\n"))], "line 2: invalid UTF-8"),
    "utf16-file": lambda c: (["--data-dir", str(c.data_dir((HEADER + GOOD_ROWS).encode("utf-16")))], "NUL byte"),
    "empty-sentence": lambda c: (["--data-dir", str(c.data_dir(HEADER + " \t1\n"))], "sentence is empty"),
    "wrong-field-count": lambda c: (["--data-dir", str(c.data_dir(HEADER + "a\tb\t1\n"))], "expected 2 tab-separated"),
    "batch-size-0": lambda c: (["--batch-size", "0"], "--batch-size"),
    "batch-size-negative": lambda c: (["--batch-size", "-4"], "--batch-size"),
    "epochs-0": lambda c: (["--epochs", "0"], "--epochs"),
    "epochs-not-a-number": lambda c: (["--epochs", "two"], "--epochs"),
    "lr-0": lambda c: (["--lr", "0"], "--lr"),
    "lr-negative": lambda c: (
        ["--lr", "-2e-5"],
        "--lr: must be a positive finite number up to float32's 3.4e38, got '-2e-5'",
    ),
    "lr-nan": lambda c: (["--lr", "nan"], "--lr"),
    "grad-accum-0": lambda c: (["--grad-accum", "0"], "--grad-accum"),
    "max-steps-0": lambda c: (["--max-steps", "0"], "--max-steps"),
    "max-steps-negative": lambda c: (["--max-steps", "-1"], "--max-steps"),
    "max-train-samples-0": lambda c: (["--max-train-samples", "0"], "--max-train-samples"),
    "max-length-4": lambda c: (["--max-length", "4"], "--max-length"),
    "tf32-on-cpu": lambda c: (["--precision", "tf32", "--device", "cpu"], "tf32"),
    "resume-without-checkpoint": lambda c: (["--resume"], "no checkpoint"),
    "resume-corrupted-checkpoint": lambda c: _with_checkpoint(c, ["--resume"], "corrupted", damage="garbage"),
    "resume-truncated-checkpoint": lambda c: _with_checkpoint(c, ["--resume"], "truncated", damage="truncate"),
    "resume-other-precision": lambda c: _with_checkpoint(
        c, ["--resume", "--precision", "bf16"], "--precision 'fp32', this run has 'bf16'"
    ),
    "output-dir-under-a-file": lambda c: (["--output-dir", str(c.out / "results.json" / "sub")], "--output-dir"),
    "model-without-weights": lambda c: (["--model", str(_config_only(c))], "no model weights"),
    "model-path-missing": lambda c: (["--model", str(c.tmp / "no-such-model")], "no-such-model"),
    "model-is-a-file": lambda c: (["--model", str(c.out / "results.json")], "is a file"),
    "compare-twice": lambda c: (["--compare", "fp32,fp32"], "fp32,fp32"),
    "compare-unknown": lambda c: (["--compare", "fp32,xx"], "'xx'"),
    "inject-nonfinite-2": lambda c: (["--inject-nonfinite", "2"], "--inject-nonfinite"),
    "inject-nonfinite-negative": lambda c: (["--inject-nonfinite", "-0.1"], "--inject-nonfinite"),
    "checkpoint-every-negative": lambda c: (["--checkpoint-every", "-1"], "--checkpoint-every"),
    "max-consecutive-skips-0": lambda c: (["--max-consecutive-skips", "0"], "--max-consecutive-skips"),
    "amp-and-precision": lambda c: (["--amp", "--precision", "fp32"], "not allowed with"),
    "unknown-option": lambda c: (["--learning-rate", "1e-5"], "--learning-rate"),
    "seed-beyond-torch": lambda c: (["--seed", str(2**64)], "--seed"),
    "seeds-beyond-torch": lambda c: (["--seeds", f"0,{-(2**63) - 1}"], "--seed"),
    "validation-split-1": lambda c: (["--validation-split", "1"], "--validation-split"),
    # Options the recipe would silently ignore (issue: "--data-dir with mlp-synthetic").
    "mlp-with-data-dir": lambda c: (["--recipe", "mlp-synthetic"], "--model: not used by recipe mlp-synthetic"),
    "bert-sst2-with-train-file": lambda c: (["--train-file", "x.csv"], "--train-file: not used by recipe bert-sst2"),
    # Output entries of the wrong kind: refused before training, not after it.
    "results-json-is-a-directory": lambda c: _occupy(
        c, "results.json", ["--output-dir", str(c.tmp / "o2")], "results.json: exists and is not a file"
    ),
    "checkpoint-is-a-directory": lambda c: (_mkdir(c.out / "checkpoint.pt"), "checkpoint.pt: exists and is not a file"),
    "saved-model-is-a-file": lambda c: (
        _touch(c.out / "model", ["--save-model"]),
        "model: exists and is not a directory",
    ),
    # Broken model directories (issue 13): refused before training, one line naming the cause.
    "model-config-invalid-json": lambda c: (
        ["--model", str(_broken_model(c, "config.json", b"{not json"))],
        "config.json",
    ),
    "model-weights-truncated": lambda c: (
        ["--model", str(_broken_model(c, "model.safetensors", truncate=True))],
        "model.safetensors",
    ),
    "model-weights-empty": lambda c: (
        ["--model", str(_broken_model(c, "model.safetensors", b""))],
        "model.safetensors",
    ),
    "model-unknown-type": lambda c: (
        [
            "--model",
            str(
                _broken_model(
                    c,
                    "config.json",
                    json.dumps({**json.loads((c.model / "config.json").read_text()), "model_type": "bertish"}).encode(),
                )
            ),
        ],
        "bertish",
    ),
    "model-without-tokenizer": lambda c: (["--model", str(_broken_model(c, None, drop_tokenizer=True))], "tokenizer"),
    "model-decoder-only": lambda c: (["--model", str(_gpt2(c))], "decoder-only"),
    "max-length-past-positions": lambda c: (["--max-length", "4096"], "--max-length"),
    "eval-only-without-fine-tuned-head": lambda c: (["--eval-only"], "no fine-tuned classifier head"),
}


# Issue 19: the user's data read exactly as written. Each runs --recipe text-classification
# on a data file built by the case; the same checks as above (exit 2, one line, nothing touched).
def file_args(ctx: Ctx, train: Path, *extra: str) -> list[str]:
    return [
        "--recipe",
        "text-classification",
        "--model",
        str(ctx.model),
        "--train-file",
        str(train),
        "--validation-split",
        "0.25",
        "--max-steps",
        "1",
        "--batch-size",
        "4",
        "--output-dir",
        str(ctx.out),
        "--no-progress",
        *extra,
    ]


def _rows(labels, texts=None) -> str:
    texts = texts or [f"review number {i}" for i in range(len(labels))]
    return "text,label\n" + "".join(f"{t},{label}\n" for t, label in zip(texts, labels))


def _file(c: Ctx, name: str, content: str | bytes) -> Path:
    path = c.tmp / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


def _fifo(c: Ctx) -> Path:
    path = c.tmp / "train.csv"
    os.mkfifo(path)  # was: the reader blocked forever on it
    return path


# id -> setup(ctx) returning (the CLI's args, a fragment the error must name)
FILE_CASES = {
    "train-file-fifo": lambda c: (file_args(c, _fifo(c)), "is a named pipe (FIFO)"),
    "unquoted-comma-in-every-row": lambda c: (
        file_args(c, _file(c, "t.csv", _rows("ab" * 4, [f"good, really {i}" for i in range(8)]))),
        "data row 1 has more fields than the header's 2",
    ),
    "duplicate-header-name": lambda c: (
        file_args(c, _file(c, "t.csv", "text,label,label\n" + "".join(f"t{i},{'ab'[i % 2]},x\n" for i in range(8)))),
        "names column 'label' more than once",
    ),
    "regression-on-yes-no": lambda c: (
        file_args(c, _file(c, "t.csv", _rows(["yes", "no"] * 4)), "--task-kind", "regression"),
        "--task-kind regression, but the labels",
    ),
    "regression-on-true-false": lambda c: (
        file_args(
            c,
            _file(
                c,
                "t.jsonl",
                "".join(f'{{"text": "t{i}", "label": {"true" if i % 2 else "false"}}}\n' for i in range(8)),
            ),
            "--task-kind",
            "regression",
        ),
        "are true/false",
    ),
    "regression-inf": lambda c: (
        file_args(c, _file(c, "t.csv", _rows(["0.5", "inf", "1.5", "2.5"] * 2))),
        "data row 2: label inf in column 'label' is not a finite number",
    ),
    "regression-1e200": lambda c: (
        file_args(c, _file(c, "t.csv", _rows(["0.5", "1.5", "1e200", "2.5"] * 2))),
        "data row 3: regression target 1e+200",
    ),
    "regression-nan-json": lambda c: (
        file_args(
            c,
            _file(
                c, "t.jsonl", "".join(f'{{"text": "t{i}", "label": {"NaN" if i == 4 else i / 2}}}\n' for i in range(8))
            ),
        ),
        "data row 5: label nan",
    ),
    "latin1-csv": lambda c: (
        file_args(c, _file(c, "t.csv", _rows("ab" * 4).encode().replace(b"number 3", b"caf\xe9"))),
        "line 5: b'\\xe9' is not UTF-8 (Invalid UTF8 sequence); save the file as UTF-8",
    ),
    "latin1-jsonl": lambda c: (
        file_args(
            c, _file(c, "t.jsonl", b"".join(b'{"text": "caf\xe9 %d", "label": %d}\n' % (i, i % 2) for i in range(8)))
        ),
        "save the file as UTF-8",
    ),
    "cap-leaves-one-class": lambda c: (
        file_args(c, _file(c, "t.csv", _rows("aaaaaaaabbbb")), "--max-train-samples", "4"),
        "(after --max-train-samples 4 kept the first 4 training rows",
    ),
    "path-with-two-colons": lambda c: (file_args(c, _file(c, "a::b.csv", _rows("ab" * 4))), "containing '::'"),
}


@pytest.mark.parametrize("case", sorted(FILE_CASES))
def test_bad_data_file_exits_2_with_one_line_and_touches_nothing(case, ctx, capsys, isolated_hf):
    args, fragment = FILE_CASES[case](ctx)
    capsys.readouterr()
    before = _snapshot(ctx.out)
    code = main(args)
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert code == 2, captured.err
    assert len(lines) == 1, lines
    assert lines[0].startswith("finetune.py: error: ") and fragment in lines[0], lines[0]
    assert _snapshot(ctx.out) == before
    assert captured.out == ""


def test_glue_task_offline_advises_what_glue_accepts(ctx, capsys, isolated_hf):
    # Was: "--dataset glue/mnli: ... pass --train-file/--validation-file", two flags glue refuses.
    before = _snapshot(ctx.out)
    code = main(
        [
            "--recipe",
            "glue",
            "--task",
            "mnli",
            "--model",
            str(ctx.model),
            "--output-dir",
            str(ctx.out),
            "--max-steps",
            "1",
            "--no-progress",
        ]
    )
    lines = capsys.readouterr().err.splitlines()
    assert code == 2 and len(lines) == 1, lines
    assert "--task mnli: not in the local datasets cache" in lines[0]  # the flag the user typed
    assert "--recipe text-classification --train-file" in lines[0] and "--task sst2 or mrpc" in lines[0]
    assert "--dataset" not in lines[0]
    assert _snapshot(ctx.out) == before


def test_a_bracketed_path_trains_on_that_file_not_its_glob_match(ctx, capsys, isolated_hf):
    # Was: tr[1].csv read as the glob pattern tr[1].csv, which matches tr1.csv: exit 0 on the wrong data.
    _file(ctx, "tr1.csv", _rows(["wrong", "data"] * 4))
    train = _file(ctx, "tr[1].csv", _rows(["neg", "pos"] * 4))
    code = main(file_args(ctx, train, "--seed", "-3"))  # a negative seed was a numpy traceback in the hold-out
    assert code == 0, capsys.readouterr().err
    run = json.loads((ctx.out / "results.json").read_text())["runs"][0]
    assert run["task"]["names"] == ["neg", "pos"]


def test_the_same_file_for_training_and_validation_is_said(ctx, capsys, isolated_hf):
    train = _file(ctx, "t.csv", _rows(["neg", "pos"] * 4))
    args = file_args(ctx, train, "--validation-file", str(ctx.tmp / "." / "t.csv"))
    args.remove("--validation-split"), args.remove("0.25")
    code = main(args)
    err = capsys.readouterr().err
    assert code == 0, err
    assert "is the --train-file: the evaluation measures how well the model fits its training data" in err


def _broken_model(
    c: Ctx, name: str | None, content: bytes | None = None, *, truncate: bool = False, drop_tokenizer: bool = False
) -> Path:
    import shutil

    d = c.tmp / "broken-model"
    shutil.copytree(c.model, d)
    if truncate:
        (d / name).write_bytes((d / name).read_bytes()[:-100])
    elif name is not None:
        (d / name).write_bytes(content)
    if drop_tokenizer:
        for f in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
            (d / f).unlink(missing_ok=True)
    return d


def _gpt2(c: Ctx) -> Path:
    import shutil

    from transformers import GPT2Config, GPT2Model

    d = c.tmp / "gpt2"
    GPT2Model(GPT2Config(n_embd=32, n_layer=1, n_head=2, n_positions=64)).save_pretrained(d)
    for f in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (c.model / f).exists():
            shutil.copy(c.model / f, d / f)
    return d


def _mkdir(path: Path) -> list[str]:
    path.mkdir()
    return []


def _touch(path: Path, args: list[str]) -> list[str]:
    path.write_text("a user's file, not a model\n")
    return args


def _occupy(c: Ctx, name: str, args: list[str], fragment: str):
    other = c.tmp / "o2"
    other.mkdir()
    (other / name).mkdir()
    return args, fragment


def _with_checkpoint(c: Ctx, args: list[str], fragment: str, damage: str | None = None):
    c.checkpoint("fp32", damage=damage)
    return args, fragment


def _config_only(c: Ctx) -> Path:
    d = c.tmp / "config-only-model"
    d.mkdir()
    (d / "config.json").write_text((c.model / "config.json").read_text())
    return d


@pytest.fixture
def ctx(tmp_path, tiny_bert_dir, tiny_data_dir) -> Ctx:
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_bytes(SENTINEL)
    return Ctx(tmp_path, tiny_bert_dir, tiny_data_dir, out)


def _snapshot(d: Path) -> dict[str, bytes | None]:
    return {p.name: p.read_bytes() if p.is_file() else None for p in sorted(d.iterdir())}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_exits_2_with_one_line_and_touches_nothing(case, ctx, capsys):
    extra, fragment = CASES[case](ctx)
    capsys.readouterr()  # what building the case printed (transformers' save bars) is not the CLI's
    before = _snapshot(ctx.out)
    argv = base_args(ctx) + extra
    code = main(evaluation_only(argv) if "--eval-only" in extra else argv)
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert code == 2, captured.err
    assert len(lines) == 1, lines
    assert lines[0].startswith("finetune.py: error: ") and fragment in lines[0], lines[0]
    assert _snapshot(ctx.out) == before  # results.json (and any checkpoint) byte-for-byte intact
    assert captured.out == ""  # failed before printing a run summary: no work started


def test_output_dir_that_is_a_file_is_refused_and_left_alone(ctx, capsys):
    target = ctx.out / "results.json"
    code = main(base_args(ctx) + ["--output-dir", str(target)])
    lines = capsys.readouterr().err.splitlines()
    assert code == 2 and len(lines) == 1 and str(target) in lines[0] and "not a directory" in lines[0]
    assert target.read_bytes() == SENTINEL


def test_a_misspelt_model_name_is_refused_not_replaced(ctx, capsys, isolated_hf):
    # Only the default model falls back to the shipped MiniLM; a name the user typed
    # that is not a directory, not cached and not reachable is an error (was: exit 0, MiniLM).
    before = _snapshot(ctx.out)
    code = main(base_args(ctx) + ["--model", "roberta-larg"])
    lines = capsys.readouterr().err.splitlines()
    assert code == 2 and len(lines) == 1 and "roberta-larg" in lines[0], lines
    assert _snapshot(ctx.out) == before


def test_more_generated_data_than_it_offers_is_refused_at_once(ctx, capsys, isolated_hf):
    # Was: a MemoryError after ~24 s of generating ten million sentences.
    args = [a for a in base_args(ctx) if a not in ("--data-dir", str(ctx.data))]
    args[args.index("--max-train-samples") + 1] = str(10**7)
    before = _snapshot(ctx.out)
    code = main(args)
    lines = capsys.readouterr().err.splitlines()
    assert code == 2 and len(lines) == 1 and "at most 1000000 training sentences" in lines[0], lines
    assert _snapshot(ctx.out) == before


def test_device_cuda_without_cuda(ctx, capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the case needs a machine without it")
    before = _snapshot(ctx.out)
    code = main(base_args(ctx) + ["--device", "cuda"])
    lines = capsys.readouterr().err.splitlines()
    assert code == 2 and len(lines) == 1 and "--device cuda" in lines[0]
    assert _snapshot(ctx.out) == before


def test_a_100k_character_sentence_is_truncated_and_trains(ctx, capsys):
    long_sentence = ("a long , winding and rather wonderful film " * 2400)[:100_000]
    data = ctx.data_dir(HEADER + f"{long_sentence}\t1\n" + GOOD_ROWS)
    code = main(base_args(ctx) + ["--data-dir", str(data), "--max-length", "64"])
    assert code == 0, capsys.readouterr().err
    run = json.loads((ctx.out / "results.json").read_text())["runs"][0]
    assert run["steps"] == 1 and run["skipped_steps"] == 0 and run["history"]["loss"][0] > 0
    assert len(CASES) + 2 >= 25  # the catalogue above, plus the two special cases


def test_a_batch_that_does_not_fit_in_memory_is_one_line(ctx, capsys, monkeypatch):
    # What torch raises on CPU when one allocation is larger than the machine.
    from mixft.train.trainer import Trainer

    def fit(self):
        raise RuntimeError(
            "[enforce fail at alloc_cpu.cpp:121] data. DefaultCPUAllocator: can't allocate memory: "
            "you tried to allocate 78643200000 bytes. Error code 12 (Cannot allocate memory)"
        )

    monkeypatch.setattr(Trainer, "fit", fit)
    before = _snapshot(ctx.out)
    code = main(base_args(ctx) + ["--batch-size", "100000"])
    err = capsys.readouterr().err.splitlines()
    # The earlier run was set aside when training began, and is put back when the first step refuses the batch.
    aside = [line for line in err if "held an earlier run" in line or "the earlier run is back in place" in line]
    lines = [line for line in err if line not in aside]
    assert len(aside) in (0, 2), err
    assert code == 2 and len(lines) == 1 and "--batch-size 100000 does not fit in cpu memory" in lines[0], lines
    after = _snapshot(ctx.out)
    after.pop(".mixft.lock")  # the run had started (and held the directory) when the step failed
    assert after == before


def test_a_recipe_default_is_not_blamed_on_a_flag_never_passed(ctx, capsys, tmp_path):
    # Was: "--max-length 128 is longer than --model X can read" although the user never passed
    # --max-length: 128 is bert-sst2's default (its DEFAULTS). A value the user gave is still named as theirs.
    from tests.tiny_models import make_tiny_model_dir

    short = make_tiny_model_dir("bert", tmp_path / "bert-64")  # reads 64 positions
    capsys.readouterr()
    before = _snapshot(ctx.out)
    for extra, named in (
        ([], "the recipe's default max length 128 is longer than"),
        (["--max-length", "128"], "--max-length 128 is longer than"),
    ):
        code = main(base_args(ctx) + ["--model", str(short), *extra])
        captured = capsys.readouterr()
        lines = captured.err.splitlines()
        assert code == 2 and len(lines) == 1, lines
        assert named in lines[0] and "at most 64 tokens; pass --max-length 64 or less" in lines[0], lines[0]
        assert ("--max-length 128" in lines[0]) == bool(extra), lines[0]
        assert _snapshot(ctx.out) == before and captured.out == ""
    # The one helper every such message uses, through the recipe's defaults (applied twice, as a
    # notebook's cfg is by mixft.run) and past a change made afterwards.
    from mixft.config.run_config import RunConfig, describe_setting

    defaults = {"max_length": 128, "epochs": 2}
    cfg = RunConfig().with_defaults(defaults).with_defaults(defaults)
    assert describe_setting(cfg, "max_length") == "the recipe's default max length 128"
    assert describe_setting(RunConfig(max_length=128).with_defaults(defaults), "max_length") == "--max-length 128"
    cfg.max_length = 64
    assert describe_setting(cfg, "max_length") == "--max-length 64"
    assert describe_setting(RunConfig(), "max_length") == "--max-length not set"


def test_an_undefined_correlation_is_explained_not_nan(ctx, capsys, isolated_hf):
    # Was: "[fp32] pearsonr nan, spearmanr nan": constant validation labels leave the correlations
    # undefined, and nothing said so. results.json stays valid JSON: null, with the reason beside it.
    from mixft.report.markdown import render_markdown

    train = _file(ctx, "train.csv", _rows(["0.5", "1.5", "2.5", "3.5"] * 2))
    dev = _file(ctx, "dev.csv", _rows(["3.0"] * 4))
    args = file_args(ctx, train, "--validation-file", str(dev))
    args.remove("--validation-split"), args.remove("0.25")
    code = main(args)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    (line,) = [ln for ln in captured.out.splitlines() if ln.startswith("[fp32]")]
    assert "nan" not in line
    assert "pearsonr and spearmanr undefined: the labels are constant (all 3)" in line, line
    text = (ctx.out / "results.json").read_text()
    doc = json.loads(text, parse_constant=lambda name: pytest.fail(f"results.json holds {name}"))
    evaluation = doc["runs"][0]["eval"]
    assert evaluation["pearsonr"] is None and evaluation["spearmanr"] is None
    assert evaluation["undefined"] == {
        "pearsonr": "the labels are constant (all 3)",
        "spearmanr": "the labels are constant (all 3)",
    }
    assert "Pearson r and Spearman ρ undefined: the labels are constant (all 3)" in render_markdown(doc)


def test_undefined_reasons_name_the_constant_side():
    from mixft.metrics.task import undefined_reasons

    nan = float("nan")
    assert undefined_reasons({"pearsonr": nan, "loss": 0.5}, [0.25, 0.25, 0.25], [1.0, 2.0, 3.0]) == {
        "pearsonr": "the predictions are constant (all 0.25)"
    }
    assert undefined_reasons({"spearmanr": nan}, [1.0, 1.0], [2.0, 2.0]) == {
        "spearmanr": "the predictions are constant (all 1) and the labels are constant (all 2)"
    }
    assert undefined_reasons({"pearsonr": nan}, [1.0], [2.0]) == {
        "pearsonr": "1 evaluation example, two or more needed"
    }
    assert undefined_reasons({"pearsonr": 0.5}, [1.0, 2.0], [1.0, 2.0]) == {}
