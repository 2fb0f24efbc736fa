"""dateranges: inclusive date ranges and weekly recurrences."""

from .ranges import DateRange
from .recurrence import MONDAY, SUNDAY, next_weekday, weekly

__all__ = ["DateRange", "MONDAY", "SUNDAY", "next_weekday", "weekly"]
