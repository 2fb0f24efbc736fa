import unittest

from scheduler import Calendar, Event, SchedulingConflict, parse_time


def ev(name, start, end):
    return Event(name, parse_time(start), parse_time(end))


class CalendarTest(unittest.TestCase):
    def test_parse_time(self):
        self.assertEqual(parse_time("00:00"), 0)
        self.assertEqual(parse_time("09:30"), 570)
        with self.assertRaises(ValueError):
            parse_time("9.30")

    def test_overlapping_event_is_rejected(self):
        cal = Calendar()
        cal.add(ev("standup", "09:00", "09:30"))
        with self.assertRaises(SchedulingConflict):
            cal.add(ev("review", "09:15", "10:00"))
        self.assertEqual(len(cal), 1)

    def test_back_to_back_events(self):
        cal = Calendar()
        cal.add(ev("standup", "09:00", "09:30"))
        cal.add(ev("planning", "09:30", "10:30"))
        self.assertEqual([e.name for e in cal.events()], ["standup", "planning"])


if __name__ == "__main__":
    unittest.main()
