"""Benchmarks: what mixed precision buys on this device, measured side by side in one run.

An application beside ``scripts/``, not part of the library: it reaches recipes only
through the recipe protocol (``mixft.recipe.get_recipe``, ``recipe.prepare``,
``recipe.build``) and trains every mixft run through ``mixft.runs.build.build_trainer``.

Modules, one job each:

- ``timing``  clocks and gauges shared by the benchmarks (timed regions, step timer,
  measured matmul peak, tables)
- ``bert``    the bert-sst2 pieces the BERT benchmarks share (recipe parts, evaluator, counters)
- ``mlp``     the seed notebook's MLP benchmark: default / autocast / autocast+GradScaler
- ``steps``   bert-sst2 median step time, fp32 vs the device's AMP precision
- ``peers``   the same BERT fine-tune in mixft, ``transformers.Trainer`` and an ``accelerate`` loop
- ``scaling`` throughput vs batch size and sequence length, memory vs batch size
- ``cli``     ``scripts/benchmark.py``

Only ``cli`` prints.
"""
