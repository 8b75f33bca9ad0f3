"""FSDP2 sharding (--fsdp) for real: two CPU processes (gloo) under torchrun, tiny models, a few steps."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

import fsdp_worker  # noqa: E402
from conftest import made_once  # noqa: E402
from launch import torchrun  # noqa: E402

from tests.cli_runs import bert_sst2_args  # noqa: E402


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    """Every check of fsdp_worker.RUNS, trained once under torchrun: ``{name: [rank 0's, rank 1's]}``."""
    checks = [*fsdp_worker.RUNS, *RESUMED, "signal:bert_fp32", "collapse:bert_fp32", "evalonly:bertcls_fp32"]
    folder = made_once(
        tmp_path_factory,
        "fsdp-runs",
        lambda folder: torchrun("tests/fsdp_worker.py", str(folder / "runs"), ",".join(checks)),
    )
    ranks = [torch.load(folder / f"runs.rank{r}.pt") for r in range(2)]
    assert [r["world"] for r in ranks] == [2, 2]
    return {name: [r["runs"][name] for r in ranks] for name in checks}


RESUMED = ["resume:bert_dropout", "resume:bert_fp16_inf", "resume:qwen2_lora_bf16"]


def one_process(name: str):
    """RUNS[name] in this process: the two ranks' micro-batches accumulated in one window."""
    accum = fsdp_worker.RUNS[name][3]
    trainer, result, _ = fsdp_worker.train(name, fsdp=False, grad_accum=2 * accum)
    return trainer, result


@pytest.mark.parametrize(
    "name", ["bert_fp32", "qwen2_fp32", "roberta_fp32", "bert_lora_fp32", "gpt2_lora_fp32", "bertcls_fp32"]
)
def test_fsdp_fp32_equals_one_process(sharded, name):
    ranks = sharded[name]
    trainer, result = one_process(name)
    for rank in ranks:
        assert (
            rank["sharded"] and rank["shard_dtypes"] == ["torch.float32"] and rank["grad_dtypes"] == ["torch.float32"]
        )
        # Every rank holds only its shards (plus FSDP's padding of a dim 0 that does not divide).
        assert rank["local_numel"] < 0.6 * rank["numel"]
        assert rank["samples"] == trainer.state.samples == 32  # the global count
        assert [s["lr"] for s in rank["steps"]] == [s for s in trainer.state.history["lr"]]
        torch.testing.assert_close(
            rank["grad_norms"], [float(g) for g in trainer.state.history["grad_norm"]], rtol=1e-5, atol=1e-6
        )
    assert sum(r["local_numel"] for r in ranks) >= ranks[0]["numel"]
    single = fsdp_worker.whole_parameters(trainer.module)
    torch.testing.assert_close(ranks[0]["weights"], ranks[1]["weights"], rtol=0, atol=0)
    torch.testing.assert_close(ranks[0]["weights"], single, rtol=0, atol=1e-5)
    # Evaluation: 3 batches over 2 ranks (2 + 1: the short rank runs one extra forward, dropped).
    assert ranks[0]["eval"]["accuracy"] == pytest.approx(result.eval["accuracy"])
    assert ranks[0]["eval"]["loss"] == pytest.approx(result.eval["loss"], rel=1e-5)


@pytest.mark.parametrize("name", ["bert_bf16", "qwen2_lora_bf16", "bertcls_bf16"])
def test_fsdp_bf16_policy_gathers_bf16_keeps_fp32_shards_and_trains(sharded, name):
    ranks = sharded[name]
    for rank in ranks:
        # Master shards and their gradients fp32; the blocks' Linear layers compute with bf16
        # weights (param_dtype), the norms with fp32 ones (their own fp32 units).
        assert rank["shard_dtypes"] == ["torch.float32"] and rank["grad_dtypes"] == ["torch.float32"]
        assert ("Linear", "torch.bfloat16") in rank["gathered"] and ("Linear", "torch.float32") not in rank["gathered"]
        if name.startswith("bert"):
            assert ("LayerNorm", "torch.float32") in rank["gathered"]
            assert ("LayerNorm", "torch.bfloat16") not in rank["gathered"]
        assert rank["skipped"] == 0
    single, _ = one_process(name)  # the same bf16 run in one process (autocast over whole fp32 weights)
    torch.testing.assert_close(ranks[0]["weights"], fsdp_worker.whole_parameters(single.module), rtol=2e-2, atol=2e-3)
    assert (
        ranks[0]["weights"].ne(fsdp_worker.whole_parameters(fsdp_worker.classifier(*fsdp_worker.RUNS[name][:2]))).any()
    )  # it trained


