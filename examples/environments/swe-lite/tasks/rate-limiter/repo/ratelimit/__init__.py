"""Token-bucket rate limiting.

Example::

    from ratelimit import TokenBucket

    bucket = TokenBucket(capacity=10, rate=2.0)   # bursts of 10, 2 per second
    if not bucket.try_acquire():
        wait = bucket.retry_after()
"""

from .bucket import TokenBucket
from .keyed import KeyedLimiter

__all__ = ["KeyedLimiter", "TokenBucket"]
