"""A tiny single-day event scheduler.

Example::

    from scheduler import Calendar, Event, parse_time

    cal = Calendar()
    cal.add(Event("standup", parse_time("09:00"), parse_time("09:15")))
"""

from .calendar import Calendar, SchedulingConflict
from .event import Event, format_time, parse_time

__all__ = ["Calendar", "Event", "SchedulingConflict", "format_time", "parse_time"]
