"""Layer 7, the run layer: one run or many, from a ``RunConfig`` to results.json.

    runner          make_plan, then the output directory, then build, train, record each planned run
    plan            the RunPlan, made once before any work: the checked options, the prepared data, the
                    hardware, and per run its resolved precision and why, its files, what --resume does
    options         the cheap checks (recipe, options, device, precisions), before any file is read
    observer        RunObserver: what a front end hears about a run
    build           a Trainer from a recipe's parts and a RunConfig
    outdir          the output directory: every file name in it, its checks, its lock, reading results.json
    identity        which run is which (trajectory options, data fingerprints) and what ``--resume`` does
    checks          before any run: --fp32-modules names and the fp16 preflight
    shape           before any run: the options against the run's shape (warm-up, patience, --load-best)
    watch           the callbacks a RunConfig asks for (best model, early stopping, trackers)
    reliability     fault injection, collapse detection, checkpoints, continuing from one
    memory_figures  the memory breakdown and the fresh-process RSS figure (fresh_process: that process)
    record          results.json and config.yaml after each run, report.md after a comparison
    saved_model     --save-model: the trainer's model, or a finished run's from its final checkpoint
    predict         --predict-file (predictions_file: the CSV/JSON Lines writer)
    set_aside       an earlier run in the directory moved aside whole; shared_dir: one directory under torchrun
    probe           --probe: a few timed steps per precision of the recipe's own workload (and --amp's first
                    measurement, in a process of its own)
    child_process   a function called in a fresh Python, so what it builds and frees stays out of this one

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
    "run_probe": "mixft.runs.probe",
    "RunObserver": "mixft.runs.observer",
    "reliability_callbacks": "mixft.runs.reliability",
    "build_trainer": "mixft.runs.build",
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
        raise AttributeError(f"module 'mixft.runs' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
