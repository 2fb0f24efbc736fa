"""Getting, setting and deleting values by path."""

from .parse import format_path, parse_path


def _child(node, step):
    """Return ``node[step]``, raising KeyError/IndexError/TypeError if absent."""
    if isinstance(step, int):
        if not isinstance(node, list):
            raise TypeError(f"cannot index {type(node).__name__} with [{step}]")
        return node[step]
    if not isinstance(node, dict):
        raise TypeError(f"cannot look up key {step!r} in {type(node).__name__}")
    return node[step]


def get_path(doc, path, default=None):
    """Return the value at ``path`` in ``doc``, or ``default`` if it is missing."""
    node = doc
    for step in parse_path(path):
        try:
            node = _child(node, step)
        except (KeyError, IndexError, TypeError):
            return default
    return node


def set_path(doc, path, value, create=False):
    """Store ``value`` at ``path`` inside ``doc`` and return ``doc``.

    Missing intermediate objects are created as empty dicts by default, so
    ``set_path({}, "a.b.c", 1)`` gives ``{"a": {"b": {"c": 1}}}``.  Pass
    ``create=False`` to get a ``KeyError`` instead.  Lists are never grown:
    a list index must already exist, otherwise ``IndexError`` is raised.
    """
    steps = parse_path(path)
    if not steps:
        raise ValueError("cannot replace the document root")
    node = doc
    for depth, step in enumerate(steps[:-1]):
        if isinstance(step, str) and isinstance(node, dict) and step not in node:
            if not create:
                raise KeyError(format_path(steps[: depth + 1]))
            node[step] = {}
        node = _child(node, step)
    last = steps[-1]
    if isinstance(last, int):
        _child(node, last)
    elif not isinstance(node, dict):
        raise TypeError(f"cannot set key {last!r} on {type(node).__name__}")
    node[last] = value
    return doc


def delete_path(doc, path):
    """Remove the value at ``path`` from ``doc`` and return it.

    Raises ``KeyError`` or ``IndexError`` when nothing is stored there.
    """
    steps = parse_path(path)
    if not steps:
        raise ValueError("cannot delete the document root")
    node = doc
    for step in steps[:-1]:
        node = _child(node, step)
    value = _child(node, steps[-1])
    del node[steps[-1]]
    return value
