"""Layer 4, concrete callbacks: what a run adds to the loop without the loop naming it.

    checkpointer   the checkpoint POLICY: when and where to save (the format is train/checkpoint)
    best           best model and early stopping
    trackers       TensorBoard, MLflow, trackio (tracker_names: the names and package checks, torch-free)
    faults         collapse detection and injected faults
    interrupt      SIGINT/SIGTERM: save and stop

Imports train/ and the layers below.
"""
