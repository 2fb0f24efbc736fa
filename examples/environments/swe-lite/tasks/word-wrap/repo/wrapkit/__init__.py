"""wrapkit: greedy word wrapping and justification for plain text."""

from .justify import justify
from .wrap import fill, wrap

__all__ = ["fill", "justify", "wrap"]
