"""Layer 1, the AMP policy and its checks: what mixed precision means here and where it is safe.

    precision   the one table (name -> autocast dtype, GradScaler), DEVICE_CHOICES, resolve_device, the --amp policy
    precision_names  the table's row names without torch (the CLI's choices: --help needs no torch)
    hardware    the machine as measured (CPU flags, torch's native bf16/fp16 check)
    fp32        fp32 islands: --fp32-modules and custom autograd functions kept in fp32
    penalties   gradient penalties computed safely under a GradScaler
    preflight   the fp16 preflight: which activations would overflow, before training
    diagnose    where an inf/NaN first came from
    memory      the memory breakdown of one step (parameters, gradients, optimizer state, saved activations)

Imports only the ground modules (mixft/*.py).
"""
