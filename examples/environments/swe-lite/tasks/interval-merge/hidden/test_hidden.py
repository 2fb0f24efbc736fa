import unittest

from intervals import Interval, covered_length, gaps, merge


class HiddenMergeTests(unittest.TestCase):
    def test_touching_intervals_merge(self):
        self.assertEqual(merge([(1, 3), (3, 5)]), [Interval(1, 5)])

    def test_chain_of_touching_intervals(self):
        self.assertEqual(merge([(4, 6), (0, 2), (2, 4), (10, 11)]), [Interval(0, 6), Interval(10, 11)])

    def test_no_gap_between_touching_intervals(self):
        self.assertEqual(gaps([(0, 2), (2, 5), (7, 9)]), [Interval(5, 7)])

    def test_point_interval_on_boundary(self):
        self.assertEqual(merge([(1, 3), (3, 3)]), [Interval(1, 3)])

    def test_contained_interval_does_not_shrink(self):
        self.assertEqual(merge([(0, 10), (2, 3), (4, 5)]), [Interval(0, 10)])

    def test_disjoint_intervals_kept(self):
        items = [(6, 7), (0, 1), (3, 4)]
        self.assertEqual(merge(items), [Interval(0, 1), Interval(3, 4), Interval(6, 7)])
        self.assertEqual(items, [(6, 7), (0, 1), (3, 4)])
        self.assertEqual(covered_length(items), 3)

    def test_gaps_within_bounds(self):
        self.assertEqual(
            gaps([(2, 3), (5, 6)], within=(0, 10)),
            [Interval(0, 2), Interval(3, 5), Interval(6, 10)],
        )

    def test_invalid_interval_rejected(self):
        with self.assertRaises(ValueError):
            merge([(5, 1)])


if __name__ == "__main__":
    unittest.main()
