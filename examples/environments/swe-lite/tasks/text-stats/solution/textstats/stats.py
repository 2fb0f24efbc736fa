"""Statistics built on :mod:`textstats.splitting`.

Words are compared case-insensitively: "The" and "the" are the same word,
and word keys in results are always lower case.
"""

from __future__ import annotations

from collections import Counter

from .splitting import sentences, words


def word_frequencies(text: str) -> Counter:
    """Count how often each word occurs."""
    return Counter(w.lower() for w in words(text))


def unique_word_count(text: str) -> int:
    """Number of distinct words."""
    return len({w.lower() for w in words(text)})


def top_words(text: str, n: int = 5, min_length: int = 1) -> list[tuple[str, int]]:
    """The ``n`` most frequent words of at least ``min_length`` letters.

    Ordered by count, most frequent first; ties are broken alphabetically.
    """
    counts = word_frequencies(text)
    ranked = sorted(
        ((word, count) for word, count in counts.items() if len(word) >= min_length),
        key=lambda pair: (-pair[1], pair[0]),
    )
    return ranked[:n]


def average_word_length(text: str) -> float:
    """Mean number of letters per word (0.0 for text without words)."""
    found = words(text)
    if not found:
        return 0.0
    return sum(len(w) for w in found) / len(found)


def summary(text: str) -> dict:
    """All statistics at once."""
    found = words(text)
    return {
        "words": len(found),
        "sentences": len(sentences(text)),
        "unique_words": unique_word_count(text),
        "average_word_length": round(average_word_length(text), 2),
        "top_words": top_words(text, n=3),
    }
