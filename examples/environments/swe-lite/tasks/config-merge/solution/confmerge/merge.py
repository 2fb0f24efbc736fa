"""Deep merging of nested dictionaries."""

from __future__ import annotations

import copy
from collections.abc import Mapping


def _merge_into(target: dict, override: Mapping) -> None:
    for key, value in override.items():
        current = target.get(key)
        if isinstance(value, Mapping) and isinstance(current, dict):
            _merge_into(current, value)
        else:
            target[key] = copy.deepcopy(value)


def deep_merge(base: Mapping, override: Mapping) -> dict:
    """Return a new dict with ``override`` merged over ``base``.

    Nested mappings are merged key by key; any other value in ``override``
    (lists included) replaces the value in ``base``. Neither argument is
    modified, and the result shares no mutable values with them.
    """
    result = copy.deepcopy(dict(base))
    _merge_into(result, override)
    return result


def merge_all(*layers: Mapping) -> dict:
    """Merge several layers, later layers taking precedence."""
    result: dict = {}
    for layer in layers:
        result = deep_merge(result, layer)
    return result
