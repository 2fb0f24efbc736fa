"""Query-string parsing and building.

Example::

    from urlquery import build_query, parse_query

    build_query({"q": "green tea", "page": 2})   # "q=green+tea&page=2"
    parse_query("q=green+tea&page=2")            # {"q": ["green tea"], "page": ["2"]}
"""

from .encoding import quote, unquote
from .query import add_params, build_query, parse_query

__all__ = ["add_params", "build_query", "parse_query", "quote", "unquote"]
