"""--config files read strictly and within bounds (issue 30): aliases, depth, duplicate keys, extra, paths, lists."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from mixft.cli.main import main
from mixft.config.file import load_config_file
from mixft.errors import UsageError
from tests.cli_runs import toy_files
from tests.tiny_models import make_tiny_model_dir


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return make_tiny_model_dir("bert", tmp_path_factory.mktemp("tiny") / "bert")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def refused(path: Path) -> str:
    with pytest.raises(UsageError) as e:
        load_config_file(path)
    message = str(e.value)
    assert "\n" not in message
    return message


BOMB = "recipe: text-classification\nextra:\n  a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"  a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 7)
)


def test_aliases_are_refused_at_once(tmp_path):
    started = time.perf_counter()
    message = refused(write(tmp_path / "bomb.yaml", BOMB))
    assert time.perf_counter() - started < 1
    assert "line 3: YAML anchors (&a0) are not accepted in a config file; write the value out" in message
    # An alias without anchor-on-the-same-line (a merge key) is refused too.
    assert "are not accepted" in refused(write(tmp_path / "merge.yaml", "base: &b {epochs: 1}\n<<: *b\n"))


@pytest.mark.parametrize(
    "name, text, message",
    [
        (
            "dup.yaml",
            "recipe: text-classification\nbatch_size: 8\nepochs: 1\nbatch_size: 4\n",
            "line 4: 'batch_size' is given twice (first on line 2); keep one",
        ),
        ("dup_extra.yaml", "recipe: mlp-synthetic\nextra:\n  width: 8\n  width: 16\n", "'width' is given twice"),
        ("dup.json", '{"recipe": "text-classification", "epochs": 1, "epochs": 2}', "'epochs' is given twice"),
        ("deep.json", '{"extra": {"a": ' + "[" * 100_000 + "]" * 100_000 + "}}", "nested too deeply"),
        ("deep.yaml", "extra:\n  a: " + "[" * 20_000 + "]" * 20_000 + "\n", "nested more than 16 levels deep"),
        ("nested_extra.yaml", "extra:\n  a: {b: 1}\n", "extra.a must be a number, text, true/false or a list of them"),
    ],
)
def test_unbounded_or_ambiguous_files_are_one_line_errors(tmp_path, name, text, message):
    assert message in refused(write(tmp_path / name, text))


def test_a_file_larger_than_any_config_is_refused(tmp_path):
    assert "a config file of options is at most 1,048,576" in refused(
        write(tmp_path / "big.yaml", "note: " + "x" * (1 << 20) + "\n")
    )


def test_one_list_rule_for_every_option_of_several_names(tmp_path):
    values = load_config_file(
        write(
            tmp_path / "lists.yaml",
            "fp32_modules: classifier\nreport_to: [tensorboard]\nlora_target_modules: [query, value]\n",
        )
    )
    assert values == {"fp32_modules": ["classifier"], "report_to": "tensorboard", "lora_target_modules": "query,value"}
    values = load_config_file(
        write(tmp_path / "lists.json", json.dumps({"fp32_modules": "a.b,c", "report_to": ["tensorboard", "mlflow"]}))
    )
    assert values == {"fp32_modules": ["a.b", "c"], "report_to": "tensorboard,mlflow"}


def run_config(config: Path, cwd: Path, *args: str) -> int:
    here = os.getcwd()
    cwd.mkdir(parents=True, exist_ok=True)
    os.chdir(cwd)
    try:
        return main(["--config", str(config), "--no-progress", *args])
    finally:
        os.chdir(here)


def test_a_files_paths_are_relative_to_it_and_config_yaml_reruns_from_anywhere(tmp_path, model, capsys):
    toy_files(tmp_path / "project" / "data")
    config = write(
        tmp_path / "project" / "run.yaml",
        f"recipe: text-classification\nmodel: {model}\n"
        "train_file: data/train.csv\nvalidation_file: data/dev.csv\nbatch_size: 4\nmax_steps: 2\n"
        "output_dir: out\n",
    )
    assert run_config(config, tmp_path / "elsewhere") == 0, capsys.readouterr().err
    out = tmp_path / "project" / "out"  # the file's folder, not the shell's
    first = json.loads((out / "results.json").read_text())["runs"][0]
    written = (out / "config.yaml").read_text()
    assert f"train_file: {tmp_path / 'project' / 'data' / 'train.csv'}" in written
    assert run_config(out / "config.yaml", tmp_path / "third", "--output-dir", str(tmp_path / "again")) == 0
    again = json.loads((tmp_path / "again" / "results.json").read_text())["runs"][0]
    assert again["history"]["loss"] == first["history"]["loss"]


def test_a_missing_file_names_the_config_it_came_from(tmp_path, model, capsys):
    config = write(
        tmp_path / "cfg" / "run.yaml",
        f"recipe: text-classification\nmodel: {model}\ntrain_file: train.csv\nvalidation_file: dev.csv\n",
    )
    assert run_config(config, tmp_path) == 2
    assert str(tmp_path / "cfg" / "train.csv") in capsys.readouterr().err


@pytest.mark.parametrize("text", ["", "{}\n", "epochs: 1\n", "train_file: train.csv\n"])
def test_a_config_without_a_recipe_never_runs_the_default_job(tmp_path, capsys, text):
    config = write(tmp_path / "norecipe.yaml", text)
    assert main(["--config", str(config), "--max-steps", "1", "--output-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"--recipe is required: neither the command line nor --config {config} names one"), err
    assert not (tmp_path / "out").exists()


def test_extra_keys_a_recipe_does_not_read_are_refused(tmp_path, model, capsys):
    train, dev = toy_files(tmp_path / "data")
    config = write(
        tmp_path / "extra.yaml",
        f"recipe: text-classification\nmodel: {model}\ntrain_file: {train}\nvalidation_file: {dev}\nextra:\n  foo: 1\n",
    )
    assert main(["--config", str(config), "--output-dir", str(tmp_path / "out"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("extra.foo: not an option of recipe text-classification (it reads no extra options)"), err
    config = write(tmp_path / "mlp.yaml", "recipe: mlp-synthetic\nmax_steps: 2\nextra:\n  width: 16\n")
    assert main(["--config", str(config), "--output-dir", str(tmp_path / "mlp"), "--no-progress"]) == 0


def test_a_number_reads_as_the_flag_reads_it(tmp_path):
    """Was: YAML 1.1's reading, `seed: 010` -> 8 (octal; `--seed 010` is 10), `max_train_samples: 0100` -> 64."""
    from mixft.cli.main import config_from_argv

    config = write(tmp_path / "c.yaml", "recipe: mlp-synthetic\nseed: 010\nmax_train_samples: 0100\nepochs: 2\n")
    _, cfg = config_from_argv(["--config", str(config)])
    assert cfg.seeds == [10] and cfg.max_train_samples == 100 and cfg.epochs == 2
    hexed = write(tmp_path / "h.yaml", "recipe: mlp-synthetic\nepochs: 0x2\n")  # text now: the flag's rule refuses it
    with pytest.raises(UsageError, match=r"epochs"):
        config_from_argv(["--config", str(hexed)])


