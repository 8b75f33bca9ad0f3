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
#     mixft.results_frame(results)
_EXPORTS = {
    # the loop
    "Trainer": "mixft.trainer",
    "Callback": "mixft.callbacks",
    "StepInfo": "mixft.callbacks",
    "StopTraining": "mixft.callbacks",
    "use_fast_dropout": "mixft.dropout",
    "use_row_embedding_grad": "mixft.embedding_grad",
    # results
    "RunResult": "mixft.results",
    "results_frame": "mixft.results",
    "compare_frame": "mixft.results",
    "write_results": "mixft.results",
    "results_document": "mixft.results",
    # running recipes
    "RunConfig": "mixft.config",
    "run": "mixft.run.runner",
    # precision policy
    "Precision": "mixft.precision",
    "resolve_precision": "mixft.precision",
    "resolve_device": "mixft.precision",
    # models, data, metrics
    "BertClassifier": "mixft.models",
    "SequenceClassifier": "mixft.models",
    "load_classifier": "mixft.models",
    "check_model": "mixft.model_check",
    "logits_to_labels": "mixft.models",
    "resolve_model": "mixft.hub",
    "load_metric": "mixft.metrics",
    "load_text_data": "mixft.data.user_data",
    "load_glue_data": "mixft.data.user_data",
    "tokenize_text_data": "mixft.data.tokenize",
    "make_loader": "mixft.data.loaders",
    "stand_in_for": "mixft.data.synthetic.stand_ins",
    "TaskMetrics": "mixft.metrics.task",
    # reports
    "summarize": "mixft.aggregate",
    "render_markdown": "mixft.report",
    "write_report": "mixft.report",
    "write_plots": "mixft.plots",
    # "is AMP faster here?"
    "run_probe": "mixft.run.runner",
    "cached_probe": "mixft.probe_result",
    "render_probe_table": "mixft.probe_result",
    "describe_hardware": "mixft.hardware",
    "hardware_line": "mixft.hardware",
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
