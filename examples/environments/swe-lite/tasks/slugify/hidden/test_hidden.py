import unittest

from slugkit import slugify, unique_slug


class HiddenSlugTests(unittest.TestCase):
    def test_capitalised_stopwords_removed(self):
        self.assertEqual(slugify("The Lord of the Rings", stopwords=("the", "of")), "lord-rings")

    def test_upper_case_stopword(self):
        self.assertEqual(slugify("A TALE OF TWO CITIES", stopwords=["a", "of"]), "tale-two-cities")

    def test_stopwords_with_max_length(self):
        self.assertEqual(
            slugify("The Quick Guide To Python", stopwords={"the", "to"}, max_length=11),
            "quick-guide",
        )

    def test_lowercase_stopwords_still_removed(self):
        self.assertEqual(slugify("war and peace", stopwords={"and"}), "war-peace")

    def test_only_stopwords_keeps_words(self):
        self.assertEqual(slugify("the of", stopwords={"the", "of"}), "the-of")

    def test_max_length_cuts_at_word_boundary(self):
        self.assertEqual(slugify("alpha beta gamma", max_length=12), "alpha-beta")
        self.assertEqual(slugify("supercalifragilistic", max_length=5), "super")

    def test_unique_slug_without_collision(self):
        self.assertEqual(unique_slug("Straße & Co", existing=[]), "strasse-and-co")


if __name__ == "__main__":
    unittest.main()
