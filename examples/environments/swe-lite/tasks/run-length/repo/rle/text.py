"""Readable run-length encoding for text: ``"aaabcc"`` <-> ``"3a1b2c"``."""

from __future__ import annotations


def encode_text(text: str) -> str:
    """Encode ``text`` as count/character pairs.

    Digits cannot be encoded since they would be read back as counts.
    """
    if any(ch.isdigit() for ch in text):
        raise ValueError("text to encode must not contain digits")
    parts = []
    prev = None
    count = 0
    for ch in text:
        if ch == prev:
            count += 1
            continue
        if prev is not None:
            parts.append(f"{count}{prev}")
        prev, count = ch, 1
    if prev is not None:
        parts.append(f"{count}{prev}")
    return "".join(parts)


def decode_text(encoded: str) -> str:
    """Inverse of :func:`encode_text`; counts may have several digits."""
    out = []
    digits = ""
    for ch in encoded:
        if ch.isdigit():
            digits += ch
            continue
        if not digits or int(digits) == 0:
            raise ValueError(f"missing or zero count before {ch!r}")
        out.append(ch * int(digits))
        digits = ""
    if digits:
        raise ValueError("encoded text ends with a count")
    return "".join(out)
