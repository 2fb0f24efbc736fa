"""Hit/miss bookkeeping for :class:`lrucache.LRUCache`."""

from dataclasses import dataclass


@dataclass
class CacheStats:
    """Counters describing how a cache has been used."""

    hits: int = 0
    misses: int = 0
    evictions: int = 0

    @property
    def lookups(self):
        """Total number of ``get`` calls recorded."""
        return self.hits + self.misses

    @property
    def hit_rate(self):
        """Fraction of lookups that were hits (0.0 when there were none)."""
        if not self.lookups:
            return 0.0
        return self.hits / self.lookups
