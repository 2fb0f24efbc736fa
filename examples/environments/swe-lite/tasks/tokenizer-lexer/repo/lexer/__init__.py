"""Lexer for a toy expression language.

Example::

    from lexer import Lexer

    tokens = Lexer().tokenize("let x = 1 + 2")
"""

from .lexer import DEFAULT_KEYWORDS, LexError, Lexer
from .tokens import Kind, Token

__all__ = ["DEFAULT_KEYWORDS", "Kind", "LexError", "Lexer", "Token"]
