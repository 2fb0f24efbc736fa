"""The table model: headers, rows and column alignment."""

from __future__ import annotations

ALIGNMENTS = ("left", "right", "center")

MIN_WIDTH = 3


def _cell(value: object) -> str:
    """Convert a value to cell text; pipes are escaped, newlines flattened."""
    if value is None:
        return ""
    return str(value).replace("|", "\\|").replace("\n", " ")


class Table:
    """A table with named columns.

    ``align`` maps a column header to one of :data:`ALIGNMENTS`; columns not
    mentioned are left-aligned.
    """

    def __init__(self, headers, align=None):
        self.headers = [_cell(h) for h in headers]
        if not self.headers:
            raise ValueError("a table needs at least one column")
        self.align: dict[str, str] = {}
        for name, how in (align or {}).items():
            if name not in self.headers:
                raise KeyError(f"unknown column: {name!r}")
            if how not in ALIGNMENTS:
                raise ValueError(f"alignment must be one of {ALIGNMENTS}, not {how!r}")
            self.align[name] = how
        self.rows: list[list[str]] = []

    def add_row(self, *cells) -> None:
        """Append a row; missing trailing cells are left empty."""
        if len(cells) > len(self.headers):
            raise ValueError(f"row has {len(cells)} cells, table has {len(self.headers)} columns")
        row = [_cell(c) for c in cells]
        row.extend("" for _ in range(len(self.headers) - len(row)))
        self.rows.append(row)

    def alignment(self, column: int) -> str:
        """Return the alignment of the column at index ``column``."""
        return self.align.get(self.headers[column], "left")

    def column_widths(self) -> list[int]:
        """Width of each column: its longest cell, at least ``MIN_WIDTH``."""
        widths = [max(MIN_WIDTH, len(h)) for h in self.headers]
        for row in self.rows:
            for i, cell in enumerate(row):
                widths[i] = max(widths[i], len(cell))
        return widths
