"""The :class:`DateRange` type."""

from dataclasses import dataclass
from datetime import date, timedelta


@dataclass(frozen=True)
class DateRange:
    """An inclusive range of calendar days from ``start`` to ``end``.

    ``DateRange(date(2024, 1, 1), date(2024, 1, 1))`` is a single day.
    """

    start: date
    end: date

    def __post_init__(self):
        if self.start > self.end:
            raise ValueError(f"range starts after it ends: {self.start} > {self.end}")

    def __len__(self):
        return (self.end - self.start).days + 1

    def __contains__(self, day):
        return self.start <= day <= self.end

    def __iter__(self):
        for offset in range(len(self)):
            yield self.start + timedelta(days=offset)

    def overlaps(self, other):
        """Return True when the two ranges share at least one day."""
        return self.start <= other.end and other.start <= self.end

    def intersection(self, other):
        """Return the days common to both ranges, or None if there are none."""
        if not self.overlaps(other):
            return None
        return DateRange(max(self.start, other.start), min(self.end, other.end))
