"""runs/plan.py: the one RunPlan a command trains from, made before any work."""

from __future__ import annotations

import pytest
import torch

from mixft.amp.precision import PrecisionChoice, resolve_precision
from mixft.config.run_config import RunConfig
from mixft.errors import UsageError
from mixft.results import RunResult, write_results
from mixft.runs.identity import run_meta
from mixft.runs.outdir import RESULTS_NAME
from mixft.runs.plan import make_plan, measures_first, plan_runs

CPU = torch.device("cpu")
TINY_MLP = {"width": 8, "layers": 2, "batches": 2, "eval_batches": 1}


def planned(cfg: RunConfig, names: list[str]):
    """``plan_runs`` for precisions asked as they train (no --amp policy): the reason says so."""
    precisions = [resolve_precision(name, CPU, policy=False) for name in names]
    return plan_runs(cfg, precisions, [PrecisionChoice(name, f"asked: {name}") for name in names])


def test_a_comparison_plan_names_every_run_file_and_identity(tmp_path):
    cfg = RunConfig(
        output_dir=str(tmp_path), precisions=["fp32", "bf16"], seeds=[0, 1], save_model=True, predict_file="new.jsonl"
    )
    runs = planned(cfg, ["fp32", "bf16"])
    assert [(r.precision.name, r.seed) for r in runs] == [("fp32", 0), ("bf16", 0), ("fp32", 1), ("bf16", 1)]
    run = runs[3]  # bf16, seed 1
    assert run.checkpoint == tmp_path / "checkpoint-bf16-seed1.pt"
    assert run.step_checkpoints.format(step=4) == "checkpoint-bf16-seed1-step4.pt"
    assert run.saved_model == tmp_path / "model-bf16-seed1"
    assert run.predictions == tmp_path / "predictions-bf16-seed1.jsonl"
    assert dict(run.meta) == run_meta(cfg, "bf16", 1)
    assert run.requested == "bf16" and run.reason == "asked: bf16" and run.precision.autocast_dtype == torch.bfloat16
    assert all(r.kept is None and not r.continues for r in runs)  # no --resume: every run starts


def test_a_single_run_gets_the_short_names_and_writes_no_report(tmp_path):
    (run,) = planned(RunConfig(output_dir=str(tmp_path)), ["bf16"])
    assert run.checkpoint == tmp_path / "checkpoint.pt" and run.saved_model == tmp_path / "model"
    assert run.predictions is None


def test_resume_is_planned_once_and_each_run_carries_it(tmp_path):
    cfg = RunConfig(output_dir=str(tmp_path), precisions=["fp32", "bf16"], seeds=[0], resume=True)
    write_results(
        tmp_path / RESULTS_NAME,
        [RunResult(precision="fp32", autocast_dtype=None, grad_scaler=False, device="cpu", device_name="cpu", seed=0)],
    )
    fp32, bf16 = planned(cfg, ["fp32", "bf16"])
    assert fp32.kept.precision == "fp32" and bf16.kept is None
    assert not bf16.continues  # no checkpoint: it starts


def test_an_output_path_that_is_a_file_is_refused_before_any_work(tmp_path):
    (tmp_path / "out").write_text("")
    with pytest.raises(UsageError, match="--output-dir"):
        planned(RunConfig(output_dir=str(tmp_path / "out")), ["fp32"])


def test_make_plan_holds_everything_the_runner_follows(tmp_path):
    cfg = RunConfig(
        recipe="mlp-synthetic", output_dir=str(tmp_path), precisions=["fp32", "amp"], seeds=[0, 3],
        batch_size=4, extra=TINY_MLP,
    )  # fmt: skip
    plan = make_plan(cfg)
    assert plan.recipe.NAME == "mlp-synthetic" and plan.cfg.lr == 0.001  # the recipe's defaults applied
    assert plan.device == CPU and plan.prepared.width == 8  # the data prepared once, for every run
    assert plan.hardware["native"]["via"]  # this machine's facts: results.json's "hardware" and --amp's evidence
    assert len(plan.runs) == 4 and [(r.requested, r.seed) for r in plan.runs] == [
        ("fp32", 0), ("amp", 0), ("fp32", 3), ("amp", 3),
    ]  # fmt: skip
    amp = plan.run(plan.runs[1].precision.name, 3)
    assert amp.requested == "amp" and amp.reason  # resolved once, with the reason results.json records
    assert amp.precision.name != "amp" and amp.precision is plan.runs[1].precision  # the same object every seed
    assert plan.precisions == (plan.runs[0].precision, plan.runs[1].precision)
    assert plan.preflight is None and plan.predict_source is None  # no fp16, no --predict-file
    assert plan.out == tmp_path and not list(tmp_path.iterdir())  # nothing written
    # results.json's config of every run, made once: one run's own options (its precision and seed say the lists').
    assert plan.recorded_config == {**plan.cfg.to_dict(), "precisions": None, "seeds": None, "data_files": {}}
    with pytest.raises(KeyError):
        plan.run("fp16", 0)


