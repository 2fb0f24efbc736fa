import unittest

from lexer import Kind, LexError, Lexer


class LexerTest(unittest.TestCase):
    def test_simple_expression(self):
        tokens = Lexer().tokenize("let x = 1 + 20")
        self.assertEqual(
            [(t.kind, t.text) for t in tokens],
            [
                (Kind.KEYWORD, "let"),
                (Kind.IDENT, "x"),
                (Kind.OP, "="),
                (Kind.NUMBER, "1"),
                (Kind.OP, "+"),
                (Kind.NUMBER, "20"),
                (Kind.EOF, ""),
            ],
        )

    def test_positions_across_lines(self):
        tokens = Lexer().tokenize("a\n  b == c")
        b = tokens[2]
        self.assertEqual((b.text, b.line, b.column), ("b", 2, 3))

    def test_unexpected_character(self):
        with self.assertRaises(LexError) as ctx:
            Lexer().tokenize("x = $")
        self.assertEqual((ctx.exception.line, ctx.exception.column), (1, 5))


if __name__ == "__main__":
    unittest.main()
