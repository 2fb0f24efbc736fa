"""Run-length encoding for bytes and text.

Example::

    from rle import decode, encode

    packed = encode(b"aaaab")      # b"\\x04a\\x01b"
    assert decode(packed) == b"aaaab"
"""

from .codec import MAX_RUN, decode, encode
from .text import decode_text, encode_text

__all__ = ["MAX_RUN", "decode", "decode_text", "encode", "encode_text"]
