"""bert-sst2 packs only the encoder families that pack (mixft.models.packed.PACKING_TYPES), through the real CLI.

A tiny RoBERTa (positions from padding_idx + 1) packs by default and says so; a tiny DeBERTa-v2
(its attention takes no block mask) is padded by default with a one-line notice, and its header,
results.json and config.yaml say so; an explicit ``--pack-sequences`` with it (flag or config
file) is refused in one line, exit 2, before any work, the output directory untouched. That the
packed RoBERTa step equals the padded one is tested in tests/models/test_packed.py (dropout off).
``--batch-shapes`` (mixft.data.shape_ladder): the ladder said in the header and the result line and
recorded per run; ``auto`` records what it chose; the default is exact; an unknown value is one line, exit 2, nothing written.
"""

from __future__ import annotations

import json

import pytest

from mixft.cli.main import main
from tests.cli_runs import bert_sst2_args
from tests.conftest import make_data_dir
from tests.tiny_models import make_tiny_model_dir

PACKING_FAMILIES = "bert, distilbert, electra, roberta, xlm-roberta"


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("pack-models")
    return {arch: make_tiny_model_dir(arch, root / arch) for arch in ("roberta", "deberta-v2")}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_data_dir(tmp_path_factory.mktemp("pack-data") / "sst", 8, 4)


def run(models, arch, data, out, *extra):
    return main(bert_sst2_args(models[arch], data, out, *extra, batch_size=4, max_steps=1, max_length=32))


def recorded_packing(out) -> tuple[bool, str]:
    (result,) = json.loads((out / "results.json").read_text())["runs"]
    config_line = next(line for line in (out / "config.yaml").read_text().splitlines() if "pack_sequences" in line)
    return result["config"]["pack_sequences"], config_line


def test_a_roberta_model_packs_by_default(models, data, tmp_path, capsys):
    assert run(models, "roberta", data, tmp_path / "out") == 0
    captured = capsys.readouterr()
    assert "; random, packed (no padding computed)" in captured.out
    assert "not packed" not in captured.err
    assert recorded_packing(tmp_path / "out") == (True, "pack_sequences: true")


def test_deberta_is_padded_by_default_with_a_notice_and_says_so(models, data, tmp_path, capsys):
    assert run(models, "deberta-v2", data, tmp_path / "out") == 0
    captured = capsys.readouterr()
    notices = [line for line in captured.err.splitlines() if "not packed" in line]
    assert notices == [
        f"notice: deberta-v2 models are not packed (packing is exact only for {PACKING_FAMILIES}); batches are padded"
    ]
    assert "; random, padded" in captured.out and "packed (no padding" not in captured.out
    # What ran is what is recorded (and what --resume's identity compares).
    assert recorded_packing(tmp_path / "out") == (False, "pack_sequences: false")


@pytest.mark.parametrize("how", ["flag", "config file"])
def test_deberta_with_pack_sequences_asked_is_refused_in_one_line_before_any_work(models, data, tmp_path, capsys, how):
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_text('{"runs": []}')  # an earlier run's: must stay as it was
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    if how == "flag":
        extra = ["--pack-sequences"]
    else:
        (tmp_path / "run.yaml").write_text("pack_sequences: true\n")
        extra = ["--config", str(tmp_path / "run.yaml")]
    assert run(models, "deberta-v2", data, out, *extra) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err, err
    assert "--pack-sequences" in err and "is a deberta-v2 model" in err and PACKING_FAMILIES in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_the_settled_value_stays_the_recipes_not_the_users(models, data):
    # --resume's refusals word a recipe default differently from a user's value (is_recipe_default).
    from mixft.config.run_config import RunConfig, is_recipe_default, with_settled
    from recipes import bert_sst2

    cfg = RunConfig(recipe="bert-sst2", model=str(models["deberta-v2"]), data_dir=str(data), max_length=32)
    cfg = cfg.with_defaults(bert_sst2.DEFAULTS).validate()
    prepared = bert_sst2.prepare(cfg)
    assert prepared.settled == {"pack_sequences": False}
    settled = with_settled(cfg, prepared.settled)
    assert settled.pack_sequences is False and is_recipe_default(settled, "pack_sequences")
    assert with_settled(cfg, {}) is cfg


def test_batch_shapes_ladder_is_said_in_the_header_and_recorded_per_run(models, data, tmp_path, capsys):
    assert run(models, "roberta", data, tmp_path / "out", "--batch-shapes", "ladder") == 0
    out = capsys.readouterr().out
    assert "packed, rows and row length rounded up a ladder (--batch-shapes ladder)" in out
    assert "samples/s (batch shapes on a ladder) |" in out  # the result line says what its speed was measured on
    (result,) = json.loads((tmp_path / "out" / "results.json").read_text())["runs"]
    assert (result["batch_shapes"], result["config"]["batch_shapes"]) == ("ladder", "ladder")


def test_auto_on_this_machine_records_what_it_chose(models, data, tmp_path, monkeypatch):
    from mixft.amp import hardware

    monkeypatch.setattr(hardware, "native_precisions", lambda device: {"bf16": False, "fp16": False})
    assert run(models, "roberta", data, tmp_path / "out", "--batch-shapes", "auto") == 0  # fp32, no native bf16
    (result,) = json.loads((tmp_path / "out" / "results.json").read_text())["runs"]
    assert (result["batch_shapes"], result["config"]["batch_shapes"]) == ("exact", "auto")


def test_the_default_is_exact_shapes_even_where_auto_would_take_the_ladder(monkeypatch):
    # A CPU with AMX, a bf16 run: auto would take the ladder; the default waits for its whole-step figure.
    # (What a recipe records of the choice is the CLI tests' above; this is the choice, without a run.)
    import torch
    from fake_probes import simulate_cpu

    from mixft.amp.precision import resolve_precision
    from mixft.data.shape_ladder import batch_shape_ladder
    from recipes import bert_sst2, text_classification

    simulate_cpu(monkeypatch, bf16=True, fp16=True, amx=True)
    cpu = torch.device("cpu")
    bf16 = resolve_precision("bf16", cpu, policy=False)
    assert batch_shape_ladder("auto", bf16, cpu) is not None
    for recipe in (bert_sst2, text_classification):
        assert recipe.DEFAULTS["batch_shapes"] == "exact"
        assert batch_shape_ladder(recipe.DEFAULTS["batch_shapes"], bf16, cpu) is None


def test_an_unknown_batch_shapes_value_is_refused_in_one_line(models, data, tmp_path, capsys):
    assert run(models, "roberta", data, tmp_path / "out", "--batch-shapes", "round") == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.endswith("argument --batch-shapes: must be one of: auto, ladder, exact, got 'round'")
    assert not (tmp_path / "out").exists()
