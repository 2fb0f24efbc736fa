import unittest

from rnum import RomanError, from_roman, to_roman


class ToRomanTests(unittest.TestCase):
    def test_common_values(self):
        self.assertEqual(to_roman(4), "IV")
        self.assertEqual(to_roman(1994), "MCMXCIV")
        self.assertEqual(to_roman(2024), "MMXXIV")

    def test_rejects_zero(self):
        with self.assertRaises(RomanError):
            to_roman(0)

    def test_largest_supported_value(self):
        self.assertEqual(to_roman(3999), "MMMCMXCIX")


class FromRomanTests(unittest.TestCase):
    def test_lowercase_and_whitespace(self):
        self.assertEqual(from_roman("  xlii "), 42)

    def test_rejects_non_canonical(self):
        with self.assertRaises(RomanError):
            from_roman("IIII")


if __name__ == "__main__":
    unittest.main()
