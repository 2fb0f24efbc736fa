"""Conversion between integers and canonical Roman numerals."""

from .validate import RomanError, check_int, check_numeral

MIN_VALUE = 1
MAX_VALUE = 3999

_PAIRS = (
    (1000, "M"),
    (900, "CM"),
    (500, "D"),
    (400, "CD"),
    (100, "C"),
    (90, "XC"),
    (50, "L"),
    (40, "XL"),
    (10, "X"),
    (9, "IX"),
    (5, "V"),
    (4, "IV"),
    (1, "I"),
)

_SYMBOLS = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}


def to_roman(number):
    """Return the canonical Roman numeral for ``number``.

    Only integers in the classical range ``MIN_VALUE..MAX_VALUE`` (both
    inclusive, i.e. 1 to 3999) can be written with the standard symbols;
    anything else raises :class:`RomanError`.
    """
    check_int(number)
    if number < MIN_VALUE or number >= MAX_VALUE:
        raise RomanError(f"{number} is outside {MIN_VALUE}..{MAX_VALUE}")
    parts = []
    for value, symbol in _PAIRS:
        count, number = divmod(number, value)
        parts.append(symbol * count)
    return "".join(parts)


def from_roman(numeral):
    """Parse a canonical Roman numeral and return its integer value.

    Parsing is case-insensitive and ignores surrounding whitespace.  Only
    canonical spellings are accepted: ``"IIII"`` or ``"IC"`` raise
    :class:`RomanError` because they are not what :func:`to_roman` produces.
    """
    text = check_numeral(numeral)
    total = 0
    for index, char in enumerate(text):
        value = _SYMBOLS[char]
        if index + 1 < len(text) and value < _SYMBOLS[text[index + 1]]:
            total -= value
        else:
            total += value
    if total < MIN_VALUE or to_roman(total) != text:
        raise RomanError(f"{numeral!r} is not a canonical Roman numeral")
    return total


def is_roman(numeral):
    """Return True when ``numeral`` is a valid canonical Roman numeral."""
    try:
        from_roman(numeral)
    except RomanError:
        return False
    return True
