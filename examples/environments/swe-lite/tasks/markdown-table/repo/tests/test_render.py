import unittest

from mdtable import Table, render


class RenderTest(unittest.TestCase):
    def test_left_aligned_table(self):
        table = Table(["name", "qty"])
        table.add_row("apple", 3)
        table.add_row("kiwi", 12)
        self.assertEqual(
            render(table),
            "| name  | qty |\n"
            "| ----- | --- |\n"
            "| apple | 3   |\n"
            "| kiwi  | 12  |",
        )

    def test_separator_marks_alignment(self):
        table = Table(["a", "b", "c"], align={"b": "right", "c": "center"})
        separator = render(table).splitlines()[1]
        self.assertEqual(separator, "| --- | --: | :-: |")

    def test_pipes_are_escaped(self):
        table = Table(["expr"])
        table.add_row("a|b")
        self.assertEqual(render(table).splitlines()[2], "| a\\|b |")


if __name__ == "__main__":
    unittest.main()
