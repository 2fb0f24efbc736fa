"""Turn a :class:`~mdtable.table.Table` into Markdown text."""

from __future__ import annotations

from .table import Table


def _pad(text: str, width: int, how: str) -> str:
    if how == "right":
        return text.rjust(width)
    if how == "center":
        return text.center(width)
    return text.ljust(width)


def _separator(width: int, how: str) -> str:
    if how == "right":
        return "-" * (width - 1) + ":"
    if how == "center":
        return ":" + "-" * (width - 2) + ":"
    return "-" * width


def _line(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def render(table: Table) -> str:
    """Return ``table`` as Markdown, one line per row, without a final newline."""
    widths = table.column_widths()
    count = len(widths)
    lines = [
        _line([_pad(table.headers[i], widths[i], table.alignment(i)) for i in range(count)]),
        _line([_separator(widths[i], table.alignment(i)) for i in range(count)]),
    ]
    for row in table.rows:
        cells = [_pad(row[i], widths[i], table.align.get(i, "left")) for i in range(count)]
        lines.append(_line(cells))
    return "\n".join(lines)
