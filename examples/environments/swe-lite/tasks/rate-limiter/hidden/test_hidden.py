import unittest

from ratelimit import KeyedLimiter, TokenBucket


class FakeClock:
    def __init__(self, now=100.0):
        self.now = now

    def __call__(self):
        return self.now


class HiddenRateLimitTest(unittest.TestCase):
    def test_retry_after_with_fast_rate(self):
        clock = FakeClock()
        bucket = TokenBucket(capacity=4, rate=4, clock=clock)
        self.assertTrue(bucket.try_acquire(4))
        self.assertAlmostEqual(bucket.retry_after(), 0.25)
        self.assertAlmostEqual(bucket.retry_after(2), 0.5)

    def test_retry_after_with_slow_rate_and_partial_tokens(self):
        clock = FakeClock()
        bucket = TokenBucket(capacity=2, rate=0.5, clock=clock)
        self.assertTrue(bucket.try_acquire(2))
        clock.now += 1.0
        self.assertAlmostEqual(bucket.available, 0.5)
        self.assertAlmostEqual(bucket.retry_after(), 1.0)
        self.assertAlmostEqual(bucket.retry_after(2), 3.0)

    def test_waiting_retry_after_is_enough(self):
        clock = FakeClock()
        bucket = TokenBucket(capacity=5, rate=8, clock=clock)
        for _ in range(5):
            self.assertTrue(bucket.try_acquire())
        wait = bucket.retry_after(3)
        self.assertAlmostEqual(wait, 0.375)
        clock.now += wait
        self.assertTrue(bucket.try_acquire(3))

    def test_keyed_retry_after(self):
        clock = FakeClock()
        limiter = KeyedLimiter(capacity=1, rate=2, clock=clock)
        self.assertTrue(limiter.try_acquire("10.0.0.1"))
        self.assertAlmostEqual(limiter.retry_after("10.0.0.1"), 0.5)
        self.assertEqual(limiter.retry_after("10.0.0.2"), 0.0)

    def test_refill_is_capped_at_capacity(self):
        clock = FakeClock()
        bucket = TokenBucket(capacity=3, rate=2, clock=clock)
        bucket.try_acquire(3)
        clock.now += 60
        self.assertEqual(bucket.available, 3)
        self.assertTrue(bucket.try_acquire(3))
        self.assertFalse(bucket.try_acquire())

    def test_invalid_requests(self):
        bucket = TokenBucket(capacity=2, rate=1, clock=FakeClock())
        with self.assertRaises(ValueError):
            bucket.try_acquire(3)
        with self.assertRaises(ValueError):
            bucket.retry_after(0)
        with self.assertRaises(ValueError):
            TokenBucket(capacity=0, rate=1)

    def test_forget_resets_key(self):
        limiter = KeyedLimiter(capacity=1, rate=1, clock=FakeClock())
        limiter.try_acquire("k")
        self.assertFalse(limiter.try_acquire("k"))
        limiter.forget("k")
        self.assertTrue(limiter.try_acquire("k"))


if __name__ == "__main__":
    unittest.main()
