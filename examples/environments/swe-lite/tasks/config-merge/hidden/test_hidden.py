import unittest

from confmerge import deep_merge, merge_all, parse_overrides


def defaults():
    return {
        "server": {"host": "0.0.0.0", "port": 8080, "tls": {"enabled": False}},
        "plugins": ["auth", "metrics"],
        "debug": False,
    }


class HiddenMergeTest(unittest.TestCase):
    def test_deeply_nested_base_untouched(self):
        base = defaults()
        deep_merge(base, {"server": {"tls": {"enabled": True, "cert": "a.pem"}}})
        self.assertEqual(base, defaults())

    def test_two_merges_from_same_defaults_are_independent(self):
        base = defaults()
        staging = deep_merge(base, {"server": {"port": 9000}})
        prod = deep_merge(base, {"server": {"host": "prod.example"}})
        self.assertEqual(staging["server"]["host"], "0.0.0.0")
        self.assertEqual(staging["server"]["port"], 9000)
        self.assertEqual(prod["server"]["port"], 8080)
        self.assertEqual(prod["server"]["host"], "prod.example")

    def test_result_shares_nothing_with_base(self):
        base = defaults()
        merged = deep_merge(base, {"debug": True})
        merged["plugins"].append("tracing")
        merged["server"]["tls"]["enabled"] = True
        self.assertEqual(base, defaults())

    def test_override_replaces_scalars_and_lists(self):
        merged = deep_merge(defaults(), {"plugins": ["auth"], "server": {"tls": None}})
        self.assertEqual(merged["plugins"], ["auth"])
        self.assertIsNone(merged["server"]["tls"])
        self.assertEqual(merged["server"]["port"], 8080)

    def test_merge_all_later_layers_win(self):
        merged = merge_all(
            defaults(),
            {"server": {"port": 1}},
            parse_overrides(["server.port=2", "server.tls.enabled=yes"]),
        )
        self.assertEqual(merged["server"]["port"], 2)
        self.assertIs(merged["server"]["tls"]["enabled"], True)
        self.assertEqual(merged["plugins"], ["auth", "metrics"])

    def test_invalid_override(self):
        with self.assertRaises(ValueError):
            parse_overrides(["no-equals-sign"])
        with self.assertRaises(ValueError):
            parse_overrides(["a..b=1"])


if __name__ == "__main__":
    unittest.main()
