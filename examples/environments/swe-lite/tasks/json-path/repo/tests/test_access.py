import unittest

from jpath import get_path, parse_path, set_path


class AccessTests(unittest.TestCase):
    def setUp(self):
        self.doc = {"servers": [{"name": "a", "ports": {"http": 80}}]}

    def test_parse_path(self):
        self.assertEqual(parse_path("servers[0].ports.http"), ["servers", 0, "ports", "http"])

    def test_get_with_default(self):
        self.assertEqual(get_path(self.doc, "servers[0].ports.http"), 80)
        self.assertEqual(get_path(self.doc, "servers[5].name", "none"), "none")

    def test_set_existing_value(self):
        set_path(self.doc, "servers[0].ports.http", 8080)
        self.assertEqual(self.doc["servers"][0]["ports"]["http"], 8080)

    def test_set_creates_missing_parents(self):
        set_path(self.doc, "logging.level", "debug")
        self.assertEqual(self.doc["logging"], {"level": "debug"})


if __name__ == "__main__":
    unittest.main()
