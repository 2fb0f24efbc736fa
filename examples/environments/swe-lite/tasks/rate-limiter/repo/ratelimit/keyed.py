"""One token bucket per key."""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable

from .bucket import TokenBucket


class KeyedLimiter:
    """Rate-limits many callers independently, one bucket per key.

    Buckets are created on first use and all share ``capacity``, ``rate``
    and ``clock``.
    """

    def __init__(self, capacity: float, rate: float, clock: Callable[[], float] = time.monotonic):
        self.capacity = capacity
        self.rate = rate
        self._clock = clock
        self._buckets: dict[Hashable, TokenBucket] = {}

    def _bucket(self, key: Hashable) -> TokenBucket:
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = TokenBucket(self.capacity, self.rate, clock=self._clock)
            self._buckets[key] = bucket
        return bucket

    def try_acquire(self, key: Hashable, tokens: float = 1) -> bool:
        """Take ``tokens`` from ``key``'s bucket; return whether it succeeded."""
        return self._bucket(key).try_acquire(tokens)

    def retry_after(self, key: Hashable, tokens: float = 1) -> float:
        """Seconds until ``key`` may take ``tokens``."""
        return self._bucket(key).retry_after(tokens)

    def forget(self, key: Hashable) -> None:
        """Drop the bucket for ``key``; it starts full again on next use."""
        self._buckets.pop(key, None)

    def __len__(self) -> int:
        return len(self._buckets)
