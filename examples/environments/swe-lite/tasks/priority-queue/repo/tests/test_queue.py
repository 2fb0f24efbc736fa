import unittest

from pqueue import EmptyQueueError, PriorityQueue


class QueueTest(unittest.TestCase):
    def test_lowest_priority_first(self):
        q = PriorityQueue()
        for item, prio in [("c", 3), ("a", 1), ("b", 2)]:
            q.push(item, prio)
        self.assertEqual(list(q.drain()), ["a", "b", "c"])

    def test_empty_queue(self):
        q = PriorityQueue()
        self.assertFalse(q)
        with self.assertRaises(EmptyQueueError):
            q.pop()

    def test_equal_priorities_are_fifo(self):
        q = PriorityQueue()
        q.push("write docs", 1)
        q.push("answer email", 1)
        q.push("deploy", 1)
        self.assertEqual(list(q.drain()), ["write docs", "answer email", "deploy"])


if __name__ == "__main__":
    unittest.main()
