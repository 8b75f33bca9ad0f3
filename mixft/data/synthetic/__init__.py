"""mixft's generated data sets: offline stand-ins for hub datasets and the demo files' contents.

Modules: ``common`` (size rules, per-split rngs, distinct rows, disjoint splits),
``sentiment`` (SST-2 schema), ``topics`` (AG News schema), ``paraphrase`` (MRPC schema),
``stand_ins`` (each set as a ``StandIn`` a recipe passes to ``load_text_data``).
The user-data path (files, columns, labels, user_data) never imports this package.
"""
