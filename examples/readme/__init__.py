"""The parts of the README example (``examples/readme_example.py`` is the script that runs them).

- :mod:`.bugs`: the README's code as written, and what each of its three bugs raises;
- :mod:`.autocast_trap`: sigmoid + ``BCELoss`` under autocast, run live, and the fix;
- :mod:`.loops`: the README's two training loops, corrected (the script prints their diff);
- :mod:`.setup`: the example's budget, and the model and data both loops train on;
- :mod:`.comparison`: both loops run and measured the same way, side by side.
"""
