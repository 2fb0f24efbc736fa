"""Event records and time helpers used by the scheduler."""

from __future__ import annotations

from dataclasses import dataclass

MINUTES_PER_DAY = 24 * 60


def parse_time(text: str) -> int:
    """Parse ``"HH:MM"`` into minutes since midnight.

    ``"24:00"`` is accepted so that an event can run until the end of the day.
    """
    hours, sep, minutes = text.strip().partition(":")
    if not sep or not hours.isdigit() or not minutes.isdigit() or len(minutes) != 2:
        raise ValueError(f"invalid time: {text!r}")
    value = int(hours) * 60 + int(minutes)
    if int(minutes) >= 60 or value > MINUTES_PER_DAY:
        raise ValueError(f"time out of range: {text!r}")
    return value


def format_time(minutes: int) -> str:
    """Format minutes since midnight as ``"HH:MM"``."""
    if not 0 <= minutes <= MINUTES_PER_DAY:
        raise ValueError(f"time out of range: {minutes}")
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


@dataclass(frozen=True)
class Event:
    """A named block of time on a single day.

    ``start`` and ``end`` are minutes since midnight. The interval is
    half-open: the event occupies ``start`` up to, but not including, ``end``,
    so an event ending at 10:00 and another starting at 10:00 do not clash.
    """

    name: str
    start: int
    end: int

    def __post_init__(self) -> None:
        if self.start < 0 or self.end > MINUTES_PER_DAY:
            raise ValueError(f"event {self.name!r} is outside the day")
        if self.end <= self.start:
            raise ValueError(f"event {self.name!r} must end after it starts")

    @property
    def duration(self) -> int:
        """Length of the event in minutes."""
        return self.end - self.start

    def overlaps(self, other: "Event") -> bool:
        """Return True if the two events share at least one minute."""
        return self.start < other.end and other.start < self.end

    def __str__(self) -> str:
        return f"{format_time(self.start)}-{format_time(self.end)} {self.name}"
