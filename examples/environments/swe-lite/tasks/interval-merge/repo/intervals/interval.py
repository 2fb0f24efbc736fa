"""The :class:`Interval` value type."""

from typing import NamedTuple


class Interval(NamedTuple):
    """A closed interval ``[start, end]`` on the number line.

    Both ends belong to the interval, so ``Interval(3, 3)`` is the single
    point 3.  ``start`` must not be greater than ``end``; use
    :meth:`Interval.of` to build one with validation.
    """

    start: float
    end: float

    @classmethod
    def of(cls, start, end):
        """Build an interval, raising ``ValueError`` when ``start > end``."""
        if start > end:
            raise ValueError(f"interval start {start!r} is after its end {end!r}")
        return cls(start, end)

    @property
    def length(self):
        """Distance between the two ends (0 for a single point)."""
        return self.end - self.start

    def contains(self, value):
        """Return True when ``value`` lies inside the interval, ends included."""
        return self.start <= value <= self.end

    def overlaps(self, other):
        """Return True when the two intervals share at least one point."""
        return self.start <= other.end and other.start <= self.end
