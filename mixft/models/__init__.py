"""Layer 2, models: classifiers, LoRA, model checks, finding a model offline.

    classifiers  BertClassifier, SequenceClassifier, load_classifier, logits_to_labels, task_loss
    lora         --lora through peft
    check        what a model directory holds and whether it can classify
    hub          the Hugging Face hub, reachable or not, and the shipped MiniLM fallback

Imports the ground and amp/. ``from mixft.models import logits_to_labels`` (and the other
classifier names) still works: they are looked up in ``classifiers`` on first use.
"""

_CLASSIFIER_NAMES = ("BertClassifier", "SequenceClassifier", "load_classifier", "logits_to_labels", "task_loss")


def __getattr__(name: str):
    if name not in _CLASSIFIER_NAMES:
        raise AttributeError(f"module 'mixft.models' has no attribute {name!r}")
    from mixft.models import classifiers

    return getattr(classifiers, name)
