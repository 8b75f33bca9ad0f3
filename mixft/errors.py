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


def first_line(exc: BaseException, limit: int = 200) -> str:
    """An exception as one short line, to quote inside a UsageError or another one-line message.

    Usage: ``raise UsageError(f"{path}: cannot read it: {first_line(exc)}")``
    """
    # The first line says what went wrong; later ones are library advice and tracebacks.
    lines = [line for line in str(exc).splitlines() if line.strip()]
    text = " ".join(lines[0].split()) if lines else type(exc).__name__
    return text if len(text) <= limit else text[:limit] + "..."
