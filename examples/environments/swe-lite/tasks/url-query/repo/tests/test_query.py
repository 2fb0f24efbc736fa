import unittest

from urlquery import add_params, build_query, parse_query


class QueryTest(unittest.TestCase):
    def test_parse_simple(self):
        self.assertEqual(
            parse_query("?q=green+tea&page=2&tag=a&tag=b"),
            {"q": ["green tea"], "page": ["2"], "tag": ["a", "b"]},
        )

    def test_build_escapes_reserved_characters(self):
        self.assertEqual(build_query({"q": "a&b=c", "n": 1}), "q=a%26b%3Dc&n=1")

    def test_add_params(self):
        self.assertEqual(add_params("/search?q=x#top", {"page": 2}), "/search?q=x&page=2#top")

    def test_parse_accented_value(self):
        self.assertEqual(parse_query("city=Z%C3%BCrich"), {"city": ["Zürich"]})


if __name__ == "__main__":
    unittest.main()
