"""Layer 8, the command line: ``mixft`` / ``python scripts/finetune.py``.

    main     parse -> validate -> run -> print; ``main(argv) -> exit code`` (the console script)
    parser   the argument parser's pieces, generated from the option declarations

Imports every layer below; nothing imports it.
"""
