"""Examples beside the library: the README example as a runnable script, the quickstart notebook.

A package only so that ``scripts/readme_example.py`` and the tests can import
``examples.readme_example`` from the repository root; nothing in ``mixft`` imports it.
"""
