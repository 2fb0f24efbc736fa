"""Deep-merge layered configuration.

Example::

    from confmerge import deep_merge, parse_overrides

    config = deep_merge(DEFAULTS, parse_overrides(["db.port=5433"]))
"""

from .merge import deep_merge, merge_all
from .overrides import parse_overrides, parse_value

__all__ = ["deep_merge", "merge_all", "parse_overrides", "parse_value"]
