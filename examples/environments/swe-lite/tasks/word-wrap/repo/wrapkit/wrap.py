"""Greedy line breaking."""


def _chunks(word, size):
    """Split ``word`` into pieces of at most ``size`` characters."""
    return [word[i : i + size] for i in range(0, len(word), size)]


def wrap(text, width=70, indent="", break_long_words=True):
    """Break ``text`` into lines of at most ``width`` characters.

    Words are separated by any whitespace and joined with single spaces.
    Every line starts with ``indent``, which counts towards ``width``.
    A word longer than the space left on an empty line is split into
    pieces when ``break_long_words`` is true and otherwise placed on a
    line of its own (the only case where a line may exceed ``width``).
    Returns a list of lines without trailing newlines; an empty or blank
    ``text`` gives an empty list.
    """
    available = width - len(indent)
    if available < 1:
        raise ValueError("width must be larger than the indent")
    words = []
    for word in text.split():
        if len(word) > available and break_long_words:
            words.extend(_chunks(word, available))
        else:
            words.append(word)

    lines = []
    current = ""
    for word in words:
        if not current:
            current = word
        elif len(current) + len(word) <= available:
            current += " " + word
        else:
            lines.append(indent + current)
            current = word
    if current:
        lines.append(indent + current)
    return lines


def fill(text, width=70, indent="", break_long_words=True):
    """Like :func:`wrap` but return a single string joined with newlines."""
    return "\n".join(wrap(text, width, indent, break_long_words))
