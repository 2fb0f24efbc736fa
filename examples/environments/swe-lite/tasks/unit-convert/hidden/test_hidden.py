import unittest

from unitconv import UnitError, convert


class HiddenConvertTest(unittest.TestCase):
    def test_metres_to_kilometres_keeps_fraction(self):
        self.assertAlmostEqual(convert(1500, "m", "km"), 1.5)
        self.assertAlmostEqual(convert(250, "mm", "m"), 0.25)

    def test_minutes_to_hours(self):
        self.assertAlmostEqual(convert(90, "min", "h"), 1.5)
        self.assertAlmostEqual(convert(1, "d", "wk"), 1 / 7)

    def test_imperial_units(self):
        self.assertAlmostEqual(convert(1, "mi", "km"), 1.609344)
        self.assertAlmostEqual(convert(10, "cm", "in"), 3.937007874, places=6)
        self.assertAlmostEqual(convert(1, "kg", "lb"), 2.2046226218, places=6)

    def test_round_trip(self):
        for unit in ("mm", "cm", "km", "in", "ft", "yd", "mi"):
            back = convert(convert(7.25, "m", unit), unit, "m")
            self.assertAlmostEqual(back, 7.25, msg=f"round trip through {unit}")

    def test_whole_number_conversions(self):
        self.assertEqual(convert(5, "m", "cm"), 500)
        self.assertEqual(convert(2, "t", "kg"), 2000)
        self.assertEqual(convert(3, "wk", "d"), 21)

    def test_temperatures(self):
        self.assertAlmostEqual(convert(32, "degF", "degC"), 0)
        self.assertAlmostEqual(convert(0, "K", "degC"), -273.15)
        self.assertAlmostEqual(convert(-40, "degC", "degF"), -40)
        with self.assertRaises(UnitError):
            convert(-300, "degC", "K")

    def test_unknown_unit(self):
        with self.assertRaises(UnitError):
            convert(1, "furlong", "m")
        with self.assertRaises(UnitError):
            convert(1, "s", "degC")


if __name__ == "__main__":
    unittest.main()
