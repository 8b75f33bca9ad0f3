"""Examples beside the library: the README example as a runnable script, the quickstart notebook.

A package so that ``scripts/readme_example.py``, the script ``examples/readme_example.py`` and
the tests can import ``examples.readme_example`` and its parts (``examples.readme``) from the
repository root; nothing in ``mixft`` imports it.
"""
