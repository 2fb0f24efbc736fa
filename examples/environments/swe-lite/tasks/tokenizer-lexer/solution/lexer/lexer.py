"""The lexer itself: turns source text into a list of tokens."""

from __future__ import annotations

from .tokens import Kind, Token

DEFAULT_KEYWORDS = frozenset({"let", "if", "else", "while", "fn", "return"})

# Longest operators first so that "==" wins over "=".
OPERATORS = ("==", "!=", "<=", ">=", "->", "+", "-", "*", "/", "=", "<", ">", "(", ")", ",")


class LexError(Exception):
    """Raised on input the lexer cannot make sense of."""

    def __init__(self, message: str, line: int, column: int):
        super().__init__(f"{line}:{column}: {message}")
        self.line = line
        self.column = column


class Lexer:
    """Converts source text into tokens.

    A ``Lexer`` can be reused: each call to :meth:`tokenize` lexes an
    independent piece of source, with positions starting at line 1, column 1.
    """

    def __init__(self, keywords=DEFAULT_KEYWORDS):
        self.keywords = frozenset(keywords)
        self._source = ""
        self._pos = 0
        self._line = 1
        self._line_start = 0

    def tokenize(self, source: str) -> list[Token]:
        """Return all tokens in ``source``, ending with an ``EOF`` token."""
        self._source = source
        self._pos = 0
        self._line = 1
        self._line_start = 0
        tokens = []
        while True:
            token = self._next_token()
            tokens.append(token)
            if token.kind is Kind.EOF:
                return tokens

    def _column(self) -> int:
        return self._pos - self._line_start + 1

    def _make(self, kind: Kind, start: int) -> Token:
        column = start - self._line_start + 1
        return Token(kind, self._source[start:self._pos], self._line, column)

    def _next_token(self) -> Token:
        src = self._source
        while self._pos < len(src) and src[self._pos] in " \t\r":
            self._pos += 1
        if self._pos < len(src) and src[self._pos] == "#":
            while self._pos < len(src) and src[self._pos] != "\n":
                self._pos += 1
        start = self._pos
        if start >= len(src):
            return Token(Kind.EOF, "", self._line, self._column())
        ch = src[start]
        if ch == "\n":
            self._pos += 1
            token = self._make(Kind.NEWLINE, start)
            self._line += 1
            self._line_start = self._pos
            return token
        if ch.isdigit():
            while self._pos < len(src) and (src[self._pos].isdigit() or src[self._pos] == "."):
                self._pos += 1
            return self._make(Kind.NUMBER, start)
        if ch.isalpha() or ch == "_":
            while self._pos < len(src) and (src[self._pos].isalnum() or src[self._pos] == "_"):
                self._pos += 1
            kind = Kind.KEYWORD if src[start:self._pos] in self.keywords else Kind.IDENT
            return self._make(kind, start)
        if ch == '"':
            end = src.find('"', start + 1)
            if end == -1 or "\n" in src[start:end]:
                raise LexError("unterminated string", self._line, self._column())
            self._pos = end + 1
            return self._make(Kind.STRING, start)
        for op in OPERATORS:
            if src.startswith(op, start):
                self._pos += len(op)
                return self._make(Kind.OP, start)
        raise LexError(f"unexpected character {ch!r}", self._line, self._column())
