"""Parse ``dotted.key=value`` overrides, as given on a command line."""

from __future__ import annotations


def parse_value(text: str):
    """Interpret ``text`` as a bool, null, int or float, else keep the string."""
    lowered = text.strip().lower()
    if lowered in ("true", "yes", "on"):
        return True
    if lowered in ("false", "no", "off"):
        return False
    if lowered in ("null", "none"):
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_overrides(items) -> dict:
    """Turn ``["db.port=5433", "debug=true"]`` into a nested dict.

    Raises ``ValueError`` for an item without ``=`` or with an empty key part.
    """
    result: dict = {}
    for item in items:
        key, sep, raw = item.partition("=")
        parts = key.strip().split(".")
        if not sep or not all(parts):
            raise ValueError(f"invalid override: {item!r}")
        node = result
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ValueError(f"override {item!r} conflicts with an earlier value")
            node = child
        node[parts[-1]] = parse_value(raw)
    return result
