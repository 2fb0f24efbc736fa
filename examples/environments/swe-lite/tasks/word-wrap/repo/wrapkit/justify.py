"""Full justification of wrapped text."""

from .wrap import wrap


def _spread(line, width):
    """Pad the gaps between the words of ``line`` so it is ``width`` long.

    Extra spaces go to the leftmost gaps first.  A line with a single word
    is returned unchanged.
    """
    words = line.split(" ")
    gaps = len(words) - 1
    if gaps == 0:
        return line
    missing = width - len(line)
    base, extra = divmod(missing, gaps)
    parts = []
    for index, word in enumerate(words[:-1]):
        parts.append(word + " " * (1 + base + (1 if index < extra else 0)))
    parts.append(words[-1])
    return "".join(parts)


def justify(text, width=70):
    """Wrap ``text`` and justify every line but the last to exactly ``width``.

    Returns a list of lines.  The last line is left-aligned, as in most
    typesetting systems.
    """
    lines = wrap(text, width)
    if not lines:
        return []
    return [_spread(line, width) for line in lines[:-1]] + [lines[-1]]
