import unittest

from mdtable import Table, render


class HiddenRenderTest(unittest.TestCase):
    def test_right_aligned_body_cells(self):
        table = Table(["item", "price"], align={"price": "right"})
        table.add_row("tea", "1.50")
        table.add_row("cake", "12.00")
        self.assertEqual(
            render(table),
            "| item | price |\n"
            "| ---- | ----: |\n"
            "| tea  |  1.50 |\n"
            "| cake | 12.00 |",
        )

    def test_center_aligned_body_cells(self):
        table = Table(["k", "mark"], align={"mark": "center"})
        table.add_row("a", "x")
        self.assertEqual(render(table).splitlines()[2], "| a   |  x   |")

    def test_alignment_follows_column_name_not_position(self):
        table = Table(["first", "second"], align={"first": "right"})
        table.add_row("1", "2")
        self.assertEqual(render(table).splitlines()[2], "|     1 | 2      |")

    def test_header_uses_alignment(self):
        table = Table(["n", "value"], align={"n": "right"})
        table.add_row("12345", "x")
        self.assertEqual(render(table).splitlines()[0], "|     n | value |")

    def test_missing_cells_and_widths(self):
        table = Table(["a", "b", "c"])
        table.add_row("long text")
        self.assertEqual(
            render(table).splitlines()[2], "| long text |     |     |"
        )
        self.assertEqual(table.column_widths(), [9, 3, 3])

    def test_invalid_alignment(self):
        with self.assertRaises(KeyError):
            Table(["a"], align={"b": "left"})
        with self.assertRaises(ValueError):
            Table(["a"], align={"a": "justify"})


if __name__ == "__main__":
    unittest.main()
