"""Parsing and building whole query strings."""

from __future__ import annotations

from collections.abc import Mapping

from .encoding import quote, unquote


def parse_query(query: str) -> dict[str, list[str]]:
    """Parse ``query`` into a dict mapping each key to its list of values.

    A leading ``?`` is ignored, empty pairs are skipped and a key without
    ``=`` gets the value ``""``. Values keep the order they appear in.
    """
    if query.startswith("?"):
        query = query[1:]
    result: dict[str, list[str]] = {}
    for pair in query.split("&"):
        if not pair:
            continue
        key, _, value = pair.partition("=")
        result.setdefault(unquote(key), []).append(unquote(value))
    return result


def build_query(params: Mapping) -> str:
    """Build a query string from ``params``.

    Values may be strings, numbers, booleans (``true``/``false``), ``None``
    (the key is left out) or lists/tuples of those (the key is repeated).
    """
    pairs = []
    for key, value in params.items():
        values = value if isinstance(value, (list, tuple)) else [value]
        for item in values:
            if item is None:
                continue
            if isinstance(item, bool):
                item = "true" if item else "false"
            pairs.append(f"{quote(str(key))}={quote(str(item))}")
    return "&".join(pairs)


def add_params(url: str, params: Mapping) -> str:
    """Append ``params`` to ``url``, keeping any query and fragment it has."""
    base, hash_sign, fragment = url.partition("#")
    extra = build_query(params)
    if extra:
        if "?" not in base:
            base += "?"
        elif not base.endswith(("?", "&")):
            base += "&"
        base += extra
    return base + hash_sign + fragment
