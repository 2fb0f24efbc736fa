"""semverlite: parse and order Semantic Versioning 2.0.0 version strings."""

from .compare import compare, latest, precedence_key, sort_versions
from .version import Version, VersionError, parse

__all__ = [
    "Version",
    "VersionError",
    "compare",
    "latest",
    "parse",
    "precedence_key",
    "sort_versions",
]
