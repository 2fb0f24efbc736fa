import unittest

from minicsv import format_field, format_row, format_rows, parse_line


class HiddenCSVTests(unittest.TestCase):
    def test_embedded_quotes_are_doubled(self):
        self.assertEqual(format_field('say "hi"'), '"say ""hi"""')

    def test_line_breaks_are_quoted(self):
        self.assertEqual(format_field("line1\nline2"), '"line1\nline2"')
        self.assertEqual(format_field("a\rb"), '"a\rb"')

    def test_round_trip_with_special_characters(self):
        row = ['he said "no"', "multi\nline", "plain", "comma, here", ""]
        self.assertEqual(parse_line(format_row(row)), row)

    def test_custom_quotechar(self):
        self.assertEqual(format_field("it's", quotechar="'"), "'it''s'")

    def test_custom_delimiter(self):
        self.assertEqual(format_row(["a;b", "c"], delimiter=";"), '"a;b";c')
        self.assertEqual(format_row(["a,b", "c"], delimiter=";"), "a,b;c")

    def test_surrounding_spaces_and_plain_values(self):
        self.assertEqual(format_field(" padded"), '" padded"')
        self.assertEqual(format_rows([["x", 1], [None, "y"]]), "x,1\r\n,y\r\n")


if __name__ == "__main__":
    unittest.main()
