import unittest

from graphpaths import Graph, find_path, reachable, shortest_path


class SearchTest(unittest.TestCase):
    def test_chain(self):
        g = Graph.from_edges([("a", "b"), ("b", "c"), ("c", "d")])
        self.assertEqual(find_path(g, "a", "d"), ["a", "b", "c", "d"])

    def test_shortest_path_prefers_fewer_edges(self):
        g = Graph.from_edges([("a", "b"), ("b", "c"), ("c", "d"), ("a", "d")])
        self.assertEqual(shortest_path(g, "a", "d"), ["a", "d"])

    def test_reachable(self):
        g = Graph.from_edges([("a", "b"), ("b", "a"), ("c", "a")])
        self.assertEqual(reachable(g, "a"), {"a", "b"})

    def test_path_around_dead_end(self):
        g = Graph.from_edges([("home", "attic"), ("home", "hall"), ("hall", "garden")])
        self.assertEqual(find_path(g, "home", "garden"), ["home", "hall", "garden"])


if __name__ == "__main__":
    unittest.main()
