"""The run layer: one run or many, from a ``RunConfig`` to results.json.

    outdir     the output directory: every file name in it, its checks, its lock, reading results.json
    identity   which run is which (trajectory options, data fingerprints) and the ``--resume`` plan
    build      a Trainer from a recipe's parts and a RunConfig
    runner     plan -> prepare -> choose precisions -> build, train, record each (precision, seed) run

The names below are imported on first use (``mixft.run.outdir`` stays free of torch, so
the reports can read the file names). ``mixft.run`` is also what ``mixft.run(cfg)`` calls:
importing any module of this package makes the package ``mixft``'s ``run`` attribute, so
the package forwards a call to ``mixft.run.runner.run``.

Usage::

    from mixft.run import run, RunObserver
    results = run(RunConfig(recipe="bert-sst2", precisions=["fp32", "bf16"]))
"""

from __future__ import annotations

import sys
import types

_EXPORTS = {
    "run": "mixft.run.runner",
    "plan": "mixft.run.runner",
    "run_probe": "mixft.run.runner",
    "RunObserver": "mixft.run.runner",
    "reliability_callbacks": "mixft.run.runner",
    "build_trainer": "mixft.run.build",
    "ResumePlan": "mixft.run.identity",
    "plan_resume": "mixft.run.identity",
    "run_meta": "mixft.run.identity",
    "OutputLock": "mixft.run.outdir",
    "check_output_dir": "mixft.run.outdir",
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


class _CallablePackage(types.ModuleType):
    # `import mixft.run.outdir` sets the attribute `run` of the package `mixft` to this
    # package, shadowing the function mixft exports under that name: calling it still runs.
    def __call__(self, cfg, observer=None):
        from .runner import run

        return run(cfg, observer)


sys.modules[__name__].__class__ = _CallablePackage
