"""Render data as Markdown tables.

Example::

    from mdtable import Table, render

    table = Table(["name", "qty"], align={"qty": "right"})
    table.add_row("apple", 3)
    print(render(table))
"""

from .render import render
from .table import ALIGNMENTS, Table

__all__ = ["ALIGNMENTS", "Table", "render"]