@pytest.mark.parametrize("name", ["bertcls_fp32", "bertcls_bf16"])
def test_bert_classifier_computes_its_last_layer_for_cls_only_under_fsdp_too(sharded, name):
    # bert-sst2's model: its last layer's feed-forward runs on the [CLS] rows alone (4 sentences per
    # process and batch, 2-D), not on every token (4 x 12, 3-D), with that layer's weights sharded:
    # FSDP gathers them around the method mixft registers. The one-process run takes the same path.
    # Its result equals the one-process run's (the fp32 and bf16 tests above, same names).
    for rank in sharded[name]:
        assert rank["sharded"]
        assert rank["last_feed_forward"] == [(4, 32)]
    _, _, alone = fsdp_worker.train(name, fsdp=False, grad_accum=2)
    assert alone.last_feed_forward == {(4, 32)}


def test_evaluating_without_training_under_fsdp_equals_one_process(sharded):
    # --eval-only's path (Trainer.evaluate_only) on bert-sst2's model, sharded: every row's metrics,
    # gathered from both processes (3 batches: 2 + 1), as one process computes them; nothing trained.
    ranks = sharded["evalonly:bertcls_fp32"]
    _, alone, _ = fsdp_worker.train("bertcls_fp32", fsdp=False, eval_only=True)
    initial = fsdp_worker.whole_parameters(fsdp_worker.classifier("bertcls", False))
    for rank in ranks:
        assert rank["sharded"] and rank["local_numel"] < 0.6 * rank["numel"]
        assert rank["step"] == 0 and rank["steps"] == [] and rank["samples"] == 0
        torch.testing.assert_close(rank["weights"], initial, rtol=0, atol=0)
    assert alone.steps == 0
    assert ranks[0]["eval"]["accuracy"] == pytest.approx(alone.eval["accuracy"])
    assert ranks[0]["eval"]["loss"] == pytest.approx(alone.eval["loss"], rel=1e-5)


def test_fsdp_fp16_inf_on_one_rank_skips_on_every_rank(sharded):
    ranks = sharded["bert_fp16_inf"]
    for rank in ranks:  # the inf went into rank 1's shard only, at step index 1
        assert [s["skipped"] for s in rank["steps"]] == [False, True, False, False]
        assert [s["scale"] for s in rank["steps"]] == [1024.0, 512.0, 512.0, 512.0]
        lrs = [s["lr"] for s in rank["steps"]]
        assert lrs[2] == lrs[1] and lrs[3] < lrs[2]  # the schedule held on the skipped step
        assert rank["final_loss_scale"] == 512.0 and rank["skipped"] == 1
        assert ("Linear", "torch.float16") in rank["gathered"] and rank["grad_dtypes"] == ["torch.float32"]
    torch.testing.assert_close(ranks[0]["weights"], ranks[1]["weights"], rtol=0, atol=0)


def test_dropout_under_fsdp_draws_what_it_draws_under_ddp(sharded):
    # Dropout acts on activations, which FSDP leaves whole in each process: the same masks as DDP's.
    fsdp, ddp = (sharded[n][0]["weights"] for n in ("bert_dropout", "bert_dropout_ddp"))
    torch.testing.assert_close(fsdp, ddp, rtol=0, atol=1e-6)
    # Not equal for want of dropout: these runs' model draws masks in every block.
    model = fsdp_worker.classifier("bert", False, dropout=True)
    assert sum(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in model.modules()) >= 4


@pytest.mark.parametrize("resumed", RESUMED)
def test_sharded_checkpoint_resume_equals_the_run_never_stopped(sharded, resumed):
    # Stopped after step 2 of 4 with a DCP checkpoint (each rank its shards), resumed by a new
    # trainer: dropout masks (RNG per rank), AdamW, the schedule and fp16's scale (an inf at
    # step index 1 in the saved past) all come back, so the weights are bit for bit the same.
    for stopped, never in zip(sharded[resumed], sharded[resumed.removeprefix("resume:")]):
        torch.testing.assert_close(stopped["weights"], never["weights"], rtol=0, atol=0)
        assert stopped["skipped"] == never["skipped"] and stopped["final_loss_scale"] == never["final_loss_scale"]
        assert [s["lr"] for s in stopped["steps"]] == [s["lr"] for s in never["steps"]][2:]


def test_a_signal_seen_by_one_process_stops_every_process_after_the_same_step_and_saves(sharded):
    # torchrun forwards SIGTERM to every process, each at its own moment: here process 1 alone sees it
    # after step 2. The processes agree at each step end, so both stop there and write the sharded
    # checkpoint together (a save only one process entered would wait forever in its collectives).
    for rank in sharded["signal:bert_fp32"]:
        assert rank["stop_kind"] == "interrupt" and rank["step"] == 2
        assert rank["eval"]["checkpoint_step"] == 2


