import unittest

from rle import MAX_RUN, decode, decode_text, encode, encode_text


class HiddenCodecTest(unittest.TestCase):
    def test_run_one_longer_than_max(self):
        self.assertEqual(encode(b"z" * 256), bytes([255]) + b"z" + bytes([1]) + b"z")

    def test_long_run_round_trip(self):
        for length in (256, 300, 511, 1000):
            data = b"\x07" * length
            self.assertEqual(decode(encode(data)), data, f"length {length}")

    def test_counts_never_exceed_max_run(self):
        data = b"a" * 700 + b"b" + b"c" * 256
        packed = encode(data)
        counts = packed[0::2]
        self.assertTrue(all(1 <= c <= MAX_RUN for c in counts))
        self.assertEqual(sum(counts), len(data))
        self.assertEqual(decode(packed), data)

    def test_run_of_exactly_max(self):
        self.assertEqual(encode(b"q" * 255), bytes([255]) + b"q")
        self.assertEqual(encode(b"q" * 254 + b"r"), bytes([254]) + b"q" + bytes([1]) + b"r")

    def test_decode_errors(self):
        with self.assertRaises(ValueError):
            decode(b"\x00a")
        with self.assertRaises(ValueError):
            decode(b"\x03")

    def test_text_codec(self):
        self.assertEqual(encode_text("wwwwwwwwwwwwb"), "12w1b")
        self.assertEqual(decode_text(encode_text("  ..!!!")), "  ..!!!")
        with self.assertRaises(ValueError):
            encode_text("a1")
        with self.assertRaises(ValueError):
            decode_text("3")


if __name__ == "__main__":
    unittest.main()
