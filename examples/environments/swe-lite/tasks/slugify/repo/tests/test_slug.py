import unittest

from slugkit import slugify, unique_slug


class SlugifyTests(unittest.TestCase):
    def test_punctuation_and_accents(self):
        self.assertEqual(slugify("Crème Brûlée, again!"), "creme-brulee-again")

    def test_custom_separator(self):
        self.assertEqual(slugify("Hello big World", separator="_"), "hello_big_world")

    def test_unique_slug_adds_suffix(self):
        self.assertEqual(unique_slug("Hello", {"hello", "hello-2"}), "hello-3")

    def test_stopwords_in_title_case(self):
        self.assertEqual(slugify("The Art of War", stopwords={"the", "of"}), "art-war")


if __name__ == "__main__":
    unittest.main()