def test_config_is_given_once(tmp_path, capsys):
    """Was: `--config a.yaml --config b.yaml` read b.yaml alone; a.yaml's options were dropped in silence."""
    a, b = write(tmp_path / "a.yaml", "recipe: mlp-synthetic\nlr: 0.5\n"), write(tmp_path / "b.yaml", "epochs: 1\n")
    assert main(["--config", str(a), "--config", str(b), "--output-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--config can be given once" in err[0], err
    assert not (tmp_path / "out").exists()


def test_a_bare_compare_lists_the_precisions_of_the_files_device(tmp_path, monkeypatch):
    """Was: a bare --compare listed the precisions of --device's default (auto: CUDA's fp32, fp16, bf16 on a GPU
    machine) before the file's `device: cpu` was read, then trained all of them on the CPU."""
    import torch

    import mixft.amp.precision as precision
    from mixft.cli.main import config_from_argv

    def resolve(device):
        return torch.device("cuda" if device in ("auto", "cuda") else device)  # as on a GPU machine

    monkeypatch.setattr(precision, "resolve_device", resolve)
    monkeypatch.setattr(precision, "amp_precision_names", lambda d: ["fp16", "bf16"] if d.type == "cuda" else ["bf16"])
    config = write(tmp_path / "cpu.yaml", "recipe: mlp-synthetic\ndevice: cpu\n")
    assert config_from_argv(["--config", str(config), "--compare"])[1].precisions == ["fp32", "bf16"]
    assert config_from_argv(["--recipe", "mlp-synthetic", "--device", "cpu", "--compare"])[1].precisions == [
        "fp32",
        "bf16",
    ]
    assert config_from_argv(["--recipe", "mlp-synthetic", "--compare"])[1].precisions == ["fp32", "fp16", "bf16"]


def test_num_workers_is_refused_by_a_recipe_without_a_dataloader(tmp_path, capsys):
    """Was: mlp-synthetic (a list of tensors, no DataLoader) accepted --num-workers 2 and recorded it as in force."""
    config = write(tmp_path / "mlp.yaml", "recipe: mlp-synthetic\nmax_steps: 1\nextra:\n  width: 8\n")
    assert main(["--config", str(config), "--num-workers", "2", "--output-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--num-workers: not used by recipe mlp-synthetic" in err[0], err
