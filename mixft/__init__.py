"""mixft: fine-tune Hugging Face models with automatic mixed precision, in a loop you can read."""

__version__ = "0.1.0"

# Public API, imported on first use (PEP 562): ``import mixft`` stays light (no torch,
# no transformers) and the pure-Python data modules stay importable on their own.
#
# Usage::
#
#     import mixft
#     trainer = mixft.Trainer(model, optimizer, loss_fn, train_loader, precision="amp")
#     results = mixft.run(mixft.RunConfig(precisions=["fp32", "bf16"], max_train_samples=500))
#     plan = mixft.make_plan(mixft.RunConfig(precisions=["amp"]))  # what a run would do; mixft.run(plan) trains it
#     mixft.results_frame(results)
_EXPORTS = {
    # the loop
    "Trainer": "mixft.train.trainer",
    "Callback": "mixft.train.hooks",
    "StepInfo": "mixft.train.hooks",
    "StopTraining": "mixft.train.hooks",
    # results
    "RunResult": "mixft.results",
    "results_frame": "mixft.report.frames",
    "compare_frame": "mixft.report.frames",
    "write_results": "mixft.results",
    "results_document": "mixft.results",
    # running recipes
    "RunConfig": "mixft.config.run_config",
    "make_plan": "mixft.runs.plan",
    "RunPlan": "mixft.runs.plan",
    "run": "mixft.runs.runner",
    # precision policy
    "Precision": "mixft.amp.precision",
    "resolve_precision": "mixft.amp.precision",
    "resolve_device": "mixft.amp.precision",
    # models, data, metrics
    "BertClassifier": "mixft.models.classifiers",
    "SequenceClassifier": "mixft.models.classifiers",
    "load_classifier": "mixft.models.classifiers",
    "check_model": "mixft.models.check",
    "logits_to_labels": "mixft.models.classifiers",
    "resolve_model": "mixft.models.hub",
    "load_metric": "mixft.metrics",
    "load_text_data": "mixft.data.user_data",
    "load_glue_data": "mixft.data.user_data",
    "tokenize_text_data": "mixft.data.tokenize",
    "make_loader": "mixft.data.loaders",
    "stand_in_for": "mixft.data.synthetic.stand_ins",
    "TaskMetrics": "mixft.metrics.task",
    # reports
    "summarize": "mixft.report.summary",
    "render_markdown": "mixft.report.markdown",
    "write_report": "mixft.report.markdown",
    "write_plots": "mixft.report.plots",
    # "is AMP faster here?"
    "run_probe": "mixft.runs.probe",
    "cached_probe": "mixft.report.probe_result",
    "render_probe_table": "mixft.report.probe_result",
    "describe_hardware": "mixft.amp.hardware",
    "hardware_line": "mixft.amp.hardware",
    # errors
    "UsageError": "mixft.errors",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str):
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'mixft' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value  # cache: later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
