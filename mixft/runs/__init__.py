"""Layer 7, the run layer: one run or many, from a ``RunConfig`` to results.json.

    runner          plan -> prepare -> choose precisions -> build, train, record each (precision, seed) run
    build           a Trainer from a recipe's parts and a RunConfig
    outdir          the output directory: every file name in it, its checks, its lock, reading results.json
    plan            the RunPlan: every run's files and identity and the --resume plan, made once before any work
    identity        which run is which (trajectory options, data fingerprints) and the ``--resume`` plan
    watch           the callbacks a RunConfig asks for (best model, early stopping, trackers)
    checks          at run start: --fp32-modules names and the fp16 preflight
    memory_figures  the memory breakdown and the fresh-process RSS figure (fresh_process: that process)
    predict         --predict-file (predictions_file: the CSV/JSON Lines writer)
    probe           --probe: a few timed steps per precision of the recipe's own workload

Imports every layer below it (report/ included); only cli/ imports it.
The names below are imported on first use (``mixft.runs.outdir`` stays free of torch).
The package is ``runs`` so that ``mixft.run`` is only ever the function ``mixft.run(cfg)``.

Usage::

    from mixft.runs import run, RunObserver
    results = run(RunConfig(recipe="bert-sst2", precisions=["fp32", "bf16"]))
"""

from __future__ import annotations

_EXPORTS = {
    "run": "mixft.runs.runner",
    "plan": "mixft.runs.runner",
    "run_probe": "mixft.runs.runner",
    "RunObserver": "mixft.runs.runner",
    "reliability_callbacks": "mixft.runs.runner",
    "build_trainer": "mixft.runs.build",
    "ResumePlan": "mixft.runs.identity",
    "plan_resume": "mixft.runs.identity",
    "RunPlan": "mixft.runs.plan",
    "make_plan": "mixft.runs.plan",
    "run_meta": "mixft.runs.identity",
    "OutputLock": "mixft.runs.outdir",
    "check_output_dir": "mixft.runs.outdir",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'mixft.run' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
