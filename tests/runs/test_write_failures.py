"""A disk that fills up (or turns read-only, or fails) while mixft writes: one line, earlier files kept.

Each case runs the real CLI in-process on a tiny BERT and makes one write fail the way the
operating system (or torch) reports it: a real ENOSPC from /dev/full, torch's
"file write failed" RuntimeError, or an OSError from ``os.replace`` / ``os.fsync`` /
``tempfile.mkstemp``. Afterwards: exit code 4, one stderr line naming the file and the
cause, the earlier results.json byte-for-byte intact, the last good checkpoint still
loadable, and no temporary file left behind.
"""

from __future__ import annotations

import builtins
import errno
import functools
import json
import os
import tempfile
from pathlib import Path

import pytest
import torch

import mixft.atomic
import mixft.train.checkpoint
from mixft.atomic import WriteFailed, atomic_path
from mixft.cli.main import EXIT_WRITE_FAILED, main
from mixft.train.checkpoint import load_checkpoint
from tests.cli_runs import bert_sst2_args

EARLIER = b'{"runs": [], "note": "an earlier run\'s results: must survive a failed write"}\n'


args = functools.partial(
    bert_sst2_args, max_train_samples=16, max_eval_samples=8, batch_size=4, epochs=1, checkpoint_every=1
)


@pytest.fixture
def out(tmp_path) -> Path:
    d = tmp_path / "out"
    d.mkdir()
    (d / "results.json").write_bytes(EARLIER)
    return d


def temporaries(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.name.endswith(".tmp") or p.name.endswith(".partial"))


def set_aside(out: Path) -> Path:
    """Where the new run set the earlier one aside (mixft.run.set_aside): the earlier files live on there."""
    (previous,) = out.glob("previous-*")
    return previous


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    # The notice that the earlier run was set aside (before any work) is not part of the error.
    lines = [line for line in err.splitlines() if " held an earlier run (" not in line]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("finetune.py: error: cannot write "), lines[0]
    return lines[0]


# ----------------------------------------------------------------------- checkpoints
def _fail_third_save_with_dev_full(monkeypatch, out):
    """The third checkpoint's bytes go to /dev/full: the kernel's own ENOSPC, through torch.save."""
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this system")
    calls = {"n": 0}

    def open_(path, mode="r", *a, **k):
        if str(path).endswith(".tmp") and "w" in mode:
            calls["n"] += 1
            if calls["n"] == 3:
                return builtins.open("/dev/full", mode, *a, **k)
        return builtins.open(path, mode, *a, **k)

    monkeypatch.setattr(mixft.train.checkpoint, "open", open_, raising=False)


def _fail_third_save_like_torch(monkeypatch, out):
    """torch.save(payload, path) on a full disk: a RuntimeError without an errno, after a partial write."""
    real_save, real_statvfs, calls = torch.save, os.statvfs, {"n": 0}

    def save(obj, f, *a, **k):
        calls["n"] += 1
        if calls["n"] == 3:
            f.write(b"PK\x03\x04 half a checkpoint")
            raise RuntimeError(
                "[enforce fail at inline_container.cc:672] . PytorchStreamWriter failed writing file "
                "data/3: file write failed"
            )
        return real_save(obj, f, *a, **k)

    def statvfs(path):  # the output directory's file system is full: no blocks available
        st = real_statvfs(path)
        if Path(path) != out:
            return st
        return os.statvfs_result((st.f_bsize, st.f_frsize, st.f_blocks, 0, 0, *tuple(st)[5:]))

    monkeypatch.setattr(torch, "save", save)
    monkeypatch.setattr(os, "statvfs", statvfs)


@pytest.mark.parametrize(
    "fail", [_fail_third_save_with_dev_full, _fail_third_save_like_torch], ids=["kernel-enospc", "torch-runtime-error"]
)
def test_a_checkpoint_write_on_a_full_disk(fail, tmp_path, out, tiny_bert_dir, tiny_data_dir, monkeypatch, capsys):
    fail(monkeypatch, out)
    code = main(args(tiny_bert_dir, tiny_data_dir, out))
    line = one_error_line(capsys)
    assert code == EXIT_WRITE_FAILED == 4
    assert f"cannot write {out / 'checkpoint.pt'}: No space left on device (errno ENOSPC)" in line, line
    assert "--resume" in line  # a good checkpoint exists to continue from
    assert f"the earlier run is in {set_aside(out)}" in line  # was: "earlier results ... are kept", nowhere said
    assert (set_aside(out) / "results.json").read_bytes() == EARLIER
    assert load_checkpoint(out / "checkpoint.pt")["meta"]["step"] == 2  # the last good one, CRC-checked
    assert temporaries(out) == []


def test_a_write_error_that_is_not_a_full_disk_keeps_torchs_reason(tmp_path):
    target = tmp_path / "ckpt.pt"
    target.write_bytes(b"previous")
    with pytest.raises(WriteFailed) as e:
        with atomic_path(target) as tmp:
            tmp.write_bytes(b"partial")
            raise RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed")
    assert e.value.errno == errno.EIO and e.value.filename == str(target)
    assert str(e.value) == (
        f"cannot write {target}: write failed (PytorchStreamWriter failed writing file data/0: "
        "file write failed) (errno EIO)"
    )
    assert target.read_bytes() == b"previous" and temporaries(tmp_path) == []


def test_other_errors_inside_an_atomic_write_are_not_disguised(tmp_path):
    with pytest.raises(ValueError, match="a bug"):
        with atomic_path(tmp_path / "x.json"):
            raise ValueError("a bug")
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------ results.json
def _replace_fails(code):
    def patch(monkeypatch, name):
        real = os.replace

        def replace(src, dst, *a, **k):
            if Path(dst).name == name:
                raise OSError(code, os.strerror(code))
            return real(src, dst, *a, **k)

        monkeypatch.setattr(os, "replace", replace)

    return patch


