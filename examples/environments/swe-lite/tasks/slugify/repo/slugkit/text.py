"""Low-level text helpers used by :mod:`slugkit.slug`."""

import re
import unicodedata

_WORD = re.compile(r"[A-Za-z0-9]+")

_SPECIAL = {
    "ß": "ss",
    "æ": "ae",
    "Æ": "AE",
    "ø": "o",
    "Ø": "O",
    "œ": "oe",
    "Œ": "OE",
    "&": " and ",
}


def fold_to_ascii(text):
    """Replace accented and a few special characters by ASCII look-alikes.

    ``"Crème Brûlée"`` becomes ``"Creme Brulee"``.  Characters without an
    ASCII equivalent are dropped.  Letter case is preserved.
    """
    text = "".join(_SPECIAL.get(char, char) for char in text)
    decomposed = unicodedata.normalize("NFKD", text)
    return decomposed.encode("ascii", "ignore").decode("ascii")


def split_words(text):
    """Return the runs of ASCII letters and digits in ``text``, in order."""
    return _WORD.findall(text)
