"""--resume at the CLI: DataLoader workers, data paths and files, --save-model and collapses of finished runs.

The continuation tests take their checkpoints from one reference run: every checkpoint
it writes is copied aside (``snapshots``), so a resume can start from an epoch end or
from the middle of an epoch without stopping anything; each resumed run must then end
with the reference's weights, bit for bit.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from conftest import make_data_dir, without_timings

import mixft.train.checkpoint
from mixft.callbacks.checkpointer import Checkpointer
from mixft.cli.main import main
from mixft.train.checkpoint import load_checkpoint
from tests.cli_runs import bert_sst2_args, text_classification_args

# 16 train sentences, batch 4: 4 optimizer steps per epoch, 3 epochs = 12 steps.
STEPS = 12


args = functools.partial(
    bert_sst2_args, max_train_samples=16, max_eval_samples=8, batch_size=4, epochs=3, checkpoint_every=1
)


def reference_run(tmp_path: Path, model: Path, data: Path, monkeypatch, *extra: str) -> tuple[Path, dict[int, Path]]:
    """Run to the end; return its output dir and a copy of the checkpoint as it was after each step."""
    out, snaps = tmp_path / "ref", tmp_path / "snapshots"
    snaps.mkdir()
    copies: dict[int, Path] = {}
    save = Checkpointer.save

    def save_and_copy(self, trainer):
        path = save(self, trainer)
        copies[trainer.state.step] = Path(
            shutil.copy(path, snaps / f"step{trainer.state.step}.pt")
        )  # the last save wins
        return path

    monkeypatch.setattr(Checkpointer, "save", save_and_copy)
    assert main(args(model, data, out, *extra)) == 0
    monkeypatch.setattr(Checkpointer, "save", save)
    return out, copies


def resume_from(snapshot: Path, out: Path, model: Path, data: Path | str, *extra: str) -> int:
    out.mkdir()
    shutil.copy(snapshot, out / "checkpoint.pt")
    return main(args(model, data, out, "--resume", *extra))


def weights(out: Path) -> dict[str, torch.Tensor]:
    return load_checkpoint(out / "checkpoint.pt")["trainer"]["model"]


def run_of(out: Path) -> dict:
    return json.loads((out / "results.json").read_text())["runs"][0]


@pytest.fixture
def data(tmp_path) -> Path:
    return make_data_dir(tmp_path / "sst2", 16, 8)


# ---------------------------------------------------------------- workers (issue 13.5a)
@pytest.mark.parametrize("workers,resumed_with", [("2", "2"), ("2", "1")], ids=["same-count", "other-count"])
def test_resume_with_dataloader_workers_is_bit_identical(
    tmp_path, tiny_bert_dir, data, monkeypatch, workers, resumed_with
):
    ref, snaps = reference_run(tmp_path, tiny_bert_dir, data, monkeypatch, "--num-workers", workers)
    reference = weights(ref)
    # step 4: the end of epoch 1, evaluated (both loaders started); step 6: the middle of epoch 2.
    for step in (4, 6):
        out = tmp_path / f"resumed-{step}"
        assert resume_from(snaps[step], out, tiny_bert_dir, data, "--num-workers", resumed_with) == 0
        new = weights(out)
        differing = [k for k in reference if not torch.equal(reference[k], new[k])]
        assert differing == [], f"resumed at step {step}: {len(differing)} of {len(reference)} tensors differ"
        assert without_timings(run_of(out)) == without_timings(run_of(ref))


def test_without_starting_the_workers_loaders_the_resumed_run_diverges(tmp_path, tiny_bert_dir, data, monkeypatch):
    # Guards the test above: persistent workers really do change the random stream on resume.
    ref, snaps = reference_run(tmp_path, tiny_bert_dir, data, monkeypatch, "--num-workers", "2")
    monkeypatch.setattr(mixft.train.checkpoint, "start_persistent_loaders", lambda trainer: None)
    out = tmp_path / "resumed"
    assert resume_from(snaps[6], out, tiny_bert_dir, data, "--num-workers", "2") == 0
    reference, new = weights(ref), weights(out)
    assert any(not torch.equal(reference[k], new[k]) for k in reference)


@pytest.mark.parametrize("before,after", [("0", "2"), ("2", "0")])
def test_switching_between_no_workers_and_workers_is_refused(
    tmp_path, tiny_bert_dir, data, monkeypatch, capsys, before, after
):
    _, snaps = reference_run(tmp_path, tiny_bert_dir, data, monkeypatch, "--num-workers", before)
    capsys.readouterr()
    out = tmp_path / "resumed"
    assert resume_from(snaps[6], out, tiny_bert_dir, data, "--num-workers", after) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and f"--num-workers {before}, this run has {after}" in lines[0], lines
    assert load_checkpoint(out / "checkpoint.pt")["meta"]["step"] == 6  # untouched


# ------------------------------------------------------------ data paths (issue 13.5b)
def test_the_same_data_dir_spelled_differently_resumes(tmp_path, tiny_bert_dir, data, monkeypatch):
    ref, snaps = reference_run(tmp_path, tiny_bert_dir, data, monkeypatch)
    monkeypatch.chdir(data.parent)
    for spelling in (f"{data}/", data.name, f"./{data.name}/"):  # trailing slash; relative; both
        out = tmp_path / f"resumed-{len(spelling)}"
        assert resume_from(snaps[6], out, tiny_bert_dir, spelling) == 0, spelling
        resumed, reference = without_timings(run_of(out)), without_timings(run_of(ref))
        assert resumed.pop("dataset").startswith(spelling)  # the description echoes the spelling used
        reference.pop("dataset")
        assert resumed == reference


def test_another_data_dir_is_still_refused(tmp_path, tiny_bert_dir, data, monkeypatch, capsys):
    _, snaps = reference_run(tmp_path, tiny_bert_dir, data, monkeypatch)
    other = Path(shutil.copytree(data, tmp_path / "copy"))
    capsys.readouterr()
    assert resume_from(snaps[6], tmp_path / "resumed", tiny_bert_dir, other) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "--data-dir" in lines[0] and str(other) in lines[0], lines


# ------------------------------------------------------- changed data files (13.5c)
@pytest.mark.parametrize("change", ["row-added", "same-size-edit", "deleted"])
def test_a_data_file_changed_since_the_checkpoint_is_refused(
    tmp_path, tiny_bert_dir, data, monkeypatch, capsys, change
):
    _, snaps = reference_run(tmp_path, tiny_bert_dir, data, monkeypatch)
    train = data / "train.tsv"
    text = train.read_text()
    if change == "row-added":
        train.write_text(text + "an extra sentence\t1\n")
    elif change == "same-size-edit":  # one label flipped: same size, new mtime, other content
        first_row = text.splitlines()[1]
        flipped = first_row[:-1] + ("0" if first_row.endswith("1") else "1")
        train.write_text(text.replace(first_row, flipped, 1))
        assert train.stat().st_size == len(text.encode())
    else:
        train.unlink()
    capsys.readouterr()
    out = tmp_path / "resumed"
    code = resume_from(snaps[6], out, tiny_bert_dir, data)
    lines = capsys.readouterr().err.splitlines()
    assert code == 2 and len(lines) == 1 and "train.tsv" in lines[0], lines
    if change != "deleted":
        assert "changed since checkpoint" in lines[0]
    assert load_checkpoint(out / "checkpoint.pt")["meta"]["step"] == 6


def test_a_touched_but_unchanged_data_file_resumes(tmp_path, tiny_bert_dir, data, monkeypatch):
    ref, snaps = reference_run(tmp_path, tiny_bert_dir, data, monkeypatch)
    for name in ("train.tsv", "dev.tsv"):
        st = (data / name).stat()
        os.utime(data / name, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # `touch`, or a copy without -p
    out = tmp_path / "resumed"
    assert resume_from(snaps[6], out, tiny_bert_dir, data) == 0
    assert without_timings(run_of(out)) == without_timings(run_of(ref))


def test_the_checkpoint_records_each_data_file(tmp_path, tiny_bert_dir, data, monkeypatch):
    ref, _ = reference_run(tmp_path, tiny_bert_dir, data, monkeypatch)
    meta = load_checkpoint(ref / "checkpoint.pt")["meta"]
    import hashlib

    assert meta["data_dir"] == str(data.resolve())
    assert set(meta["data_files"]) == {str((data / "train.tsv").resolve()), str((data / "dev.tsv").resolve())}
    train = meta["data_files"][str((data / "train.tsv").resolve())]
    assert train["size"] == (data / "train.tsv").stat().st_size
    assert train["sha256"] == hashlib.sha256((data / "train.tsv").read_bytes()).hexdigest()


def test_a_changed_train_file_is_refused(tmp_path, tiny_bert_dir, monkeypatch, capsys):
    # text-classification reads --train-file / --validation-file: the same rule holds.
    from tests.tiny_models import TOY_ROWS

    train, dev = tmp_path / "train.csv", tmp_path / "dev.csv"
    rows = "text,label\n" + "".join(f"{t},{c}\n" for t, c, _ in TOY_ROWS)
    train.write_text(rows)
    dev.write_text(rows)
    out = tmp_path / "out"
    common = text_classification_args(tiny_bert_dir, train, dev, out, batch_size=4, checkpoint_every=1)
    monkeypatch.setattr(Checkpointer, "on_epoch_end", lambda self, trainer, metrics: None)  # keep a mid-run state
    assert main(common + ["--max-steps", "2"]) == 0
    assert load_checkpoint(out / "checkpoint.pt")["meta"]["step"] == 2
    (out / "results.json").unlink()  # as if the run had been killed after step 2
    dev.write_text(rows + "one more line,0\n")
    capsys.readouterr()
    assert main(common + ["--max-steps", "2", "--resume"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "dev.csv" in lines[0] and "changed since checkpoint" in lines[0], lines


# --------------------------------------------- --resume --save-model (issue 13.5d)
def test_resume_save_model_on_a_finished_run_saves_its_final_weights(tmp_path, tiny_bert_dir, data, capsys):
    from recipes.bert_sst2 import HEAD_FILE

    out = tmp_path / "out"
    common = args(tiny_bert_dir, data, out, "--epochs", "1")
    assert main(common) == 0
    before = (out / "results.json").read_bytes()
    assert main(common + ["--resume", "--save-model"]) == 0
    assert run_of(out) == json.loads(before)["runs"][0]  # kept, not retrained
    final = weights(out)
    from transformers import AutoModel

    encoder = AutoModel.from_pretrained(out / "model").state_dict()
    assert encoder and all(torch.equal(encoder[k], final[f"encoder.{k}"]) for k in encoder)
    head = torch.load(out / "model" / HEAD_FILE, weights_only=True)
    assert head and all(torch.equal(head[k], final[f"classifier.{k}"]) for k in head)
    # The saved model evaluates to the finished run's accuracy.
    capsys.readouterr()
    assert main(args(out / "model", data, tmp_path / "eval", "--eval-only")) == 0
    assert run_of(tmp_path / "eval")["eval"]["accuracy"] == run_of(out)["eval"]["accuracy"]


def test_resume_save_model_without_the_final_checkpoint_says_why_not(tmp_path, tiny_bert_dir, data, capsys):
    out = tmp_path / "out"
    common = args(tiny_bert_dir, data, out, "--epochs", "1")
    assert main(common) == 0
    (out / "checkpoint.pt").unlink()
    before = (out / "results.json").read_bytes()
    capsys.readouterr()
    assert main(common + ["--resume", "--save-model"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "checkpoint.pt is gone" in lines[0] and "--save-model" in lines[0], lines
    assert (out / "results.json").read_bytes() == before and not (out / "model").exists()


@pytest.mark.parametrize("compare", [False, True], ids=["one-run", "compare"])
def test_resume_predict_file_on_finished_runs_labels_it_with_their_final_weights(tmp_path, tiny_bert_dir, compare):
    # Was: a finished run --resume kept was never asked to label a --predict-file: exit 0, no file (or
    # an earlier command's predictions for another file left in place, named in results.json).
    from tests.cli_runs import toy_files

    train, dev = toy_files(tmp_path / "data")
    extra = ("--compare", "fp32,bf16") if compare else ()
    budget = {"batch_size": 4, "max_steps": 3}  # the final weights of any budget
    common = text_classification_args(tiny_bert_dir, train, dev, tmp_path / "out", *extra, **budget)
    labelled = text_classification_args(tiny_bert_dir, train, dev, tmp_path / "direct", *extra, **budget)
    assert main(common) == 0 and main(labelled + ["--predict-file", str(dev)]) == 0
    out, direct = tmp_path / "out", tmp_path / "direct"
    before = json.loads((out / "results.json").read_text())["runs"]
    assert main(common + ["--resume", "--predict-file", str(dev)]) == 0
    after = json.loads((out / "results.json").read_text())["runs"]
    names = sorted(p.name for p in direct.glob("predictions*"))
    assert names == sorted(p.name for p in out.glob("predictions*")) and len(names) == (2 if compare else 1)
    for name in names:  # what the runs would have written at their end, row for row
        assert (out / name).read_text() == (direct / name).read_text()
    for kept, was, fresh in zip(after, before, json.loads((direct / "results.json").read_text())["runs"]):
        assert kept["predict"]["output"] == str(out / Path(fresh["predict"]["output"]).name)
        assert kept["predict"]["metrics"]["accuracy"] == fresh["predict"]["metrics"]["accuracy"]
        assert was["predict"] is None
        assert {k: v for k, v in kept.items() if k != "predict"} == {k: v for k, v in was.items() if k != "predict"}


def test_resume_predict_file_without_the_final_checkpoint_says_why_not(tmp_path, tiny_bert_dir, capsys):
    from tests.cli_runs import toy_files

    train, dev = toy_files(tmp_path / "data")
    out = tmp_path / "out"
    common = text_classification_args(tiny_bert_dir, train, dev, out, batch_size=4)
    assert main(common) == 0
    (out / "checkpoint.pt").unlink()
    capsys.readouterr()
    assert main(common + ["--resume", "--predict-file", str(dev)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "--resume --predict-file:" in lines[0] and "no weights to label with" in lines[0]
    assert not list(out.glob("predictions*"))


def test_resuming_a_finished_run_says_it_is_kept_with_its_figures(tmp_path, tiny_bert_dir, data, capsys):
    out = tmp_path / "out"
    common = args(tiny_bert_dir, data, out, "--epochs", "1")
    assert main(common) == 0
    trained = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("[fp32] "))
    before = (out / "results.json").read_bytes()
    assert main(common + ["--resume"]) == 0
    lines = capsys.readouterr().out.splitlines()
    kept = [line for line in lines if line.startswith("[fp32] ")]
    # Not silence (it used to print only the results path): the kept run's own line, marked as kept.
    assert kept == [trained.replace("[fp32] ", "[fp32] finished earlier, kept by --resume: ", 1)], lines
    assert (out / "results.json").read_bytes() == before  # not trained again, not rewritten


def test_a_run_resumed_from_its_final_checkpoint_keeps_its_predictions_and_fp32s_agreement(
    tmp_path, tiny_bert_dir, data, monkeypatch
):
    # A kill after bf16's final checkpoint, before results.json held it (or exit 4 on a full disk, then --resume).
    # Was: bf16's eval_predictions, eval_labels and agreement_vs_fp32 null, report.md without "Agreement with fp32".
    out = tmp_path / "out"
    compare = ("--compare", "fp32,bf16", "--max-steps", "2")
    assert main(args(tiny_bert_dir, data, out, *compare)) == 0
    whole = json.loads((out / "results.json").read_text())
    assert whole["runs"][1]["agreement_vs_fp32"] is not None
    (out / "results.json").write_text(json.dumps({**whole, "runs": whole["runs"][:1]}))
    (out / "report.md").unlink()
    # Resumed with the model and data spelled as relative paths: the same files.
    monkeypatch.chdir(tmp_path)
    relative = [Path(os.path.relpath(p)) for p in (tiny_bert_dir, data)]
    assert main(args(*relative, Path("out"), *compare, "--resume")) == 0
    again = json.loads((out / "results.json").read_text())
    for key in ("eval_predictions", "eval_labels", "agreement_vs_fp32", "eval", "model", "dataset"):
        assert without_timings(again["runs"][1][key]) == without_timings(whole["runs"][1][key]), key
    report = (out / "report.md").read_text()
    assert "## Agreement with fp32" in report
    # One model, one dataset (was: "**model** `/abs/tiny-bert, ../tiny-bert`", as if two were compared).
    assert f"**model** `{tiny_bert_dir}`" in report, report


# ------------------------------------------- a resumed collapsed run (issue 13.5e)
def test_resuming_a_collapsed_run_prints_its_diagnosis_again(tmp_path, tiny_bert_dir, capsys):
    data = make_data_dir(tmp_path / "sst2", 48, 8)  # 12 steps: room for 10 skipped in a row
    out = tmp_path / "out"
    common = args(tiny_bert_dir, data, out, "--max-train-samples", "48", "--epochs", "1", "--inject-nonfinite", "1")
    assert main(common) == 3
    first = capsys.readouterr().err
    diagnosis = next(line for line in first.splitlines() if "training stopped early" in line)
    assert "diagnosis:" in diagnosis
    before = (out / "results.json").read_bytes()
    assert main(common + ["--resume"]) == 3
    err = capsys.readouterr().err
    assert diagnosis.split("training stopped early: ", 1)[1] in err  # the same diagnosis, again
    assert "see the diagnosis above" in err.splitlines()[-1]
    assert (out / "results.json").read_bytes() == before


# ------------------------------------------- one read, one check (issue 17)
def test_resume_reads_results_once_and_checks_each_checkpoint_once(tmp_path, tiny_bert_dir, data, monkeypatch):
    import mixft.runs.identity as identity
    import mixft.train.checkpoint

    calls = {"results": 0, "meta": [], "crc": []}
    recorded_runs, check_meta, verify = (
        identity.recorded_runs,
        identity.check_meta,
        mixft.train.checkpoint.verify_checkpoint,
    )

    def counting_recorded_runs(out):
        calls["results"] += 1
        return recorded_runs(out)

    def counting_check_meta(ckpt, expected, path, **kwargs):
        calls["meta"].append(Path(path).name)
        return check_meta(ckpt, expected, path, **kwargs)

    def counting_verify(path):
        calls["crc"].append(Path(path).name)
        return verify(path)

    monkeypatch.setattr(identity, "recorded_runs", counting_recorded_runs)
    monkeypatch.setattr(identity, "check_meta", counting_check_meta)
    monkeypatch.setattr(mixft.train.checkpoint, "verify_checkpoint", counting_verify)
    out = tmp_path / "out"
    common = args(tiny_bert_dir, data, out, "--epochs", "1", "--compare", "fp32,bf16")
    assert main(common) == 0
    assert calls == {"results": 0, "meta": [], "crc": []}  # without --resume nothing is read
    # As if killed during the bf16 run: results.json holds the finished fp32 run only.
    doc = json.loads((out / "results.json").read_text())
    doc["runs"] = [r for r in doc["runs"] if r["precision"] == "fp32"]
    (out / "results.json").write_text(json.dumps(doc))
    assert main(common + ["--resume"]) == 0
    assert calls["results"] == 1
    assert calls["meta"] == ["checkpoint-bf16-seed0.pt"]  # the kept fp32 run's checkpoint is not read at all
    assert calls["crc"] == ["checkpoint-bf16-seed0.pt"]
    assert [r["precision"] for r in run_of_all(out)] == ["fp32", "bf16"]


def run_of_all(out: Path) -> list[dict]:
    return json.loads((out / "results.json").read_text())["runs"]


@pytest.mark.parametrize("extra", [(), ("--save-model",)], ids=["resume", "resume-save-model"])
def test_a_finished_run_is_not_kept_over_edited_data(tmp_path, tiny_bert_dir, data, capsys, extra):
    # Was: a finished run resumed on an edited file was accepted, and --resume --save-model saved
    # label names read from the edited file over weights trained on the original one.
    out = tmp_path / "done"
    assert main(args(tiny_bert_dir, data, out)) == 0
    kept = (out / "results.json").read_bytes()
    train = data / "train.tsv"
    train.write_text(train.read_text() + "a sentence added after the run\t1\n")
    capsys.readouterr()
    code = main(args(tiny_bert_dir, data, out, "--resume", *extra))
    lines = capsys.readouterr().err.splitlines()
    assert code == 2 and len(lines) == 1 and "train.tsv changed since the run in" in lines[0], lines
    assert (out / "results.json").read_bytes() == kept and not (out / "model").exists()