def _fsync_fails(code):
    def patch(monkeypatch, name):
        real = os.fsync

        def fsync(fd):
            if os.readlink(f"/proc/self/fd/{fd}").rsplit("/", 1)[-1].startswith(f".{name}."):
                raise OSError(code, os.strerror(code))
            return real(fd)

        if not Path("/proc/self/fd").is_dir():
            pytest.skip("needs /proc to tell which file an fd is")
        monkeypatch.setattr(os, "fsync", fsync)

    return patch


def _mkstemp_fails(code):
    def patch(monkeypatch, name):
        real = tempfile.mkstemp

        def mkstemp(*a, prefix=None, **k):
            if prefix == f".{name}.":
                raise OSError(code, os.strerror(code))
            return real(*a, prefix=prefix, **k)

        monkeypatch.setattr(tempfile, "mkstemp", mkstemp)

    return patch


RESULTS_FAILURES = {
    "enospc-at-rename": (_replace_fails(errno.ENOSPC), "No space left on device (errno ENOSPC)"),
    "edquot-at-rename": (_replace_fails(errno.EDQUOT), "Disk quota exceeded (errno EDQUOT)"),
    "eio-at-fsync": (_fsync_fails(errno.EIO), "Input/output error (errno EIO)"),
    "erofs-at-create": (_mkstemp_fails(errno.EROFS), "Read-only file system (errno EROFS)"),
}


@pytest.mark.parametrize("case", sorted(RESULTS_FAILURES))
def test_results_json_that_cannot_be_written(case, out, tiny_bert_dir, tiny_data_dir, monkeypatch, capsys):
    patch, cause = RESULTS_FAILURES[case]
    patch(monkeypatch, "results.json")
    code = main(args(tiny_bert_dir, tiny_data_dir, out))
    line = one_error_line(capsys)
    assert code == 4
    assert f"cannot write {out / 'results.json'}: {cause}" in line, line
    assert "rerun the same command with --resume" in line
    assert (set_aside(out) / "results.json").read_bytes() == EARLIER and not (out / "results.json").exists()
    assert load_checkpoint(out / "checkpoint.pt")["meta"]["step"] == 4  # the finished run's final state
    assert temporaries(out) == []


def test_once_space_is_back_resume_writes_the_results(out, tiny_bert_dir, tiny_data_dir, monkeypatch, capsys):
    _replace_fails(errno.ENOSPC)(monkeypatch, "results.json")
    assert main(args(tiny_bert_dir, tiny_data_dir, out)) == 4
    monkeypatch.undo()
    assert main(args(tiny_bert_dir, tiny_data_dir, out, "--resume")) == 0  # nothing left to train: results only
    run = json.loads((out / "results.json").read_text())["runs"][0]
    assert run["steps"] == 4 and run["stopped_early"] is None and "accuracy" in run["eval"]
    assert len(run["eval_predictions"]) == len(run["eval_labels"]) == 8  # was: null (nothing evaluated on resume)


def test_a_full_disk_at_the_first_write_is_one_line_that_claims_nothing_kept(
    tmp_path, tiny_bert_dir, tiny_data_dir, monkeypatch, capsys
):
    # The output lock's pid line is a run's first write. Was: exit 1, a traceback ending in
    # "OSError: [Errno 28] No space left on device"; and the write-failure line said "earlier results and
    # the last good checkpoint are kept" of a directory that never held either.
    def pwrite(fd, data, offset):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "pwrite", pwrite)
    fresh = tmp_path / "fresh"
    code = main(args(tiny_bert_dir, tiny_data_dir, fresh))
    line = one_error_line(capsys)
    assert code == 4 and line.startswith(f"finetune.py: error: cannot write {fresh / '.mixft.lock'}: No space left")
    assert line.endswith("(errno ENOSPC); once fixed, rerun the same command"), line


# ------------------------------------------------------------- report.md, the model
def test_report_md_that_cannot_be_written_keeps_the_results(
    out, tiny_bert_dir, tiny_data_dir, monkeypatch, capsys, native_bf16_cpu
):
    _replace_fails(errno.EDQUOT)(monkeypatch, "report.md")
    code = main(args(tiny_bert_dir, tiny_data_dir, out, "--compare", "fp32,bf16", "--max-steps", "1"))
    line = one_error_line(capsys)
    assert code == 4 and f"cannot write {out / 'report.md'}: Disk quota exceeded" in line, line
    runs = json.loads((out / "results.json").read_text())["runs"]
    assert [r["precision"] for r in runs] == ["fp32", "bf16"]  # written before the report
    assert not (out / "report.md").exists() and temporaries(out) == []


def test_a_saved_model_that_cannot_be_written_keeps_the_previous_one(
    out, tiny_bert_dir, tiny_data_dir, monkeypatch, capsys
):
    (out / "model").mkdir()
    (out / "model" / "marker").write_text("the previous model")
    real = os.replace

    def replace(src, dst, *a, **k):
        if Path(src).name == ".model.partial":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(src, dst, *a, **k)

    monkeypatch.setattr(os, "replace", replace)
    code = main(args(tiny_bert_dir, tiny_data_dir, out, "--save-model"))
    line = one_error_line(capsys)
    assert code == 4 and f"cannot write {out / 'model'}: No space left on device" in line, line
    assert (set_aside(out) / "model" / "marker").read_text() == "the previous model"
    assert not (out / ".model.old").exists() and temporaries(out) == []
    assert (set_aside(out) / "results.json").read_bytes() == EARLIER  # the model is saved before the results
