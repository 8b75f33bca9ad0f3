"""What a front end (the CLI, a notebook) hears about a run: subclass ``RunObserver`` and pass it to ``run``.

The CLI's is ``mixft.cli.console.ConsoleObserver`` (the header, a progress bar, one line per
run). Every method has a default that does nothing, so an observer overrides only what it needs.

Usage::

    class Collect(RunObserver):
        def on_result(self, result):
            print(result.precision, result.eval)

    run(RunConfig(recipe="bert-sst2", precisions=["fp32", "bf16"]), Collect())
"""

from __future__ import annotations

from collections.abc import Sequence

from mixft.amp.precision import Precision
from mixft.config.run_config import RunConfig
from mixft.results import RunResult
from mixft.train.hooks import Callback


class RunObserver:
    """What a front end (the CLI, a notebook) wants to hear about a run. Override freely."""

    def on_plan(
        self, cfg: RunConfig, device, precisions: list[Precision], run_info: dict, steps: int | None, hardware: dict
    ) -> None:
        """Called once, after data and model are resolved and before any training.

        ``steps``: optimizer steps planned for one run (None for a loader without a length).
        ``hardware``: ``mixft.amp.hardware.describe_hardware``, with the cached probe under
        ``"probe"`` when this machine has one for the recipe and model. ``run_info`` is the
        recipe's, plus ``"train_rows"``: the examples one epoch of training reads (None
        when the loader cannot tell), against which the effective batch is capped.
        """

    def callbacks(self, cfg: RunConfig, precision: Precision, seed: int) -> Sequence[Callback]:
        """Trainer callbacks for one (precision, seed) run."""
        return ()

    def stop_callbacks(self, cfg: RunConfig, precision: Precision, seed: int) -> Sequence[Callback]:
        """Callbacks that end a run at a step's end on a request from outside (Ctrl-C, SIGTERM).

        Told last: every other callback (trackers, the collapse detector, checkpoints) has
        seen the step they stop at, which was trained.
        """
        return ()

    def on_result(self, result: RunResult) -> None:
        """Called after each (precision, seed) run, once its results are written."""

    def on_kept(self, result: RunResult) -> None:
        """Called for each run ``--resume`` keeps as it ended earlier (read from results.json, not trained)."""

    def stop_requested(self) -> bool:
        """True to end the whole run after the current (precision, seed) run (e.g. Ctrl-C)."""
        return False
