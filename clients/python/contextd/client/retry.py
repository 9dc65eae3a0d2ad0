"""Backoff for calls that failed with UNAVAILABLE."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class RetryPolicy:
    """How a client retries calls that failed with UNAVAILABLE (the sidecar is starting or
    stopping, or its store is unreachable). Only calls that are safe to repeat are retried: reads,
    compiles that do not commit, and writes with an idempotency key; the keyed writes (commits,
    compiles with `commit`) are also retried after DEADLINE_EXCEEDED and after an answer over the
    receive limit, since they may have applied.

    The wait before retry n is random below min(initial_backoff * multiplier**(n-1),
    max_backoff) seconds ("full jitter"), so many agents retrying at once do not stampede the
    sidecar.
    """

    #: Counts the first try; 1 disables retries.
    max_attempts: int = 6
    initial_backoff: float = 0.1
    max_backoff: float = 2.0
    multiplier: float = 2.0

    def backoff_bound(self, retry: int) -> float:
        """The upper bound, in seconds, of the wait before retry number `retry` (1-based)."""
        return min(self.initial_backoff * self.multiplier ** (retry - 1), self.max_backoff)

    def backoff(self, retry: int) -> float:
        """A jittered wait, in seconds, before retry number `retry`."""
        return random.uniform(0, self.backoff_bound(retry))


#: Rides out a sidecar restart of a few seconds.
DEFAULT_RETRY_POLICY = RetryPolicy()
