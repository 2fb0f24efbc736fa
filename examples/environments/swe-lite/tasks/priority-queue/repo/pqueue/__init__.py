"""A stable priority queue.

Example::

    from pqueue import PriorityQueue

    q = PriorityQueue()
    q.push("write report", priority=2)
    q.push("fix outage", priority=0)
    q.pop()   # "fix outage"
"""

from .entry import Entry
from .heap import EmptyQueueError, PriorityQueue

__all__ = ["EmptyQueueError", "Entry", "PriorityQueue"]
