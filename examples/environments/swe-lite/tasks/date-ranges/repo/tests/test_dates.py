import unittest
from datetime import date

from dateranges import MONDAY, DateRange, next_weekday


class DateRangeTests(unittest.TestCase):
    def test_length_is_inclusive(self):
        self.assertEqual(len(DateRange(date(2024, 2, 1), date(2024, 2, 29))), 29)

    def test_intersection(self):
        a = DateRange(date(2024, 1, 1), date(2024, 1, 10))
        b = DateRange(date(2024, 1, 8), date(2024, 1, 20))
        self.assertEqual(a.intersection(b), DateRange(date(2024, 1, 8), date(2024, 1, 10)))

    def test_next_weekday_later_in_week(self):
        # 2024-05-06 is a Monday
        self.assertEqual(next_weekday(date(2024, 5, 6), 3), date(2024, 5, 9))

    def test_next_monday_from_friday(self):
        # 2024-05-10 is a Friday
        self.assertEqual(next_weekday(date(2024, 5, 10), MONDAY), date(2024, 5, 13))


if __name__ == "__main__":
    unittest.main()
