"""Directed graphs and path queries.

Example::

    from graphpaths import Graph, find_path

    g = Graph.from_edges([("a", "b"), ("b", "c")])
    find_path(g, "a", "c")   # ["a", "b", "c"]
"""

from .graph import Graph
from .search import find_path, has_path, reachable, shortest_path

__all__ = ["Graph", "find_path", "has_path", "reachable", "shortest_path"]
