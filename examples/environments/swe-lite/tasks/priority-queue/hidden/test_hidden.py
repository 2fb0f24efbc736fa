import unittest

from pqueue import EmptyQueueError, PriorityQueue


class Job:
    def __init__(self, name):
        self.name = name


class HiddenQueueTest(unittest.TestCase):
    def test_ties_keep_insertion_order(self):
        q = PriorityQueue()
        for name in ["zeta", "alpha", "mu", "beta"]:
            q.push(name, 5)
        q.push("urgent", 0)
        self.assertEqual(list(q.drain()), ["urgent", "zeta", "alpha", "mu", "beta"])

    def test_unorderable_items_with_equal_priority(self):
        q = PriorityQueue()
        q.push({"id": 1}, 2)
        q.push({"id": 2}, 2)
        q.push({"id": 3}, 1)
        self.assertEqual([d["id"] for d in q.drain()], [3, 1, 2])

    def test_objects_without_ordering(self):
        q = PriorityQueue()
        jobs = [Job(f"job{i}") for i in range(6)]
        for job in jobs:
            q.push(job, priority=1)
        self.assertEqual([j.name for j in q.drain()], [j.name for j in jobs])

    def test_largest_first_is_stable(self):
        q = PriorityQueue(largest_first=True)
        q.push("b-low", 1)
        q.push("b-high", 9)
        q.push("a-high", 9)
        q.push("a-low", 1)
        self.assertEqual(q.peek_priority(), 9)
        self.assertEqual(list(q.drain()), ["b-high", "a-high", "b-low", "a-low"])

    def test_peek_does_not_remove(self):
        q = PriorityQueue()
        q.push("x", 3)
        q.push("y", 1)
        self.assertEqual(q.peek(), "y")
        self.assertEqual(q.peek_priority(), 1)
        self.assertEqual(len(q), 2)
        self.assertEqual(q.pop(), "y")

    def test_mixed_priorities_order(self):
        q = PriorityQueue()
        for i, prio in enumerate([5, 3, 8, 1, 9, 2]):
            q.push(i, prio)
        self.assertEqual(list(q.drain()), [3, 5, 1, 0, 2, 4])
        with self.assertRaises(EmptyQueueError):
            q.peek()


if __name__ == "__main__":
    unittest.main()
