"""slugkit: turn titles into URL-friendly slugs."""

from .slug import slugify, unique_slug
from .text import fold_to_ascii, split_words

__all__ = ["fold_to_ascii", "slugify", "split_words", "unique_slug"]
