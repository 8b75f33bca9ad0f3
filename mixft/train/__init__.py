"""Layer 3, the loop: the Trainer and what it needs to run one training.

    trainer       the loop (Trainer._train_window is the AMP step)
    hooks         Callback, StepInfo, StopTraining: what the loop tells callbacks
    state         TrainState: what a checkpoint must restore
    evaluation    evaluate a model (metrics, predictions) under the run's precision
    meter         the training meter (time, samples/s, loss-scale history)
    measure       clocks and peak memory (Stopwatch, PeakMemory, device_name)
    optim         optimizers and LR schedulers, planned steps
    schedules     the schedule and class-weight option values and their checks
    checkpoint    the checkpoint FILE FORMAT: save, verify, load, resume (the policy is callbacks/checkpointer)
    pure_bf16     bf16-pure's compensated optimizers and their start-up checks
    kahan_adamw   torch-optimi's Kahan AdamW with the weight decay kept by the compensation
    floor         a step's time floor (matmul FLOPs at a measured rate + optimizer bytes at a measured bandwidth)

Imports the ground, amp/, models/, data/, metrics/.
"""