def test_a_plan_made_first_is_trained_as_it_says_without_preparing_again_and_only_once(tmp_path, monkeypatch):
    import json

    from mixft.runs.runner import run

    cfg = RunConfig(recipe="mlp-synthetic", output_dir=str(tmp_path), precisions=["amp"], batch_size=4, extra=TINY_MLP)
    plan = make_plan(cfg)

    def prepared_again(cfg):
        raise AssertionError("the plan's data was prepared again")

    monkeypatch.setattr(plan.recipe, "prepare", prepared_again)
    (result,) = run(plan)
    written = json.loads((tmp_path / RESULTS_NAME).read_text())["runs"]
    assert [(r["precision"], r["precision_requested"], r["precision_reason"]) for r in written] == [
        (plan.runs[0].precision.name, "amp", plan.runs[0].reason)
    ]  # what the plan decided, not a decision made again
    assert result.precision == plan.runs[0].precision.name and result.skipped_steps == 0
    with pytest.raises(UsageError, match="this plan was trained already: make_plan"):
        run(plan)  # it read the output directory before this run wrote into it
    assert json.loads((tmp_path / RESULTS_NAME).read_text())["runs"] == written  # and the refusal touched nothing


def test_a_plan_refused_at_a_held_output_directory_can_be_trained_once_it_is_free(tmp_path):
    from mixft.runs.runner import run
    from tests.conftest import another_run_holding

    cfg = RunConfig(recipe="mlp-synthetic", output_dir=str(tmp_path), precisions=["fp32"], batch_size=4, extra=TINY_MLP)
    plan = make_plan(cfg)
    with another_run_holding(tmp_path):
        with pytest.raises(UsageError, match="another mixft run"):
            run(plan)
    assert not (tmp_path / RESULTS_NAME).exists()
    (result,) = run(plan)  # nothing had changed in the directory: the same plan trains now
    assert (tmp_path / RESULTS_NAME).exists() and result.precision == "fp32"


NATIVE = {"native": {"bf16": True, "fp16": True, "via": "oneDNN", "cpu_capability": "AVX512"}}


@pytest.mark.parametrize(
    "options, hardware, device, measures",
    [
        ({"precisions": ["amp"]}, NATIVE, "cpu", True),  # torch's word alone would choose: measured first
        ({"precisions": ["fp32", "amp"]}, NATIVE, "cpu", False),  # a comparison measures exactly this
        ({"precisions": ["bf16"]}, NATIVE, "cpu", False),  # asked by name: no choice to make
        ({"precisions": ["amp"], "resume": True}, NATIVE, "cpu", False),  # continues in what it started in
        ({"precisions": ["amp"], "eval_only": True, "model": "m"}, NATIVE, "cpu", False),  # nothing trains
        ({"precisions": ["amp"]}, {"native": {"bf16": False}}, "cpu", False),  # emulated: fp32 without measuring
        ({"precisions": ["amp"]}, {"native": {"bf16": None}}, "cpu", False),  # torch cannot tell: fp32 likewise
        ({"precisions": ["amp"]}, {**NATIVE, "probe_cache_problem": {"path": "p", "cause": "c"}}, "cpu", False),
        ({"precisions": ["amp"]}, NATIVE, "cuda", False),  # fp16 on CUDA: the policy needs no measurement
    ],
)
def test_amp_measures_first_only_where_it_would_choose_on_torchs_word_alone(options, hardware, device, measures):
    assert measures_first(RunConfig(**options), torch.device(device), hardware) is measures


def test_under_torchrun_process_0_measures_for_the_job(monkeypatch):
    import mixft.distributed

    monkeypatch.setattr(mixft.distributed, "world_size", lambda: 2)
    for rank, measures in [(0, True), (1, False)]:  # the others wait for process 0's probe
        monkeypatch.setattr(mixft.distributed, "rank", lambda rank=rank: rank)
        assert measures_first(RunConfig(precisions=["amp"]), CPU, NATIVE) is measures


def torchrun_of_two(monkeypatch, other: dict) -> list:
    """This process as process 0 of two; the other's answers to the plan's gathers, by what is gathered."""
    from launch import fake_launch

    import mixft.distributed

    fake_launch(monkeypatch, 2)
    gathered = []

    def all_gather_objects(mine):
        gathered.append(mine)
        theirs = other["probe"] if mine is None or isinstance(mine, dict) else other["precision"]
        return [mine, theirs]

    monkeypatch.setattr(mixft.distributed, "all_gather_objects", all_gather_objects)
    return gathered


