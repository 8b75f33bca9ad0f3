"""The one exception type that means "the user gave us something we cannot use".

The CLI turns it into a one-line message on stderr and exit code 2, *before* any
training starts; library users get an ordinary ``ValueError`` subclass.
"""


class UsageError(ValueError):
    """Bad input: an unknown name, a malformed file, an impossible option combination.

    The message is a single line that names the input and says what would be accepted,
    e.g. ``--batch-size must be a positive integer, got 0``.
    """

    def __init__(self, message: str):
        # Keep it to one line: the CLI prints it verbatim after "error: ".
        super().__init__(" ".join(str(message).split()))
