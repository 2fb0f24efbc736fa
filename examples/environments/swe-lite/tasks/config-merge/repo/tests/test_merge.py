import unittest

from confmerge import deep_merge, parse_overrides


class MergeTest(unittest.TestCase):
    def test_nested_merge(self):
        base = {"db": {"host": "localhost", "port": 5432}, "debug": False}
        merged = deep_merge(base, {"db": {"port": 5433}})
        self.assertEqual(merged, {"db": {"host": "localhost", "port": 5433}, "debug": False})

    def test_parse_overrides(self):
        self.assertEqual(
            parse_overrides(["db.port=5433", "debug=true", "name=api"]),
            {"db": {"port": 5433}, "debug": True, "name": "api"},
        )

    def test_base_is_not_modified(self):
        defaults = {"db": {"host": "localhost", "port": 5432}}
        deep_merge(defaults, {"db": {"port": 6000}})
        self.assertEqual(defaults, {"db": {"host": "localhost", "port": 5432}})


if __name__ == "__main__":
    unittest.main()
