"""Benchmarks: what mixed precision buys on this device, measured side by side in one run.

An application beside ``scripts/``, not part of the library: it reaches recipes only
through the recipe protocol (``mixft.recipe.get_recipe``, ``recipe.prepare``,
``recipe.build``) and trains every mixft run through ``mixft.runs.build.build_trainer`` (the GPU
check's fixed-batch BERT step: mixft's ``Trainer`` itself, on a model built from a config).

Modules, one job each:

- ``timing``  clocks and gauges shared by the benchmarks (timed regions, step timer,
  measured matmul peak, tables)
- ``bert``    the bert-sst2 pieces the BERT benchmarks share (recipe parts, evaluator, counters)
- ``mlp``     the seed notebook's MLP benchmark: default / autocast / autocast+GradScaler
- ``steps``   bert-sst2 median step time, fp32 vs the device's AMP precision
- ``peers``   the same BERT fine-tune in mixft, ``transformers.Trainer`` and an ``accelerate`` loop
- ``scaling`` throughput vs batch size and sequence length, memory vs batch size
- ``cli``     ``scripts/benchmark.py``
- ``stream``  the recipe's real train stream: distinct shapes per epoch, padding efficiency, Linear inputs
- ``new_shapes`` what a new matmul shape costs per precision (one Linear, row counts repeated vs new)
- ``casts``   what a step casts (dtype conversions at the dispatcher, weights apart from activations)
- ``floors``  a floor line's inputs: the probe's matmul rate, a measured bandwidth (``mixft.train.floor``)
- ``gpu_check`` the GPU check (``scripts/gpu_check.sh``): its parts (``gpu_parts``: CUDA tests, a BERT
  step per precision, ``--compare``, mixft vs Trainer) within a time budget, JSON + markdown; what a
  bare GPU machine lacks (``gpu_setup``: recipe entry points, a BERT directory, the generated data)
- ``bf16_check`` issue 41's bf16 goals in one command on a CPU with native bf16, on the GPU check's
  driver: the main job, BERT-base size, Trainer with and without mixft's packing, the stream's floor

Only ``cli``, the GPU and bf16 checks and the scripts with their own ``main`` (``step_ablation``, ``profile_step``,
``new_shapes``, ...) print.
"""
