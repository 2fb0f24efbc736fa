import unittest

from unitconv import UnitError, convert


class ConvertTest(unittest.TestCase):
    def test_kilometres_to_metres(self):
        self.assertEqual(convert(3, "km", "m"), 3000)

    def test_hours_to_minutes(self):
        self.assertEqual(convert(2, "h", "min"), 120)

    def test_boiling_point(self):
        self.assertAlmostEqual(convert(100, "degC", "degF"), 212)

    def test_mixed_dimensions_rejected(self):
        with self.assertRaises(UnitError):
            convert(1, "kg", "m")


if __name__ == "__main__":
    unittest.main()