def test_a_collapse_seen_by_one_process_stops_every_process_at_the_same_step_with_its_reason(sharded):
    # Process 1's loss alone reads NaN after step 2: a process stopping alone would leave the other
    # waiting in the next forward's weight gathering (the fixture's launch would time out).
    ranks = sharded["collapse:bert_fp32"]
    for rank in ranks:
        assert rank["stop_kind"] == "collapse" and rank["step"] == 2
        assert "the loss is nan at step 2" in rank["stopped_early"]
        assert "no diagnosis under --fsdp" in rank["stopped_early"]
    assert ranks[0]["stopped_early"] == ranks[1]["stopped_early"]  # one reason, said alike in every process
    assert "(in process 1)" in ranks[0]["stopped_early"]


def test_a_damaged_sharded_checkpoint_is_refused_in_one_line(tmp_path):
    import json
    import zlib

    from mixft.train.checkpoint import CheckpointError
    from mixft.train.sharded_checkpoint import MANIFEST, verify_sharded_checkpoint

    directory = tmp_path / "checkpoint.dcp"
    directory.mkdir()
    # What DCP writes for 2 processes: its index and one shard file per process, each listed with its CRC.
    contents = {".metadata": b"index bytes", "__0_0.distcp": b"shard bytes", "__1_0.distcp": b"other shard"}
    for name, data in contents.items():
        (directory / name).write_bytes(data)
    (directory / MANIFEST).write_text(
        json.dumps(
            {
                "format": "mixft-sharded-checkpoint",
                "version": 1,
                "world_size": 2,
                "meta": {},
                "files": {name: {"bytes": len(data), "crc32": zlib.crc32(data)} for name, data in contents.items()},
            }
        )
    )
    assert verify_sharded_checkpoint(directory, world_size=2)["world_size"] == 2
    with pytest.raises(CheckpointError, match="written by 2 processes, this run has 4"):
        verify_sharded_checkpoint(directory, world_size=4)
    (directory / "__0_0.distcp").write_bytes(b"shard bytez")
    with pytest.raises(CheckpointError, match="fails its CRC check"):
        verify_sharded_checkpoint(directory)
    with pytest.raises(CheckpointError, match="no complete sharded checkpoint"):
        verify_sharded_checkpoint(tmp_path)


def test_inject_nonfinite_reaches_sharded_gradients(sharded):
    initial = fsdp_worker.whole_parameters(fsdp_worker.classifier("bert", False))
    for rank in sharded["bert_fp32_injected"]:
        assert [s["skipped"] for s in rank["steps"]] == [True] * 4 and rank["skipped"] == 4
        torch.testing.assert_close(rank["weights"], initial, rtol=0, atol=0)  # nothing was written


def test_trainer_fsdp_without_a_process_group_is_one_line_usage_error():
    from mixft.errors import UsageError
    from mixft.train.trainer import Trainer

    model = fsdp_worker.classifier("bert", False)
    with pytest.raises(UsageError, match="launch it with torchrun --nproc-per-node N"):
        Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), model.loss_fn, [], fsdp=True)


def test_transformer_blocks_found_in_every_tiny_architecture_and_lora():
    from mixft.train.fsdp import fp32_units, transformer_blocks

    for arch in ("bert", "roberta", "qwen2", "gpt2"):
        for lora in (False, True):
            model = fsdp_worker.classifier(arch, lora)
            blocks = transformer_blocks(model)
            assert len(blocks) == 2 and len({type(b) for b in blocks}) == 1
            units = fp32_units(model)
            assert units and all(not any(u is b for b in blocks) for u in units)
    assert transformer_blocks(nn.Sequential(nn.Linear(2, 2), nn.ReLU())) == []


def test_the_sharding_asks_the_model_for_the_methods_it_calls_instead_of_forward():
    # The protocol shard_model follows (its torchrun runs above: bertcls_*): each module whose class
    # defines fsdp_forward_methods is asked once, wherever it sits; other models name none.
    from mixft.train.fsdp import forward_methods

    class CallsAMethod(nn.Module):
        def __init__(self):
            super().__init__()
            self.block = nn.Linear(2, 2)

        def fsdp_forward_methods(self):
            return [(self.block, "its_method")]

    inner = CallsAMethod()
    assert forward_methods(nn.Sequential(nn.ReLU(), inner)) == [(inner.block, "its_method")]
    assert forward_methods(fsdp_worker.classifier("qwen2", True)) == []
    bert = fsdp_worker.classifier("bertcls", False)
    assert forward_methods(bert) == []  # unsharded: the last layer keeps its own forward
    assert not hasattr(bert.encoder.encoder.layer[-1], "mixft_first_tokens")


