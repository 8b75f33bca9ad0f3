"""``label_key``: the class a written label stands for (mixft's one normalisation of label values).

Its own module so that the parts of ``mixft.data`` that only group labels (``held_out``'s stratified split)
need not import the label space (``mixft.data.labels``), which names their types.

Usage: ``label_key(" 01") == label_key("+1") == label_key(1.0) == 1``
"""

from __future__ import annotations

import re
import unicodedata

INT_TEXT = r"^[+-]?[0-9]+$"
# Python's and Arrow's float syntax, without "_" separators; "nan"/"inf" are numbers (refused
# as not finite) rather than words, so a regression file with an "inf" row is named by its row.
NUMBER_TEXT = r"^[+-]?(([0-9]+\.?[0-9]*|\.[0-9]+)(e[+-]?[0-9]+)?|inf|infinity|nan)$"


def label_key(value):
    """The class a written label stands for: mixft's one normalisation of label values.

    Text is taken in Unicode's composed form (NFC): ``café`` typed with a combining accent (``e`` + U+0301, as
    text pasted from macOS often is) and with ``é`` are one class, not two.

    Usage: ``label_key(" 01") == label_key(1.0) == 1``; ``label_key(" pos ") == "pos"``
    """
    if isinstance(value, str):
        text = unicodedata.normalize("NFC", value.strip())
        if re.fullmatch(INT_TEXT, text):
            return int(text)
        if not re.fullmatch(NUMBER_TEXT, text, flags=re.IGNORECASE):
            return text
        value = float(text)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value
