import unittest

from intervals import Interval, covered_length, merge


class MergeTests(unittest.TestCase):
    def test_overlapping_intervals_are_merged(self):
        self.assertEqual(merge([(1, 4), (2, 6), (8, 10)]), [Interval(1, 6), Interval(8, 10)])

    def test_unsorted_input(self):
        self.assertEqual(merge([(8, 9), (0, 2), (1, 3)]), [Interval(0, 3), Interval(8, 9)])

    def test_empty(self):
        self.assertEqual(merge([]), [])

    def test_covered_length_counts_overlap_once(self):
        self.assertEqual(covered_length([(0, 10), (5, 15)]), 15)


if __name__ == "__main__":
    unittest.main()
