"""minicsv: a tiny CSV writer and reader with RFC 4180 style quoting."""

from .reader import CSVError, parse_line
from .writer import format_field, format_row, format_rows

__all__ = ["CSVError", "format_field", "format_row", "format_rows", "parse_line"]
