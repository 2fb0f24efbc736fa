"""A calendar holding non-overlapping events for one day."""

from __future__ import annotations

from .event import MINUTES_PER_DAY, Event


class SchedulingConflict(Exception):
    """Raised when an event would overlap events already booked."""

    def __init__(self, event: Event, clashes: list[Event]):
        self.event = event
        self.clashes = clashes
        names = ", ".join(e.name for e in clashes)
        super().__init__(f"{event.name!r} clashes with: {names}")


class Calendar:
    """An ordered collection of events for a single day."""

    def __init__(self) -> None:
        self._events: list[Event] = []

    def __len__(self) -> int:
        return len(self._events)

    def events(self) -> list[Event]:
        """Return the booked events ordered by start time."""
        return list(self._events)

    def conflicts_with(self, event: Event) -> list[Event]:
        """Return the booked events that overlap ``event``."""
        return [booked for booked in self._events if booked.overlaps(event)]

    def add(self, event: Event, allow_conflicts: bool = False) -> None:
        """Book ``event``.

        Raises :class:`SchedulingConflict` if it overlaps an existing event,
        unless ``allow_conflicts`` is true.
        """
        clashes = self.conflicts_with(event)
        if clashes and not allow_conflicts:
            raise SchedulingConflict(event, clashes)
        self._events.append(event)
        self._events.sort(key=lambda e: (e.start, e.end, e.name))

    def remove(self, name: str) -> Event:
        """Remove and return the first event called ``name``."""
        for index, event in enumerate(self._events):
            if event.name == name:
                return self._events.pop(index)
        raise KeyError(name)

    def free_slots(
        self, day_start: int = 0, day_end: int = MINUTES_PER_DAY, min_length: int = 1
    ) -> list[tuple[int, int]]:
        """Return the gaps between ``day_start`` and ``day_end``.

        Each gap is a ``(start, end)`` pair; gaps shorter than ``min_length``
        minutes are left out.
        """
        slots = []
        cursor = day_start
        for event in self._events:
            if event.end <= cursor:
                continue
            if event.start >= day_end:
                break
            if event.start - cursor >= min_length:
                slots.append((cursor, event.start))
            cursor = max(cursor, event.end)
        if day_end - cursor >= min_length:
            slots.append((cursor, day_end))
        return slots
