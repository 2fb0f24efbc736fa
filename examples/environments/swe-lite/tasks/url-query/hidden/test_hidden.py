import unittest

from urlquery import build_query, parse_query, quote, unquote


class HiddenQueryTest(unittest.TestCase):
    def test_unquote_multibyte_utf8(self):
        self.assertEqual(unquote("caf%C3%A9"), "café")
        self.assertEqual(unquote("%E2%82%AC5"), "€5")
        self.assertEqual(unquote("%F0%9F%8D%B5"), "\U0001F375")

    def test_round_trip_non_ascii(self):
        params = {"name": "Søren Kierkegaard", "city": "東京", "note": "naïve & co"}
        parsed = parse_query(build_query(params))
        self.assertEqual(parsed, {k: [v] for k, v in params.items()})

    def test_unescaped_non_ascii_is_kept(self):
        self.assertEqual(parse_query("q=crème+brûlée"), {"q": ["crème brûlée"]})

    def test_non_ascii_keys(self):
        self.assertEqual(parse_query("gr%C3%B6%C3%9Fe=42"), {"größe": ["42"]})

    def test_quote_encodes_utf8(self):
        self.assertEqual(quote("é"), "%C3%A9")
        self.assertEqual(quote("a b/c"), "a+b%2Fc")
        self.assertEqual(quote("a b", space_as_plus=False), "a%20b")

    def test_ascii_decoding_and_malformed_escapes(self):
        self.assertEqual(unquote("100%25+sure"), "100% sure")
        self.assertEqual(unquote("50%zz%"), "50%zz%")
        self.assertEqual(unquote("a+b", plus_as_space=False), "a+b")

    def test_build_query_value_types(self):
        self.assertEqual(
            build_query({"a": True, "b": None, "c": [1, 2], "d": 2.5}),
            "a=true&c=1&c=2&d=2.5",
        )
        self.assertEqual(parse_query("flag&x="), {"flag": [""], "x": [""]})


if __name__ == "__main__":
    unittest.main()
