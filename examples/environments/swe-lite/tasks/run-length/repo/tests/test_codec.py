import unittest

from rle import decode, decode_text, encode, encode_text


class CodecTest(unittest.TestCase):
    def test_encode_short_runs(self):
        self.assertEqual(encode(b"aaaabcc"), b"\x04a\x01b\x02c")
        self.assertEqual(encode(b""), b"")

    def test_round_trip(self):
        data = b"\x00\x00\x00\xff\xff hello  world\x00"
        self.assertEqual(decode(encode(data)), data)

    def test_text_round_trip(self):
        self.assertEqual(encode_text("aaabcc"), "3a1b2c")
        self.assertEqual(decode_text("12x1y"), "x" * 12 + "y")

    def test_decode_rejects_odd_length(self):
        with self.assertRaises(ValueError):
            decode(b"\x02a\x01")


if __name__ == "__main__":
    unittest.main()
