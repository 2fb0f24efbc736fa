"""Splitting text into words and sentences."""

from __future__ import annotations

import re

# Letters (any script), optionally joined by apostrophes or hyphens:
# "don't", "well-known", "café".
_WORD = re.compile(r"[^\W\d_]+(?:['\u2019-][^\W\d_]+)*")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def words(text: str) -> list[str]:
    """Return the words of ``text`` in order, with their original case."""
    return _WORD.findall(text)


def sentences(text: str) -> list[str]:
    """Split ``text`` into sentences ending in ``.``, ``!`` or ``?``.

    A trailing fragment without final punctuation counts as a sentence.
    """
    parts = _SENTENCE_END.split(text.strip())
    return [part for part in parts if part]
