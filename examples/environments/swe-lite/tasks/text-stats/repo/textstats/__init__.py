"""Plain-text statistics.

Example::

    from textstats import summary

    summary("The cat sat. The cat slept.")
"""

from .splitting import sentences, words
from .stats import (
    average_word_length,
    summary,
    top_words,
    unique_word_count,
    word_frequencies,
)

__all__ = [
    "average_word_length",
    "sentences",
    "summary",
    "top_words",
    "unique_word_count",
    "word_frequencies",
    "words",
]
