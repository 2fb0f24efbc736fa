"""Percent-encoding of query-string components (UTF-8)."""

from __future__ import annotations

_HEX = "0123456789ABCDEF"
_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def quote(text: str, space_as_plus: bool = True) -> str:
    """Percent-encode ``text`` for use as a query-string key or value.

    Unreserved characters are kept; everything else is encoded as UTF-8
    bytes, ``%XX`` each. Spaces become ``+`` unless ``space_as_plus`` is false.
    """
    out = []
    for byte in text.encode("utf-8"):
        if byte in _SAFE:
            out.append(chr(byte))
        elif byte == 0x20 and space_as_plus:
            out.append("+")
        else:
            out.append("%" + _HEX[byte >> 4] + _HEX[byte & 0xF])
    return "".join(out)


def _is_hex(text: str) -> bool:
    return len(text) == 2 and all(c in "0123456789abcdefABCDEF" for c in text)


def unquote(text: str, plus_as_space: bool = True) -> str:
    """Decode ``%XX`` escapes (and ``+`` as a space) in ``text``.

    Malformed escapes such as ``%zz`` or a trailing ``%`` are kept as they
    are. Decoded bytes that are not valid UTF-8 become U+FFFD.
    """
    buf = bytearray()
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "%" and _is_hex(text[i + 1:i + 3]):
            buf.append(int(text[i + 1:i + 3], 16))
            i += 3
            continue
        if ch == "+" and plus_as_space:
            buf.append(0x20)
        else:
            buf.extend(ch.encode("utf-8"))
        i += 1
    return buf.decode("latin-1", errors="replace")
