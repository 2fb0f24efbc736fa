import unittest

from wrapkit import fill, wrap


class WrapTests(unittest.TestCase):
    def test_simple_paragraph(self):
        self.assertEqual(wrap("The quick brown fox", width=10), ["The quick", "brown fox"])

    def test_long_words_are_split(self):
        self.assertEqual(wrap("abcdefghij", width=4), ["abcd", "efgh", "ij"])

    def test_blank_text(self):
        self.assertEqual(wrap("   \n "), [])
        self.assertEqual(fill(""), "")


if __name__ == "__main__":
    unittest.main()
