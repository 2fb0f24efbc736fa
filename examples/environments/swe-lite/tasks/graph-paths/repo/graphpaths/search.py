"""Path queries over :class:`~graphpaths.graph.Graph`."""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable

from .graph import Graph


def _dfs(graph: Graph, node: Hashable, goal: Hashable, visited: set, path: list):
    if node == goal:
        return list(path)
    for nxt in graph.neighbors(node):
        if nxt in visited:
            continue
        visited.add(nxt)
        path.append(nxt)
        return _dfs(graph, nxt, goal, visited, path)
    return None


def find_path(graph: Graph, start: Hashable, goal: Hashable) -> list | None:
    """Return some path from ``start`` to ``goal`` as a list of nodes.

    The path is found by depth-first search and is not necessarily the
    shortest. Returns ``None`` if ``goal`` cannot be reached. Raises
    ``KeyError`` if either node is not in the graph.
    """
    if goal not in graph:
        raise KeyError(goal)
    return _dfs(graph, start, goal, {start}, [start])


def has_path(graph: Graph, start: Hashable, goal: Hashable) -> bool:
    """Return True if ``goal`` can be reached from ``start``."""
    return find_path(graph, start, goal) is not None


def shortest_path(graph: Graph, start: Hashable, goal: Hashable) -> list | None:
    """Return a path with the fewest edges, or ``None`` if there is none."""
    if goal not in graph:
        raise KeyError(goal)
    parents = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if node == goal:
            path = [node]
            while path[-1] != start:
                path.append(parents[path[-1]])
            return path[::-1]
        for nxt in graph.neighbors(node):
            if nxt not in parents:
                parents[nxt] = node
                queue.append(nxt)
    return None


def reachable(graph: Graph, start: Hashable) -> set:
    """Return every node reachable from ``start``, including ``start``."""
    seen = {start}
    stack = [start]
    while stack:
        for nxt in graph.neighbors(stack.pop()):
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return seen
