"""Layer 8, the command line: ``mixft`` / ``python scripts/finetune.py``.

    main     parse -> check -> run; ``main(argv) -> exit code`` (the console script); one-line errors, exit codes
    console  everything a run prints to the terminal: header, progress bar, estimate, result lines
    parser   the argument parser's pieces, generated from the option declarations

Imports every layer below; nothing imports it.
"""
