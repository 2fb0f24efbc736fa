"""Heap entries."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(eq=False)
class Entry:
    """One queued item.

    ``seq`` is a counter assigned by the queue when the item is pushed, so
    earlier pushes have smaller ``seq`` values.
    """

    priority: float
    seq: int
    item: Any

    def sort_key(self) -> tuple:
        """The key the heap orders entries by."""
        return (self.priority, self.seq)

    def __lt__(self, other: "Entry") -> bool:
        return self.sort_key() < other.sort_key()
