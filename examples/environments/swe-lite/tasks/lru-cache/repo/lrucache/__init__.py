"""lrucache: a size-bounded least-recently-used cache with statistics."""

from .cache import LRUCache
from .stats import CacheStats

__all__ = ["CacheStats", "LRUCache"]
