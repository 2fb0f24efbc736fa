"""Parsing of dotted paths into lists of keys and indices."""

import re

_TOKEN = re.compile(r"([^.\[\]]+)|\[(-?\d+)\]|(\.)")


class PathSyntaxError(ValueError):
    """Raised for malformed path strings."""


def parse_path(path):
    """Split ``path`` into a list of steps.

    Object keys become strings and ``[n]`` list indices become ints:
    ``parse_path("a.b[2].c") == ["a", "b", 2, "c"]``.  The empty path
    ``""`` addresses the document itself and gives ``[]``.
    """
    steps = []
    position = 0
    expect_key = True
    while position < len(path):
        match = _TOKEN.match(path, position)
        if match is None:
            raise PathSyntaxError(f"unexpected {path[position]!r} at {position} in {path!r}")
        key, index, dot = match.groups()
        if key is not None:
            if not expect_key:
                raise PathSyntaxError(f"missing '.' before {key!r} in {path!r}")
            steps.append(key)
            expect_key = False
        elif index is not None:
            if expect_key and steps:
                raise PathSyntaxError(f"empty key before index in {path!r}")
            steps.append(int(index))
            expect_key = False
        else:
            if expect_key:
                raise PathSyntaxError(f"empty key at {position} in {path!r}")
            expect_key = True
        position = match.end()
    if expect_key and steps:
        raise PathSyntaxError(f"path {path!r} ends with '.'")
    return steps


def format_path(steps):
    """Inverse of :func:`parse_path`: build the path string for ``steps``."""
    parts = []
    for step in steps:
        if isinstance(step, int):
            parts.append(f"[{step}]")
        else:
            parts.append(("." if parts else "") + step)
    return "".join(parts)
