"""A single token bucket."""

from __future__ import annotations

import time
from collections.abc import Callable


class TokenBucket:
    """A bucket holding up to ``capacity`` tokens, refilled at ``rate`` per second.

    The bucket starts full. Each request takes one or more tokens; a request
    that cannot be served is refused without taking anything. ``clock`` must
    return the current time in seconds and defaults to ``time.monotonic``.
    """

    def __init__(self, capacity: float, rate: float, clock: Callable[[], float] = time.monotonic):
        if capacity <= 0:
            raise ValueError("capacity must be positive")
        if rate <= 0:
            raise ValueError("rate must be positive")
        self.capacity = float(capacity)
        self.rate = float(rate)
        self._clock = clock
        self._tokens = self.capacity
        self._last = clock()

    def _refill(self) -> None:
        now = self._clock()
        elapsed = max(0.0, now - self._last)
        self._last = now
        self._tokens = min(self.capacity, self._tokens + elapsed * self.rate)

    def _check(self, tokens: float) -> None:
        if tokens <= 0:
            raise ValueError("tokens must be positive")
        if tokens > self.capacity:
            raise ValueError(f"cannot take {tokens} tokens from a bucket of {self.capacity}")

    @property
    def available(self) -> float:
        """Tokens available right now."""
        self._refill()
        return self._tokens

    def try_acquire(self, tokens: float = 1) -> bool:
        """Take ``tokens`` if they are available; return whether it succeeded."""
        self._check(tokens)
        self._refill()
        if self._tokens >= tokens:
            self._tokens -= tokens
            return True
        return False

    def retry_after(self, tokens: float = 1) -> float:
        """Seconds until ``tokens`` will be available (``0.0`` if they are now)."""
        self._check(tokens)
        self._refill()
        if self._tokens >= tokens:
            return 0.0
        return (tokens - self._tokens) / self.rate
