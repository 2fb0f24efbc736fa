import unittest

from scheduler import Calendar, Event, SchedulingConflict, parse_time


def ev(name, start, end):
    return Event(name, parse_time(start), parse_time(end))


class HiddenSchedulerTest(unittest.TestCase):
    def test_adjacent_events_do_not_overlap(self):
        a = ev("a", "10:00", "11:00")
        b = ev("b", "11:00", "12:00")
        self.assertFalse(a.overlaps(b))
        self.assertFalse(b.overlaps(a))

    def test_back_to_back_booking_on_both_sides(self):
        cal = Calendar()
        cal.add(ev("middle", "13:00", "14:00"))
        cal.add(ev("before", "12:00", "13:00"))
        cal.add(ev("after", "14:00", "15:00"))
        self.assertEqual([e.name for e in cal.events()], ["before", "middle", "after"])

    def test_conflicts_with_ignores_touching_events(self):
        cal = Calendar()
        cal.add(ev("morning", "08:00", "09:00"))
        cal.add(ev("lunch", "12:00", "13:00"))
        probe = ev("probe", "09:00", "12:00")
        self.assertEqual(cal.conflicts_with(probe), [])

    def test_real_overlaps_still_detected(self):
        a = ev("a", "10:00", "11:00")
        self.assertTrue(a.overlaps(ev("b", "10:59", "12:00")))
        self.assertTrue(a.overlaps(ev("c", "09:00", "10:01")))
        self.assertTrue(a.overlaps(ev("d", "10:15", "10:45")))
        self.assertTrue(a.overlaps(ev("e", "09:00", "12:00")))

    def test_conflict_reports_clashing_events(self):
        cal = Calendar()
        cal.add(ev("one", "09:00", "10:00"))
        cal.add(ev("two", "10:30", "11:30"))
        with self.assertRaises(SchedulingConflict) as ctx:
            cal.add(ev("long", "09:30", "11:00"))
        self.assertEqual([e.name for e in ctx.exception.clashes], ["one", "two"])

    def test_free_slots(self):
        cal = Calendar()
        cal.add(ev("a", "09:00", "10:00"))
        cal.add(ev("b", "10:30", "12:00"))
        slots = cal.free_slots(parse_time("08:00"), parse_time("13:00"), min_length=15)
        self.assertEqual(slots, [(480, 540), (600, 630), (720, 780)])


if __name__ == "__main__":
    unittest.main()
