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
    return shortened(lines[0], limit) if lines else type(exc).__name__


def shortened(text: str, limit: int = 200) -> str:
    """``text`` on one line, at most about ``limit`` characters, cut at a word boundary ("..." marks the cut).

    Usage: ``shortened("Error(s) in loading state_dict for Model: size mismatch for ...", 40)``
    """
    text = " ".join(str(text).split())
    if len(text) <= limit:
        return text
    head = text[:limit]
    # A word cut in half reads as another word (a shape "[64, 3" of "[64, 32]"): end at the last whole one.
    if text[limit] != " " and " " in head:
        head = head.rsplit(" ", 1)[0]
    return head.rstrip(" ,;:") + " ..."
