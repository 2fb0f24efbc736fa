"""Merging and analysing collections of intervals."""

from .interval import Interval


def _normalise(items):
    """Turn ``(start, end)`` pairs or intervals into validated Intervals."""
    return [Interval.of(*item) for item in items]


def merge(items):
    """Merge overlapping intervals and return them sorted by start.

    ``items`` may hold :class:`Interval` objects or plain ``(start, end)``
    pairs, in any order.  Because intervals are closed, two intervals that
    share a point are merged as well: ``[1, 3]`` and ``[3, 5]`` become
    ``[1, 5]``.  The input is not modified.
    """
    ordered = sorted(_normalise(items))
    merged = []
    for current in ordered:
        if merged and current.start <= merged[-1].end:
            last = merged[-1]
            merged[-1] = Interval(last.start, max(last.end, current.end))
        else:
            merged.append(current)
    return merged


def covered_length(items):
    """Total length of the number line covered by ``items``.

    Overlapping parts are only counted once.
    """
    return sum(interval.length for interval in merge(items))


def gaps(items, within=None):
    """Return the open stretches between the merged intervals.

    Each gap is reported as an :class:`Interval` whose ends are the end of
    one merged interval and the start of the next.  When ``within`` is
    given (an interval or pair), stretches before the first and after the
    last interval, up to the bounds of ``within``, are included too.
    """
    merged = merge(items)
    result = []
    if within is not None:
        low, high = Interval.of(*within)
        if not merged:
            return [Interval(low, high)]
        if low < merged[0].start:
            result.append(Interval(low, merged[0].start))
    for left, right in zip(merged, merged[1:]):
        result.append(Interval(left.end, right.start))
    if within is not None and merged[-1].end < high:
        result.append(Interval(merged[-1].end, high))
    return result
