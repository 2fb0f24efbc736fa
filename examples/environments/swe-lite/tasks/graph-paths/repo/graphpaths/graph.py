"""A minimal directed graph backed by adjacency lists."""

from __future__ import annotations

from collections.abc import Hashable, Iterable


class Graph:
    """A directed graph.

    Neighbours are kept in the order their edges were added, which makes the
    search functions deterministic.
    """

    def __init__(self) -> None:
        self._adj: dict[Hashable, list[Hashable]] = {}

    @classmethod
    def from_edges(cls, edges: Iterable[tuple[Hashable, Hashable]]) -> "Graph":
        """Build a graph from ``(source, target)`` pairs."""
        graph = cls()
        for source, target in edges:
            graph.add_edge(source, target)
        return graph

    def add_node(self, node: Hashable) -> None:
        """Add ``node`` if it is not already present."""
        self._adj.setdefault(node, [])

    def add_edge(self, source: Hashable, target: Hashable) -> None:
        """Add a directed edge; adding the same edge twice has no effect."""
        self.add_node(source)
        self.add_node(target)
        if target not in self._adj[source]:
            self._adj[source].append(target)

    def has_edge(self, source: Hashable, target: Hashable) -> bool:
        return target in self._adj.get(source, ())

    def neighbors(self, node: Hashable) -> list[Hashable]:
        """Return the direct successors of ``node``."""
        if node not in self._adj:
            raise KeyError(node)
        return list(self._adj[node])

    def nodes(self) -> list[Hashable]:
        return list(self._adj)

    def __contains__(self, node: object) -> bool:
        return node in self._adj

    def __len__(self) -> int:
        return len(self._adj)