def finetune_args(model, data, out, *extra):
    return bert_sst2_args(model, data, out, *extra, batch_size=2, epochs=1)


@pytest.mark.parametrize("world", [None, "1"])
def test_cli_fsdp_without_two_processes_exits_2_in_one_line(
    tmp_path, tiny_bert_dir, tiny_data_dir, monkeypatch, capsys, world
):
    from mixft.cli.main import main

    if world is None:
        monkeypatch.delenv("WORLD_SIZE", raising=False)
    else:
        monkeypatch.setenv("WORLD_SIZE", world)
    out = tmp_path / "out"
    assert main(finetune_args(tiny_bert_dir, tiny_data_dir, out, "--fsdp")) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert (
        "launch it with torchrun --nproc-per-node N" if world is None else "--fsdp with 1 process shards nothing"
    ) in line
    assert not out.exists()


@pytest.mark.parametrize(
    "extra,words",
    [
        (["--precision", "bf16", "--fp32-modules", "encoder.layer.0.output"], "--fp32-modules with --fsdp at bf16"),
        (["--precision", "bf16-pure"], "--fsdp with bf16-pure: the sharded run keeps fp32 shards"),
    ],
)
def test_cli_fsdp_refuses_what_it_does_not_do_before_joining_a_group(
    tmp_path, tiny_bert_dir, tiny_data_dir, monkeypatch, capsys, extra, words
):
    from mixft.cli.main import main

    monkeypatch.setenv("WORLD_SIZE", "2")  # as torchrun sets it; refused before any process group is joined
    out = tmp_path / "out"
    assert main(finetune_args(tiny_bert_dir, tiny_data_dir, out, "--fsdp", *extra)) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert words in line and not out.exists()


def test_cli_fsdp_decoder_with_lora_on_ladder_shapes_saves_adapters_that_one_process_evaluates_alike(tmp_path, capsys):
    import json

    from tiny_models import TOY_ROWS, make_tiny_model_dir

    from mixft.cli.main import main

    model = make_tiny_model_dir("qwen2", tmp_path / "qwen2", num_hidden_layers=2)
    body = "".join(f"{t},{['neg', 'mid', 'pos'][c]}\n" for t, c, _ in TOY_ROWS)
    (tmp_path / "train.csv").write_text("text,label\n" + body * 2)
    (tmp_path / "dev.csv").write_text("text,label\n" + body)
    data = [
        "--recipe",
        "text-classification",
        "--train-file",
        str(tmp_path / "train.csv"),
        "--validation-file",
        str(tmp_path / "dev.csv"),
        "--batch-size",
        "3",
        "--no-progress",
    ]
    out = tmp_path / "out"
    proc = torchrun(
        "scripts/finetune.py",
        *data,
        "--model",
        str(model),
        "--epochs",
        "1",
        "--lora",
        "--fsdp",
        "--save-model",
        "--batch-shapes",
        "ladder",  # each rank pads its own training batches up the ladder (mixft.data.shape_ladder)
        "--output-dir",
        str(out),
    )
    assert proc.stdout.count("mixft run") == 1
    assert "sharding   FSDP2 over 2 processes" in proc.stdout and "fp32 weights gathered per block" in proc.stdout
    (run,) = json.loads((out / "results.json").read_text())["runs"]
    assert run["steps"] == 4 and run["lora"]  # 24 examples / (3 per rank x 2 ranks)
    assert run["batch_shapes"] == "ladder" and "samples/s (batch shapes on a ladder)" in proc.stdout
    # The any-model recipe's task metrics, computed over both ranks' shards of the evaluation.
    assert run["task"]["names"] == ["mid", "neg", "pos"] and {"accuracy", "f1"} <= set(run["eval"])
    capsys.readouterr()
    assert main([*data, "--model", str(out / "model"), "--eval-only", "--output-dir", str(tmp_path / "alone")]) == 0
    (alone,) = json.loads((tmp_path / "alone" / "results.json").read_text())["runs"]
    # The consolidated adapters and head, loaded on the frozen base in one process: the sharded run's evaluation.
    assert alone["eval"]["accuracy"] == run["eval"]["accuracy"]
    assert alone["eval"]["loss"] == pytest.approx(run["eval"]["loss"], rel=1e-5)
