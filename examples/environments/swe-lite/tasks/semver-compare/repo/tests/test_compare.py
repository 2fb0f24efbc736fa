import unittest

from semverlite import VersionError, compare, latest, parse, sort_versions


class CompareTests(unittest.TestCase):
    def test_core_numbers_are_numeric(self):
        self.assertEqual(compare("1.10.0", "1.9.0"), 1)
        self.assertEqual(compare("2.0.0", "10.0.0"), -1)

    def test_prerelease_is_lower_than_release(self):
        self.assertEqual(compare("1.0.0-alpha", "1.0.0"), -1)

    def test_sort_and_latest(self):
        versions = ["1.0.0", "0.1.0", "1.0.0-beta", "0.10.0"]
        self.assertEqual(sort_versions(versions), ["0.1.0", "0.10.0", "1.0.0-beta", "1.0.0"])
        self.assertEqual(latest(versions), "1.0.0")

    def test_invalid_version(self):
        with self.assertRaises(VersionError):
            parse("1.0")


if __name__ == "__main__":
    unittest.main()
