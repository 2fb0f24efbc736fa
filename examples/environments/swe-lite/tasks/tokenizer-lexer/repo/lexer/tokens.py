"""Token kinds and the token record produced by the lexer."""

from __future__ import annotations

import enum
from typing import NamedTuple


class Kind(enum.Enum):
    """The category of a token."""

    IDENT = "ident"
    KEYWORD = "keyword"
    NUMBER = "number"
    STRING = "string"
    OP = "op"
    NEWLINE = "newline"
    EOF = "eof"


class Token(NamedTuple):
    """A lexeme together with where it starts (1-based line and column)."""

    kind: Kind
    text: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.line}:{self.column} {self.kind.value} {self.text!r}"
