"""The :class:`LRUCache` container."""

from collections import OrderedDict

from .stats import CacheStats


def _unit_weight(_value):
    return 1


class LRUCache:
    """A mapping that evicts the least recently used entries when full.

    The cache holds entries whose total *weight* stays within
    ``max_weight``.  By default every entry weighs 1, so ``max_weight`` is
    simply the maximum number of entries; pass ``weigher`` (a function of
    the value) to bound, say, the total length of cached strings instead.
    Both :meth:`get` and :meth:`put` mark an entry as most recently used.
    """

    def __init__(self, max_weight, weigher=None):
        if max_weight <= 0:
            raise ValueError("max_weight must be positive")
        self.max_weight = max_weight
        self._weigher = weigher or _unit_weight
        self._data = OrderedDict()
        self._weight = 0
        self.stats = CacheStats()

    def __len__(self):
        return len(self._data)

    def __contains__(self, key):
        return key in self._data

    @property
    def total_weight(self):
        """Combined weight of the entries currently stored."""
        return self._weight

    def keys(self):
        """Return the keys from least to most recently used."""
        return list(self._data)

    def get(self, key, default=None):
        """Return the value for ``key`` (or ``default``) and record a hit or miss."""
        if key not in self._data:
            self.stats.misses += 1
            return default
        self.stats.hits += 1
        self._data.move_to_end(key)
        return self._data[key][0]

    def put(self, key, value):
        """Store ``value`` under ``key``, evicting old entries if needed.

        Raises ``ValueError`` when the value alone is heavier than
        ``max_weight``.
        """
        weight = self._weigher(value)
        if weight > self.max_weight:
            raise ValueError(f"value of weight {weight} can never fit")
        if key in self._data:
            self._weight -= self._data.pop(key)[1]
        self._data[key] = (value, weight)
        self._weight += weight
        while self._weight > self.max_weight:
            _, (_, old_weight) = self._data.popitem(last=False)
            self._weight -= old_weight
            self.stats.evictions += 1

    def pop(self, key, default=None):
        """Remove ``key`` and return its value, or ``default`` if absent."""
        if key not in self._data:
            return default
        value, weight = self._data.pop(key)
        self._weight -= weight
        return value

    def clear(self):
        """Remove every entry.  The usage statistics are kept."""
        self._data.clear()
        self._weight = 0
