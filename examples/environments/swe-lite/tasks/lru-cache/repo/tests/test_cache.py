import unittest

from lrucache import LRUCache


class LRUCacheTests(unittest.TestCase):
    def test_evicts_least_recently_used(self):
        cache = LRUCache(2)
        cache.put("a", 1)
        cache.put("b", 2)
        cache.get("a")
        cache.put("c", 3)
        self.assertEqual(cache.keys(), ["a", "c"])

    def test_weigher_limits_total_size(self):
        cache = LRUCache(10, weigher=len)
        cache.put("x", "12345")
        cache.put("y", "123456")
        self.assertNotIn("x", cache)
        self.assertEqual(cache.total_weight, 6)

    def test_clear_empties_cache(self):
        cache = LRUCache(3)
        cache.put("a", 1)
        cache.clear()
        self.assertEqual(len(cache), 0)
        self.assertIsNone(cache.get("a"))


if __name__ == "__main__":
    unittest.main()
