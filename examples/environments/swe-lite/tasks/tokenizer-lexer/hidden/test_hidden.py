import unittest

from lexer import Kind, LexError, Lexer


class HiddenLexerTest(unittest.TestCase):
    def test_reused_lexer_starts_at_line_one(self):
        lexer = Lexer()
        lexer.tokenize("a = 1\nb = 2\n")
        tokens = lexer.tokenize("c = 3")
        self.assertEqual([t.line for t in tokens], [1, 1, 1, 1])
        self.assertEqual([t.column for t in tokens], [1, 3, 5, 6])

    def test_reused_lexer_reports_error_on_right_line(self):
        lexer = Lexer()
        lexer.tokenize("x\ny\nz\n")
        with self.assertRaises(LexError) as ctx:
            lexer.tokenize("ok\nbad ?")
        self.assertEqual((ctx.exception.line, ctx.exception.column), (2, 5))

    def test_same_result_on_every_call(self):
        lexer = Lexer()
        source = "fn f(a, b)\n  return a -> b\n"
        first = lexer.tokenize(source)
        second = lexer.tokenize(source)
        self.assertEqual(first, second)
        self.assertEqual(second, Lexer().tokenize(source))

    def test_fresh_lexer_multiline_positions(self):
        tokens = Lexer().tokenize('if x >= 10\n  s = "hi" # note\nreturn s')
        got = [(t.kind, t.text, t.line, t.column) for t in tokens if t.kind is not Kind.NEWLINE]
        self.assertIn((Kind.OP, ">=", 1, 6), got)
        self.assertIn((Kind.STRING, '"hi"', 2, 7), got)
        self.assertIn((Kind.KEYWORD, "return", 3, 1), got)
        self.assertEqual(got[-1][0], Kind.EOF)

    def test_custom_keywords(self):
        tokens = Lexer(keywords={"print"}).tokenize("print let")
        self.assertEqual([t.kind for t in tokens], [Kind.KEYWORD, Kind.IDENT, Kind.EOF])

    def test_unterminated_string(self):
        with self.assertRaises(LexError) as ctx:
            Lexer().tokenize('x = "abc\ny')
        self.assertEqual(ctx.exception.line, 1)


if __name__ == "__main__":
    unittest.main()
