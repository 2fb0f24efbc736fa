import unittest

from textstats import average_word_length, sentences, summary, top_words, words


class StatsTest(unittest.TestCase):
    def test_words_and_sentences(self):
        text = "It's a well-known café. Is it open? Yes!"
        self.assertEqual(words(text), ["It's", "a", "well-known", "café", "Is", "it", "open", "Yes"])
        self.assertEqual(len(sentences(text)), 3)

    def test_average_word_length(self):
        self.assertAlmostEqual(average_word_length("ab abcd"), 3.0)
        self.assertEqual(average_word_length("123 ..."), 0.0)

    def test_top_words(self):
        text = "red green red blue green red"
        self.assertEqual(top_words(text, n=2), [("red", 3), ("green", 2)])

    def test_summary_counts(self):
        result = summary("one two. three")
        self.assertEqual(result["words"], 3)
        self.assertEqual(result["sentences"], 2)


if __name__ == "__main__":
    unittest.main()
