"""jpath: read and write nested JSON-like data with dotted paths.

A path such as ``"servers[0].ports.http"`` addresses
``doc["servers"][0]["ports"]["http"]``.
"""

from .access import delete_path, get_path, set_path
from .parse import PathSyntaxError, format_path, parse_path

__all__ = [
    "PathSyntaxError",
    "delete_path",
    "format_path",
    "get_path",
    "parse_path",
    "set_path",
]
