import unittest

from rnum import MAX_VALUE, RomanError, from_roman, is_roman, to_roman


class HiddenRomanTests(unittest.TestCase):
    def test_to_roman_upper_bound(self):
        self.assertEqual(to_roman(3999), "MMMCMXCIX")

    def test_from_roman_upper_bound(self):
        self.assertEqual(from_roman("MMMCMXCIX"), 3999)
        self.assertTrue(is_roman("mmmcmxcix"))

    def test_round_trip_whole_range(self):
        for number in range(1, MAX_VALUE + 1):
            self.assertEqual(from_roman(to_roman(number)), number)

    def test_rejects_values_past_the_range(self):
        for bad in (4000, 10000, -1, 0):
            with self.assertRaises(RomanError):
                to_roman(bad)

    def test_known_numerals(self):
        cases = {1: "I", 9: "IX", 14: "XIV", 40: "XL", 90: "XC", 400: "CD", 944: "CMXLIV", 3888: "MMMDCCCLXXXVIII"}
        for number, numeral in cases.items():
            self.assertEqual(to_roman(number), numeral)
            self.assertEqual(from_roman(numeral), number)

    def test_rejects_bad_input(self):
        for bad in ("", "ABC", "IC", "VV", "MMMM"):
            with self.assertRaises(RomanError):
                from_roman(bad)
        with self.assertRaises(RomanError):
            to_roman(True)


if __name__ == "__main__":
    unittest.main()
