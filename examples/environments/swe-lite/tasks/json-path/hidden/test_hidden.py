import unittest

from jpath import PathSyntaxError, delete_path, get_path, parse_path, set_path


class HiddenJPathTests(unittest.TestCase):
    def test_set_builds_nested_dicts(self):
        doc = {}
        result = set_path(doc, "a.b.c", 1)
        self.assertEqual(doc, {"a": {"b": {"c": 1}}})
        self.assertIs(result, doc)

    def test_set_extends_partial_path_inside_list(self):
        doc = {"servers": [{"name": "web"}]}
        set_path(doc, "servers[0].tls.cert", "/etc/cert.pem")
        self.assertEqual(doc["servers"][0], {"name": "web", "tls": {"cert": "/etc/cert.pem"}})

    def test_created_value_is_readable(self):
        doc = {"x": 1}
        set_path(doc, "deep.er.est", [1, 2])
        self.assertEqual(get_path(doc, "deep.er.est[1]"), 2)

    def test_explicit_create_false_raises(self):
        doc = {"a": {}}
        with self.assertRaises(KeyError):
            set_path(doc, "a.b.c", 1, create=False)
        self.assertEqual(doc, {"a": {}})

    def test_list_indices_are_not_created(self):
        doc = {"items": [1, 2]}
        with self.assertRaises(IndexError):
            set_path(doc, "items[5]", 3)
        set_path(doc, "items[-1]", 9)
        self.assertEqual(doc, {"items": [1, 9]})

    def test_get_and_delete(self):
        doc = {"a": [{"b": None}], "c": 3}
        self.assertIsNone(get_path(doc, "a[0].b", "fallback"))
        self.assertEqual(get_path(doc, "c.d", "fallback"), "fallback")
        self.assertEqual(delete_path(doc, "c"), 3)
        self.assertEqual(doc, {"a": [{"b": None}]})

    def test_path_syntax(self):
        self.assertEqual(parse_path(""), [])
        self.assertEqual(parse_path("[0][1].k"), [0, 1, "k"])
        for bad in ("a..b", "a.", ".a", "a[x]"):
            with self.assertRaises(PathSyntaxError):
                parse_path(bad)


if __name__ == "__main__":
    unittest.main()
