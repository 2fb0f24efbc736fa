import unittest

from wrapkit import fill, justify, wrap

TEXT = (
    "It was the best of times, it was the worst of times, it was the age "
    "of wisdom, it was the age of foolishness, it was the epoch of belief"
)


class HiddenWrapTests(unittest.TestCase):
    def test_lines_never_exceed_width(self):
        for width in range(8, 40):
            for line in wrap(TEXT, width=width):
                self.assertLessEqual(len(line), width, (width, line))

    def test_two_words_one_too_long_together(self):
        self.assertEqual(wrap("hello world", width=10), ["hello", "world"])

    def test_exact_fit_stays_on_one_line(self):
        self.assertEqual(wrap("hello world", width=11), ["hello world"])

    def test_indent_counts_towards_width(self):
        self.assertEqual(wrap("aa bb cc", width=7, indent="  "), ["  aa bb", "  cc"])
        self.assertEqual(fill("one two", width=8, indent="> "), "> one\n> two")

    def test_justify_pads_to_width(self):
        self.assertEqual(justify("one two three four", width=10), ["one    two", "three four"])

    def test_unbroken_long_word(self):
        self.assertEqual(
            wrap("tiny incomprehensibilities x", width=6, break_long_words=False),
            ["tiny", "incomprehensibilities", "x"],
        )


if __name__ == "__main__":
    unittest.main()
