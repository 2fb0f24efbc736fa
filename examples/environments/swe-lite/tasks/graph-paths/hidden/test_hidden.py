import unittest

from graphpaths import Graph, find_path, has_path, shortest_path


def assert_valid_path(test, graph, path, start, goal):
    test.assertIsNotNone(path)
    test.assertEqual(path[0], start)
    test.assertEqual(path[-1], goal)
    test.assertEqual(len(path), len(set(path)), "path revisits a node")
    for a, b in zip(path, path[1:]):
        test.assertTrue(graph.has_edge(a, b), f"no edge {a!r} -> {b!r}")


class HiddenSearchTest(unittest.TestCase):
    def test_path_found_after_several_dead_ends(self):
        g = Graph.from_edges(
            [(1, 2), (2, 3), (1, 4), (4, 5), (1, 6), (6, 7), (7, 8)]
        )
        assert_valid_path(self, g, find_path(g, 1, 8), 1, 8)

    def test_has_path_explores_every_branch(self):
        g = Graph.from_edges([("s", "x"), ("x", "y"), ("s", "t")])
        self.assertTrue(has_path(g, "s", "t"))
        self.assertFalse(has_path(g, "t", "s"))

    def test_path_through_cycle(self):
        g = Graph.from_edges([("a", "b"), ("b", "a"), ("a", "c"), ("c", "d")])
        assert_valid_path(self, g, find_path(g, "a", "d"), "a", "d")

    def test_returned_path_uses_real_edges(self):
        g = Graph.from_edges([("r", "a"), ("a", "a1"), ("r", "b"), ("b", "b1"), ("b", "goal")])
        assert_valid_path(self, g, find_path(g, "r", "goal"), "r", "goal")

    def test_no_path_returns_none(self):
        g = Graph.from_edges([("a", "b"), ("c", "d")])
        self.assertIsNone(find_path(g, "a", "d"))
        self.assertIsNone(shortest_path(g, "a", "d"))

    def test_trivial_and_missing_nodes(self):
        g = Graph.from_edges([("a", "b")])
        self.assertEqual(find_path(g, "a", "a"), ["a"])
        with self.assertRaises(KeyError):
            find_path(g, "a", "zzz")

    def test_shortest_path_on_grid(self):
        edges = []
        for x in range(3):
            for y in range(3):
                if x < 2:
                    edges.append(((x, y), (x + 1, y)))
                if y < 2:
                    edges.append(((x, y), (x, y + 1)))
        g = Graph.from_edges(edges)
        path = shortest_path(g, (0, 0), (2, 2))
        assert_valid_path(self, g, path, (0, 0), (2, 2))
        self.assertEqual(len(path), 5)


if __name__ == "__main__":
    unittest.main()