def simulated_cpu(monkeypatch, bf16: bool) -> None:
    import mixft.amp.hardware

    facts = {**NATIVE["native"], "bf16": bf16, "compute_capability": None}
    monkeypatch.setattr(mixft.amp.hardware, "native_precisions", lambda device: dict(facts))


@pytest.mark.parametrize("bf16_step_s, chosen", [(1.0, "fp32"), (0.25, "bf16")])  # fp32's step: 0.5 s
def test_under_torchrun_every_process_follows_process_0s_probe(tmp_path, monkeypatch, bf16_step_s, chosen):
    from fake_probes import fake_result

    simulated_cpu(monkeypatch, bf16=True)
    gathered = torchrun_of_two(monkeypatch, {"probe": "process 1's own cached probe", "precision": chosen})
    measured = fake_result(bf16_step_s=bf16_step_s)
    monkeypatch.setattr("mixft.runs.plan._cached_probe", lambda cfg, prepared, device, hardware: measured)
    cfg = RunConfig(recipe="mlp-synthetic", output_dir=str(tmp_path), precisions=["amp"], batch_size=4, extra=TINY_MLP)
    plan = make_plan(cfg)
    assert gathered == [measured.to_dict(), chosen]  # process 0's probe handed to every process; one choice
    assert plan.runs[0].precision.name == chosen and plan.hardware["probe"] == measured.to_dict()


def test_under_torchrun_processes_that_chose_differently_refuse_in_one_line(tmp_path, monkeypatch):
    simulated_cpu(monkeypatch, bf16=False)  # this node: fp32, without measuring
    torchrun_of_two(monkeypatch, {"probe": None, "precision": "bf16"})  # a node whose torch says bf16 is native
    cfg = RunConfig(recipe="mlp-synthetic", output_dir=str(tmp_path), precisions=["amp"], batch_size=4, extra=TINY_MLP)
    with pytest.raises(UsageError) as refused:
        make_plan(cfg)
    assert str(refused.value) == (
        "--amp chose differently in the processes of this job (fp32 in process 0; bf16 in process 1): their "
        "machines differ in native bf16; name one precision for all of them with --precision"
    )


def test_planning_and_running_leave_the_callers_random_streams_as_they_were(tmp_path):
    """Was: after torch.manual_seed(123); run(cfg), a notebook's next torch.rand was torch.manual_seed(0)'s."""
    import random

    from mixft.runs.runner import run

    def draws():
        return torch.rand(3).tolist(), random.random()

    torch.manual_seed(123)
    random.seed(123)
    expected = draws()
    torch.manual_seed(123)
    random.seed(123)
    cfg = RunConfig(
        recipe="mlp-synthetic", output_dir=str(tmp_path), precisions=["fp32"], batch_size=4, max_steps=2,
        extra=TINY_MLP,
    )  # fmt: skip
    run(make_plan(cfg))
    assert draws() == expected


def test_a_cached_probe_of_another_batch_size_is_not_this_runs(monkeypatch):
    """Was: --amp quoted (and chose by) a probe timed on batches of 8 for a run of 64: the ratio moved from 0.69x
    to 0.55x between those sizes on one CPU. The probe's own batch size must be the run's."""
    from fake_probes import fake_result

    import mixft.report.probe_result as probe_result
    from mixft.runs.plan import _cached_probe

    cached = fake_result(0.4)
    cached.batch["batch_size"] = 32  # timed at --batch-size 32
    monkeypatch.setattr(probe_result, "read_cached_probe", lambda *args, **kwargs: (cached, None))
    for batch_size, used in ((32, True), (64, False)):
        hardware: dict = {}
        cfg = RunConfig(recipe="bert-sst2", batch_size=batch_size)
        assert (_cached_probe(cfg, None, CPU, hardware) is cached) is used
        assert ("probe" in hardware) is used
    del cached.batch["batch_size"]  # a probe cached before the batch size was recorded: still used
    assert _cached_probe(RunConfig(recipe="bert-sst2", batch_size=64), None, CPU, {}) is cached


def test_mlp_synthetics_probe_is_cached_under_the_name_amp_reads_it_by():
    # Was: saved under run_info's "MLP 3 x Linear(...)", read under "mlp": --amp measured again on every run.
    from recipes import mlp_synthetic

    cfg = RunConfig(recipe="mlp-synthetic", batch_size=4, extra=TINY_MLP)
    prepared = mlp_synthetic.prepare(cfg)
    parts = mlp_synthetic.build(cfg, prepared, resolve_precision("fp32", CPU), CPU, 0)
    assert parts.run_info["model"] == prepared.model_description
    assert f"Linear({TINY_MLP['width']}, {TINY_MLP['width']})" in prepared.model_description
