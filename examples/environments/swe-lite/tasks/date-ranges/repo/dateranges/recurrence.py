"""Weekly recurring dates.

Weekdays are numbered like :meth:`datetime.date.weekday`: Monday is 0 and
Sunday is 6.
"""

from datetime import timedelta

MONDAY, TUESDAY, WEDNESDAY, THURSDAY, FRIDAY, SATURDAY, SUNDAY = range(7)


def next_weekday(day, weekday, include_today=True):
    """Return the first date on or after ``day`` that falls on ``weekday``.

    With ``include_today=False`` the search starts the day after ``day``,
    so asking for a Monday on a Monday gives the following Monday.
    """
    if not 0 <= weekday <= 6:
        raise ValueError(f"weekday must be between 0 and 6, got {weekday}")
    delta = weekday - day.weekday() % 7
    if delta == 0 and not include_today:
        delta = 7
    return day + timedelta(days=delta)


def weekly(date_range, weekday, every=1):
    """List the dates in ``date_range`` falling on ``weekday``.

    ``every=2`` keeps every second occurrence (a fortnightly meeting), and
    so on; the first occurrence is always the first matching day of the
    range.
    """
    if every < 1:
        raise ValueError("every must be at least 1")
    current = next_weekday(date_range.start, weekday)
    step = timedelta(weeks=every)
    dates = []
    while current <= date_range.end:
        dates.append(current)
        current += step
    return dates
