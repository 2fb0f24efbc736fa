import unittest

from minicsv import format_field, format_row, parse_line


class WriterTests(unittest.TestCase):
    def test_plain_fields_are_not_quoted(self):
        self.assertEqual(format_row(["a", 1, None, 2.5]), "a,1,,2.5")

    def test_delimiter_forces_quotes(self):
        self.assertEqual(format_field("Smith, John"), '"Smith, John"')

    def test_reader_splits_quoted_fields(self):
        self.assertEqual(parse_line('1,"x,y",z\r\n'), ["1", "x,y", "z"])

    def test_quote_character_is_escaped(self):
        self.assertEqual(format_field('5" screen'), '"5"" screen"')


if __name__ == "__main__":
    unittest.main()
