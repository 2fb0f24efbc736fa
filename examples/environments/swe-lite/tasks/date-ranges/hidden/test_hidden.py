import unittest
from datetime import date, timedelta

from dateranges import MONDAY, SUNDAY, DateRange, next_weekday, weekly


class HiddenDateTests(unittest.TestCase):
    def test_next_weekday_never_in_the_past(self):
        start = date(2024, 5, 6)
        for offset in range(7):
            day = start + timedelta(days=offset)
            for weekday in range(7):
                found = next_weekday(day, weekday)
                self.assertEqual(found.weekday(), weekday)
                self.assertTrue(day <= found < day + timedelta(days=7), (day, weekday, found))

    def test_next_monday_from_sunday(self):
        self.assertEqual(next_weekday(date(2024, 6, 30), MONDAY), date(2024, 7, 1))

    def test_weekly_starting_mid_week(self):
        march = DateRange(date(2024, 3, 1), date(2024, 3, 31))
        self.assertEqual(
            weekly(march, MONDAY),
            [date(2024, 3, 4), date(2024, 3, 11), date(2024, 3, 18), date(2024, 3, 25)],
        )

    def test_same_day_and_exclusive_search(self):
        sunday = date(2024, 6, 30)
        self.assertEqual(next_weekday(sunday, SUNDAY), sunday)
        self.assertEqual(next_weekday(sunday, SUNDAY, include_today=False), date(2024, 7, 7))

    def test_fortnightly_from_range_start(self):
        q = DateRange(date(2024, 1, 1), date(2024, 2, 15))
        self.assertEqual(
            weekly(q, MONDAY, every=2),
            [date(2024, 1, 1), date(2024, 1, 15), date(2024, 1, 29), date(2024, 2, 12)],
        )

    def test_range_basics(self):
        r = DateRange(date(2023, 12, 30), date(2024, 1, 2))
        self.assertEqual(len(list(r)), 4)
        self.assertIn(date(2024, 1, 1), r)
        self.assertIsNone(r.intersection(DateRange(date(2024, 1, 3), date(2024, 1, 4))))
        with self.assertRaises(ValueError):
            DateRange(date(2024, 1, 2), date(2024, 1, 1))


if __name__ == "__main__":
    unittest.main()
