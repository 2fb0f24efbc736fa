"""The priority queue."""

from __future__ import annotations

import heapq
import itertools
from typing import Any, Iterator

from .entry import Entry


class EmptyQueueError(IndexError):
    """Raised when popping or peeking an empty queue."""


class PriorityQueue:
    """A min-priority queue that is stable for equal priorities.

    With ``largest_first=True`` the highest priority is served first instead.
    Ties are always broken by insertion order (first in, first out).
    """

    def __init__(self, largest_first: bool = False):
        self.largest_first = largest_first
        self._heap: list[Entry] = []
        self._counter = itertools.count()

    def _stored(self, priority: float) -> float:
        return -priority if self.largest_first else priority

    def push(self, item: Any, priority: float = 0) -> None:
        """Add ``item`` with the given ``priority``."""
        entry = Entry(self._stored(priority), next(self._counter), item)
        heapq.heappush(self._heap, entry)

    def pop(self) -> Any:
        """Remove and return the next item."""
        if not self._heap:
            raise EmptyQueueError("pop from an empty priority queue")
        return heapq.heappop(self._heap).item

    def peek(self) -> Any:
        """Return the next item without removing it."""
        if not self._heap:
            raise EmptyQueueError("peek at an empty priority queue")
        return self._heap[0].item

    def peek_priority(self) -> float:
        """Return the priority of the next item."""
        if not self._heap:
            raise EmptyQueueError("peek at an empty priority queue")
        return self._stored(self._heap[0].priority)

    def drain(self) -> Iterator[Any]:
        """Pop items until the queue is empty."""
        while self._heap:
            yield self.pop()

    def __len__(self) -> int:
        return len(self._heap)

    def __bool__(self) -> bool:
        return bool(self._heap)
