"""Binary run-length codec.

The encoded form is a sequence of ``(count, value)`` byte pairs. A count is
a single byte, so a run longer than :data:`MAX_RUN` is stored as several
pairs with the same value.
"""

from __future__ import annotations

MAX_RUN = 255


def encode(data: bytes) -> bytes:
    """Encode ``data`` as ``(count, value)`` pairs, each count in 1..MAX_RUN."""
    out = bytearray()
    i = 0
    while i < len(data):
        value = data[i]
        run = 1
        while i + run < len(data) and data[i + run] == value and run <= MAX_RUN:
            run += 1
        out.append(run)
        out.append(value)
        i += run
    return bytes(out)


def decode(packed: bytes) -> bytes:
    """Inverse of :func:`encode`.

    Raises ``ValueError`` if ``packed`` has an odd length or a zero count.
    """
    if len(packed) % 2:
        raise ValueError("encoded data must have an even length")
    out = bytearray()
    for i in range(0, len(packed), 2):
        count, value = packed[i], packed[i + 1]
        if count == 0:
            raise ValueError(f"zero run length at offset {i}")
        out.extend(bytes([value]) * count)
    return bytes(out)


def ratio(data: bytes) -> float:
    """Encoded size divided by original size (1.0 for empty input)."""
    if not data:
        return 1.0
    return len(encode(data)) / len(data)
