import unittest

from semverlite import compare, latest, parse, sort_versions


class HiddenSemverTests(unittest.TestCase):
    def test_numeric_prerelease_identifiers(self):
        self.assertEqual(compare("1.0.0-alpha.2", "1.0.0-alpha.10"), -1)
        self.assertEqual(compare("1.0.0-rc.10", "1.0.0-rc.9"), 1)

    def test_spec_example_ordering(self):
        ordered = [
            "1.0.0-alpha",
            "1.0.0-alpha.1",
            "1.0.0-alpha.beta",
            "1.0.0-beta",
            "1.0.0-beta.2",
            "1.0.0-beta.11",
            "1.0.0-rc.1",
            "1.0.0",
        ]
        self.assertEqual(sort_versions(list(reversed(ordered))), ordered)

    def test_latest_prerelease(self):
        versions = ["2.0.0-rc.2", "2.0.0-rc.12", "1.9.0"]
        self.assertEqual(latest(versions, include_prerelease=True), "2.0.0-rc.12")
        self.assertEqual(latest(versions), "1.9.0")

    def test_numeric_identifier_below_alphanumeric(self):
        self.assertEqual(compare("1.0.0-1", "1.0.0-alpha"), -1)
        self.assertEqual(compare("1.0.0-alpha", "1.0.0-alpha.0"), -1)

    def test_build_metadata_ignored(self):
        self.assertEqual(compare("1.0.0+build.1", "1.0.0+build.2"), 0)
        self.assertEqual(compare("v1.2.3", "1.2.3+meta"), 0)
        self.assertEqual(str(parse("1.2.3-rc.1+b.7")), "1.2.3-rc.1+b.7")

    def test_core_ordering(self):
        self.assertEqual(
            sort_versions(["1.2.10", "1.2.9", "1.11.0", "0.99.99"]),
            ["0.99.99", "1.2.9", "1.2.10", "1.11.0"],
        )
        self.assertIsNone(latest([]))


if __name__ == "__main__":
    unittest.main()
