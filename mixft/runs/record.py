"""What a command leaves in its output directory as its runs end: results.json, config.yaml, report.md.

After every (precision, seed) run (``record_run``): results.json with the runs so far (a crash
later still leaves the finished runs) and config.yaml beside it (``--config`` reproduces the
command from the start, never resuming). Once every run of a comparison is in
(``record_comparison``): the agreement with fp32's predictions, report.md and its charts.
Only the first process writes (the caller checks).

Usage::

    record_run(plan, results)          # after each run
    record_comparison(plan, results)   # after the last one, when several ran
"""

from __future__ import annotations

import dataclasses

from mixft.config.file import config_yaml, write_config
from mixft.config.run_config import RunConfig
from mixft.report.agreement import add_agreement
from mixft.results import RunResult, results_document, write_results
from mixft.runs.outdir import CONFIG_NAME, RESULTS_NAME
from mixft.runs.plan import RunPlan


def config_text(cfg: RunConfig) -> str:
    """config.yaml as this command writes it: what ``--config`` reruns from the start (not resuming)."""
    return config_yaml(_from_the_start(cfg))


def record_run(plan: RunPlan, results: list[RunResult]) -> None:
    """results.json with every run so far, and config.yaml beside the results it produced."""
    write_results(plan.out / RESULTS_NAME, results, hardware=plan.hardware, preflight=plan.preflight)
    # A run that fails at its first step leaves neither file.
    write_config(_from_the_start(plan.cfg), plan.out / CONFIG_NAME)


def record_comparison(plan: RunPlan, results: list[RunResult]) -> None:
    """Every run of the comparison is in: fp32's agreement (results.json again), report.md and its charts."""
    from mixft.report.markdown import write_report
    from mixft.report.plots import write_plots

    if add_agreement(results):  # fp32's predictions are in too
        write_results(plan.out / RESULTS_NAME, results, hardware=plan.hardware, preflight=plan.preflight)
    doc = results_document(results, hardware=plan.hardware, preflight=plan.preflight)
    write_report(doc, plan.out, charts=write_plots)


def _from_the_start(cfg: RunConfig) -> RunConfig:
    return dataclasses.replace(cfg, resume=False)
