import unittest

from lrucache import LRUCache


class HiddenLRUCacheTests(unittest.TestCase):
    def test_cache_usable_after_clear(self):
        cache = LRUCache(3)
        for key in "abc":
            cache.put(key, key.upper())
        cache.clear()
        cache.put("d", "D")
        self.assertEqual(cache.get("d"), "D")

    def test_full_capacity_after_clear(self):
        cache = LRUCache(3)
        for key in "abc":
            cache.put(key, 0)
        cache.clear()
        for key in "xyz":
            cache.put(key, 0)
        self.assertEqual(cache.keys(), ["x", "y", "z"])
        self.assertEqual(cache.stats.evictions, 0)

    def test_weight_after_clear(self):
        cache = LRUCache(20, weigher=len)
        cache.put("k1", "0123456789")
        cache.put("k2", "01234")
        cache.clear()
        self.assertEqual(cache.total_weight, 0)
        cache.put("k3", "0123456789abcdef")
        self.assertIn("k3", cache)

    def test_clear_keeps_statistics(self):
        cache = LRUCache(2)
        cache.put("a", 1)
        cache.get("a")
        cache.get("missing")
        cache.clear()
        self.assertEqual((cache.stats.hits, cache.stats.misses), (1, 1))

    def test_replacing_a_key_updates_weight(self):
        cache = LRUCache(10, weigher=len)
        cache.put("a", "1234")
        cache.put("a", "12")
        self.assertEqual(cache.total_weight, 2)
        self.assertEqual(len(cache), 1)

    def test_pop_and_oversized_value(self):
        cache = LRUCache(5, weigher=len)
        cache.put("a", "abc")
        self.assertEqual(cache.pop("a"), "abc")
        self.assertEqual(cache.total_weight, 0)
        with self.assertRaises(ValueError):
            cache.put("b", "abcdef")


if __name__ == "__main__":
    unittest.main()
