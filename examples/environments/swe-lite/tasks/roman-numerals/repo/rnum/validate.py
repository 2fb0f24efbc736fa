"""Input checks shared by the conversion functions."""

import re

_ALLOWED = re.compile(r"^[IVXLCDM]+$")


class RomanError(ValueError):
    """Raised when a value cannot be converted to or from a Roman numeral."""


def check_int(number):
    """Make sure ``number`` is a plain integer (``bool`` is refused)."""
    if isinstance(number, bool) or not isinstance(number, int):
        raise RomanError(f"expected an int, got {type(number).__name__}")
    return number


def check_numeral(numeral):
    """Normalise ``numeral`` and make sure it only uses Roman symbols.

    Surrounding whitespace is removed and the text is upper-cased, so
    ``" xiv "`` becomes ``"XIV"``.  Empty strings and strings containing
    anything other than the seven Roman symbols raise :class:`RomanError`.
    """
    if not isinstance(numeral, str):
        raise RomanError(f"expected a str, got {type(numeral).__name__}")
    text = numeral.strip().upper()
    if not text or not _ALLOWED.match(text):
        raise RomanError(f"{numeral!r} contains characters that are not Roman symbols")
    return text
