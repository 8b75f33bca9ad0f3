"""Which run is which, and what ``--resume`` may continue: decided once, before any work.

A run is identified by its recipe and the options that change its trajectory
(``TRAJECTORY_OPTIONS``), plus its precision and seed; its checkpoint records them
(``run_meta``) with the size, modification time and SHA-256 of the data files it read.
``resume_runs`` reads results.json and every checkpoint's metadata once, refuses a resume
that cannot go on (changed options or data, damaged files, nothing to resume), and
says which runs are kept as they finished and which continue from their checkpoint;
``make_plan`` (``mixft.runs.plan``) writes that into each planned run, and the runner
follows it without checking again.

Usage::

    keys = [("fp32", 0), ("bf16", 0)]
    finished, continued = resume_runs(cfg, {("fp32", 0): out / "checkpoint-fp32-seed0.pt",
                                            ("bf16", 0): out / "checkpoint-bf16-seed0.pt"},
                                      {key: run_meta(cfg, *key) for key in keys})
    finished[("fp32", 0)]          # a finished RunResult --resume keeps as it is
    ("bf16", 0) in continued       # True: resume from its checkpoint
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

import torch

from mixft.callbacks.interrupt import is_interrupted
from mixft.config.run_config import RunConfig, is_recipe_default
from mixft.options import flag_of
from mixft.results import RunResult
from mixft.runs.outdir import CHECKPOINT_SUFFIX, RESULTS_NAME, SHARDED_SUFFIX, recorded_runs
from mixft.train.checkpoint import CheckpointError, load_checkpoint
from mixft.train.sharded_checkpoint import is_sharded_checkpoint, settled, verify_sharded_checkpoint

# The options a checkpoint must share with the run that resumes it: each one changes the
# trajectory (data, model, schedule, injected faults) or the evaluation being reported.
TRAJECTORY_OPTIONS = (
    "recipe",
    "model",
    "data_dir",
    "train_file",
    "validation_file",
    "dataset",
    "dataset_config",
    "eval_split",
    "task",
    "task_kind",
    "text_column",
    "text_pair_column",
    "label_column",
    "validation_split",
    "max_train_samples",
    "max_eval_samples",
    "epochs",
    "max_steps",
    "batch_size",
    "lr",
    "max_grad_norm",
    "grad_accum",
    "max_length",
    "inject_nonfinite",
    "extra",
    "lora",
    "lora_r",
    "lora_alpha",
    "lora_dropout",
    "lora_target_modules",
    "fp32_modules",
    "init_loss_scale",
    "lr_scheduler",
    "lr_cycles",
    "warmup_ratio",
    "warmup_steps",
    "weight_decay",
    "label_smoothing",
    "class_weights",
    "group_by_length",
    "length_group_size",  # which sentences share a batch
    "pack_sequences",  # dropout masks drawn over packed rows, not padded ones
    "batch_shapes",  # and over the ladder's padding
    # Each evaluation draws from the RNG, the best model and early stopping decide the final weights.
    "eval_steps",
    "metric_for_best",
    "load_best",
    "early_stopping_patience",
)
# Options naming files or directories: `dir`, `dir/` and `/abs/dir` are the same data.
PATH_OPTIONS = ("model", "data_dir", "train_file", "validation_file")

RunKey = tuple[str, int]  # (precision name, seed)


def _flag(key: str) -> str:
    # The option's own command-line spelling; "precision" and "seed" (a run's, not a
    # RunConfig field) are spelled as their flags are.
    declared = {f.name: flag_of(f) for f in fields(RunConfig) if f.metadata.get("cli")}
    return declared.get(key, "--" + key.replace("_", "-"))


# ------------------------------------------------------------------- identity
def same_option(key: str, recorded: Any, now: Any) -> bool:
    """Whether option ``key`` recorded in a checkpoint or results.json matches this run's value.

    Paths are the same data however they are spelled; worker counts match when both are
    0 or both above 0 (persistent workers are started without drawing on resume).
    Usage: ``same_option("data_dir", "data/", "/home/me/data")``
    """
    if key in PATH_OPTIONS:
        return _resolved(recorded, key != "model") == _resolved(now, key != "model")
    if key == "num_workers":
        return isinstance(recorded, int) and isinstance(now, int) and (recorded > 0) == (now > 0)
    return recorded == now


def _resolved(value: Any, always: bool) -> Any:
    # A model may be a hub name ("bert-base-uncased"): only an existing path is resolved.
    if not isinstance(value, str) or not value:
        return value
    path = Path(value).expanduser()
    return str(path.resolve()) if always or path.exists() else value


def run_meta(cfg: RunConfig, precision: str, seed: int) -> dict[str, Any]:
    """What a (precision, seed) run's checkpoint records and a resume must match.

    The options of ``TRAJECTORY_OPTIONS`` (paths resolved), the worker count, and the
    size, modification time and SHA-256 of each data file (``data_files``).
    Usage: ``save_checkpoint(trainer, path, run_meta(cfg, "bf16", 0))``
    """
    options = {key: getattr(cfg, key) for key in TRAJECTORY_OPTIONS}
    for key in PATH_OPTIONS:
        options[key] = _resolved(options[key], key != "model")
    return {
        **options,
        "num_workers": cfg.num_workers,
        "data_files": data_fingerprints(cfg),
        "precision": precision,
        "seed": seed,
    }


def data_files(cfg: RunConfig) -> list[Path]:
    """The local data files a run reads: ``--data-dir``'s train.tsv and dev.tsv, ``--train-file``, ``--validation-file``.

    (A ``--dataset`` from the Hugging Face cache is not fingerprinted.)
    Usage: ``data_files(RunConfig(data_dir="glue/SST-2"))``
    """
    files = []
    if cfg.data_dir:
        files += [Path(cfg.data_dir) / name for name in ("train.tsv", "dev.tsv")]
    files += [Path(f) for f in (cfg.train_file, cfg.validation_file) if f]
    return [f.expanduser().resolve() for f in files if f.expanduser().is_file()]


def data_fingerprints(cfg: RunConfig) -> dict[str, dict[str, Any]]:
    """``{resolved path: {"size", "mtime_ns", "sha256"}}`` for each of ``data_files(cfg)``.

    Usage: ``data_fingerprints(RunConfig(data_dir="glue/SST-2"))``
    """
    out = {}
    for f in data_files(cfg):
        st = f.stat()
        out[str(f)] = {
            "size": st.st_size,
            "mtime_ns": st.st_mtime_ns,
            "sha256": _sha256(str(f), st.st_size, st.st_mtime_ns),
        }
    return out


def recorded_config(cfg: RunConfig) -> dict[str, Any]:
    """What a command's runs record of its options: results.json's ``config`` and the trackers' hyper-parameters.

    One run's own (no ``precisions``/``seeds`` lists: each run's ``precision`` and ``seed`` say them), with
    the data files' fingerprints: ``--resume`` keeps a finished run only on unchanged data. Made once per
    command by ``make_plan``, when the data is read.

    Usage: ``result.config = dict(recorded_config(cfg))``
    """
    return {**cfg.to_dict(), "precisions": None, "seeds": None, "data_files": data_fingerprints(cfg)}


@functools.lru_cache(maxsize=64)
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    # Cached by (path, size, mtime): each run of a --compare records the same files.
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_data_files(
    recorded: Mapping[str, Mapping[str, Any]], path: str | os.PathLike, what: str = "checkpoint"
) -> None:
    """Refuse a resume on data files that changed since ``what`` at ``path`` was written (size, or content once mtime moved).

    ``what``: "checkpoint", or "the run in" for a finished run's record in results.json.
    Usage: ``check_data_files(load_checkpoint(path)["meta"]["data_files"], path)``
    """
    for name, was in recorded.items():
        f = Path(name)
        try:
            st = f.stat()
        except OSError:
            raise CheckpointError(
                f"--resume: {what} {path} was trained on {f}, which is gone; restore it, or rerun without --resume "
                "to start over"
            ) from None
        if st.st_size == was.get("size") and st.st_mtime_ns == was.get("mtime_ns"):
            continue  # untouched: no need to read it
        if st.st_size != was.get("size") or _sha256(str(f), st.st_size, st.st_mtime_ns) != was.get("sha256"):
            raise CheckpointError(
                f"--resume: data file {f} changed since {what} {path} was written ({was.get('size')} -> "
                f"{st.st_size} bytes, new content); continuing would mix two datasets: restore the file, or rerun "
                "without --resume to start over"
            )


def _shown(value: Any) -> str:
    # An option left to its default is recorded as None: say so instead of "--max-length None".
    return "not set (the default)" if value is None else repr(value)


def _shown_now(cfg: RunConfig | None, key: str, value: Any) -> str:
    # This run's value, and whether the user gave it: a recipe default was never typed
    # (mixft.config.run_config.is_recipe_default), so the message must not read as if it were.
    if cfg is not None and is_recipe_default(cfg, key):
        return f"{_shown(value)} (the recipe's default; pass {_flag(key)} to set it)"
    return _shown(value)


def check_meta(
    ckpt: Mapping[str, Any], expected: Mapping[str, Any], path: str | os.PathLike, *, cfg: RunConfig | None = None
) -> None:
    """Raise CheckpointError naming the first option whose value differs from ``expected``.

    Paths compare resolved; ``num_workers`` only as none vs some (see ``same_option``);
    ``data_files`` (from ``run_meta``) must be unchanged on disk. ``cfg`` (the run's
    options, optional) lets the message say when this run's value is the recipe's default.
    Usage: ``check_meta(load_checkpoint(path), run_meta(cfg, "bf16", 0), path, cfg=cfg)``
    """
    meta = ckpt.get("meta", {})
    for key, want in expected.items():
        if key not in meta:
            continue  # an older checkpoint did not record it
        if key == "data_files":
            check_data_files(meta[key], path)
        elif not same_option(key, meta[key], want):
            flag = _flag(key)
            why = (
                "; DataLoader workers draw random numbers differently from a loader without them "
                "(any count above 0 continues exactly from another above 0)"
                if key == "num_workers"
                else ""
            )
            raise CheckpointError(
                f"--resume: checkpoint {path} was written with {flag} {_shown(meta[key])}, this run has "
                f"{_shown_now(cfg, key, want)}{why}; "
                "rerun with the same options, or without --resume to start over"
            )


# ---------------------------------------------------------------- what --resume does
def resume_runs(
    cfg: RunConfig, checkpoints: Mapping[RunKey, Path], metas: Mapping[RunKey, Mapping[str, Any]]
) -> tuple[dict[RunKey, RunResult], frozenset[RunKey]]:
    """What ``--resume`` does with each run: ``(finished, continued)``, checked once before any work.

    ``checkpoints``: ``{(precision, seed): path}`` in run order (the run plan's names); ``metas``:
    each run's ``run_meta``, as the plan made it (what its checkpoint must match).
    ``finished``: runs results.json holds that ended (not interrupted): kept as they are.
    ``continued``: runs whose checkpoint was checked (CRC, options, data files): they continue
    from it. Any other run starts from scratch. Without ``cfg.resume`` both are empty and
    nothing is read. Raises CheckpointError when there is nothing at all to resume.

    Usage: ``finished, continued = resume_runs(cfg, {("bf16", 0): out / "checkpoint.pt"}, {("bf16", 0): meta})``
    """
    if not cfg.resume:
        return {}, frozenset()
    precisions = list(dict.fromkeys(name for name, _ in checkpoints))
    finished = finished_runs(cfg, precisions)
    continued = set()
    for (name, seed), path in checkpoints.items():
        if (name, seed) in finished:
            if (cfg.save_model or cfg.predict_file) and not finished[(name, seed)].stopped_early:
                _check_final_checkpoint(cfg, path, finished[(name, seed)])
            continue
        if not _checkpoint_exists(path):
            _refuse_other_format(path)
            continue
        check_meta(_read_checkpoint(path), metas[(name, seed)], path, cfg=cfg)
        continued.add((name, seed))
    if not continued and not finished:
        first = next(iter(checkpoints.values()))
        out = Path(cfg.output_dir)
        raise CheckpointError(
            f"--resume: no checkpoint in {out} (looked for {first.name}); run without --resume to start"
        )
    return finished, frozenset(continued)


def _checkpoint_exists(path: Path) -> bool:
    # A sharded save killed between its two renames left its previous version aside (settled finds it).
    return settled(path).exists() if is_sharded_checkpoint(path) else path.exists()


def _read_checkpoint(path: Path) -> Mapping[str, Any]:
    """The checkpoint's ``meta`` (in a dict, as ``check_meta`` reads it), every file's CRC checked first.

    One file: its zip records (tensors stay on disk). A sharded directory: every shard's size and
    CRC-32 against its manifest, and the number of processes it was written by against this run's.
    """
    if not is_sharded_checkpoint(path):
        return load_checkpoint(path, mmap=True)
    from mixft import distributed

    try:
        return verify_sharded_checkpoint(path, world_size=distributed.world_size())
    except CheckpointError as e:
        raise CheckpointError(f"--resume: {e}") from None


def _refuse_other_format(path: Path) -> None:
    """A checkpoint in the other format where this run looks: the other launch mode's, refused by name.

    A one-process (or DDP) run's ``checkpoint.pt`` holds whole tensors, an ``--fsdp`` run's
    ``checkpoint.dcp/`` each process's shards: neither run can continue the other's.
    """
    if is_sharded_checkpoint(path):
        other = path.with_name(path.name.removesuffix(SHARDED_SUFFIX) + CHECKPOINT_SUFFIX)
        if other.exists():
            raise CheckpointError(
                f"--resume --fsdp: {other} is the checkpoint of a run without --fsdp (whole tensors, not shards); "
                "resume it without --fsdp, or rerun without --resume to start over"
            )
        return
    other = settled(path.with_suffix(SHARDED_SUFFIX))
    if other.exists():
        try:
            world = verify_sharded_checkpoint(other)["world_size"]
        except CheckpointError:
            world = "N"
        raise CheckpointError(
            f"--resume: {other} is the sharded checkpoint of an --fsdp run; resume it with torchrun "
            f"--nproc-per-node {world} scripts/finetune.py ... --fsdp --resume ({world} processes in all: on several "
            f"machines, nodes x --nproc-per-node = {world}), or rerun without --resume to start over"
        )


def finished_runs(cfg: RunConfig, precisions: Sequence[str]) -> dict[RunKey, RunResult]:
    """Runs of this plan that OUTPUT_DIR/results.json holds and that were not interrupted.

    ``--resume`` keeps these as they are (a run stopped by collapse detection counts as
    finished: resuming it would collapse again). Raises CheckpointError when the file
    cannot be read or holds one of these runs made with different options.
    Usage: ``finished_runs(cfg, cfg.precisions)[("fp32", 0)].eval``
    """
    path = Path(cfg.output_dir) / RESULTS_NAME
    try:
        runs = recorded_runs(Path(cfg.output_dir))
        wanted = {(name, seed) for name in precisions for seed in cfg.seeds}
        _check_none_dropped(runs, wanted, path)
        done: dict[RunKey, RunResult] = {}
        for run in runs:
            key = (run.get("precision"), run.get("seed"))
            if key not in wanted or is_interrupted(run):
                continue
            stored = run.get("config") or {}
            # Kept only on the data it was trained on: results (or a model saved from them)
            # over edited files would describe, and name the labels of, other data.
            check_data_files(stored.get("data_files") or {}, path, what="the run in")
            for option in TRAJECTORY_OPTIONS:
                value = getattr(cfg, option)
                if option in stored and not same_option(option, stored[option], value):
                    raise CheckpointError(
                        f"--resume: {path} holds a {key[0]} seed {key[1]} run made with {_flag(option)} "
                        f"{_shown(stored[option])}, this run has {_shown_now(cfg, option, value)}; rerun with the same "
                        "options or another --output-dir"
                    )
            known = {f.name for f in fields(RunResult)}
            done[key] = RunResult(**{k: v for k, v in run.items() if k in known})
    except CheckpointError:
        raise
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise CheckpointError(f"--resume: {path} is not a readable results file ({type(e).__name__}: {e})") from None
    return done


def _check_none_dropped(runs: Sequence[dict], wanted: set, path: Path) -> None:
    """results.json is rewritten with this command's runs: one it holds that the command does not name would be
    lost (and a comparison would lose its baseline), so --resume must name every run it holds (or more)."""
    dropped = [(run.get("precision"), run.get("seed")) for run in runs]
    dropped = [key for key in dict.fromkeys(dropped) if key not in wanted]
    if dropped:
        which = ", ".join(f"{precision} seed {seed}" for precision, seed in dropped)
        raise CheckpointError(
            f"--resume: {path} holds {which}, which this command does not run: resume with the precisions and "
            "seeds it holds (a longer --compare/--seeds list adds runs), or use another --output-dir"
        )


def _check_final_checkpoint(cfg: RunConfig, path: Path, result: RunResult) -> None:
    # --resume --save-model (or --predict-file) on a finished run saves (labels with) the weights of its
    # final checkpoint: it must be there, from these options, and from the run's last step.
    asked = " ".join(
        flag for flag, on in (("--save-model", cfg.save_model), ("--predict-file", cfg.predict_file)) if on
    )
    what = f"the {result.precision} seed {result.seed} run finished, but"
    fix = f"rerun without --resume (and with {asked}) to train it again"
    if is_sharded_checkpoint(path):
        # Its weights are shards in a DCP directory: saving them needs the whole sharded run rebuilt.
        raise CheckpointError(
            f"--resume {asked} --fsdp: {what} a finished sharded run's model is not saved from its checkpoint; {fix}"
        )
    if not path.is_file():
        raise CheckpointError(
            f"--resume {asked}: {what} its checkpoint {path} is gone, so there are no weights to "
            f"{'save' if cfg.save_model else 'label with'}; {fix}"
        )
    ckpt = load_checkpoint(path, mmap=True)
    # The data too: the saved model's label names come from today's files, its weights from the
    # files it was trained on (a renamed label would swap the names silently).
    meta = run_meta(cfg, result.precision, result.seed)
    options = {k: v for k, v in meta.items() if k in TRAJECTORY_OPTIONS or k == "data_files"}
    check_meta(ckpt, options, path, cfg=cfg)
    step = ckpt["meta"].get("step")
    if step != result.steps:
        raise CheckpointError(
            f"--resume {asked}: {what} its checkpoint {path} is from step {step}, not its "
            f"last step {result.steps} (the final save was skipped); {fix}"
        )


def final_weights(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The weights a finished run ended with, from its final checkpoint: the best evaluation's under ``--load-best``.

    ``resume_runs`` has checked the file (CRC, options, the run's last step) when it kept
    the run with ``--save-model``: it is read here without checking again.
    Usage: ``model.load_state_dict(final_weights("out/checkpoint.pt"))``
    """
    ckpt = load_checkpoint(path, verify=False)
    best = (ckpt.get("states") or {}).get("best_model") or {}
    return best["weights"] if best.get("weights") is not None else ckpt["trainer"]["model"]
