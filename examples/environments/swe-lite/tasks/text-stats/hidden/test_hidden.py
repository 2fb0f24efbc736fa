import unittest

from textstats import summary, top_words, unique_word_count, word_frequencies, words


TEXT = "The cat sat on the mat. THE END. Then the cat left."


class HiddenStatsTest(unittest.TestCase):
    def test_frequencies_ignore_case(self):
        freq = word_frequencies(TEXT)
        self.assertEqual(freq["the"], 4)
        self.assertEqual(freq["cat"], 2)
        self.assertEqual(freq["end"], 1)

    def test_frequency_keys_are_lower_case(self):
        freq = word_frequencies("Apple apple APPLE Banana")
        self.assertEqual(dict(freq), {"apple": 3, "banana": 1})

    def test_top_words_ignore_case(self):
        self.assertEqual(top_words(TEXT, n=2), [("the", 4), ("cat", 2)])
        self.assertEqual(top_words("Go go GO stop", n=1, min_length=3), [("stop", 1)])

    def test_summary_top_words(self):
        result = summary("Spam spam. SPAM eggs! Eggs and ham.")
        self.assertEqual(result["top_words"], [("spam", 3), ("eggs", 2), ("and", 1)])
        self.assertEqual(result["unique_words"], 4)

    def test_unique_word_count(self):
        self.assertEqual(unique_word_count(TEXT), 8)

    def test_words_keep_original_case(self):
        self.assertEqual(words("Hello WORLD"), ["Hello", "WORLD"])

    def test_summary_basic(self):
        result = summary("Short words here. And more!")
        self.assertEqual(result["words"], 5)
        self.assertEqual(result["sentences"], 2)
        self.assertEqual(result["average_word_length"], 4.2)


if __name__ == "__main__":
    unittest.main()
