import unittest

from ratelimit import KeyedLimiter, TokenBucket


class FakeClock:
    def __init__(self, now=0.0):
        self.now = now

    def __call__(self):
        return self.now


class BucketTest(unittest.TestCase):
    def test_burst_then_refused(self):
        clock = FakeClock()
        bucket = TokenBucket(capacity=3, rate=1, clock=clock)
        self.assertEqual([bucket.try_acquire() for _ in range(4)], [True, True, True, False])

    def test_refills_over_time(self):
        clock = FakeClock()
        bucket = TokenBucket(capacity=2, rate=1, clock=clock)
        bucket.try_acquire(2)
        self.assertFalse(bucket.try_acquire())
        clock.now = 1.0
        self.assertTrue(bucket.try_acquire())

    def test_retry_after_when_empty(self):
        clock = FakeClock()
        bucket = TokenBucket(capacity=1, rate=1, clock=clock)
        self.assertEqual(bucket.retry_after(), 0.0)
        bucket.try_acquire()
        self.assertAlmostEqual(bucket.retry_after(), 1.0)

    def test_keys_are_independent(self):
        limiter = KeyedLimiter(capacity=1, rate=1, clock=FakeClock())
        self.assertTrue(limiter.try_acquire("alice"))
        self.assertFalse(limiter.try_acquire("alice"))
        self.assertTrue(limiter.try_acquire("bob"))


if __name__ == "__main__":
    unittest.main()
