"""How a client retries (``replay --retries policy``): what a well-behaved OpenAI client
does when the target is struggling, so a replay gives it the retry storm it would get.

- 429 and 503 with ``Retry-After``: after the time it asks for, at most
  ``RETRY_AFTER_CAP_S`` (a client will not wait minutes for one request);
- 429 and 503 without it, any other 5xx, a timeout, a reset connection or a refused
  connect: after an exponential backoff with full jitter (uniform in
  0..min(cap, base * 2^(attempt-1))), as the OpenAI SDKs and AWS's guidance do;
- anything else (a 4xx that is the request's fault, a success): never.

At most ``max_attempts`` attempts in all, the first included.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from tailreplay.replayer.transport import Outcome
from tailreplay.traces.archive.record import Record

__all__ = ["BACKOFF_BASE_S", "BACKOFF_CAP_S", "RETRY_AFTER_CAP_S", "RetryPolicy"]

RETRY_AFTER_CAP_S = 30.0
BACKOFF_BASE_S = 0.5
BACKOFF_CAP_S = 8.0
_RETRIED_ERRORS = frozenset({"timeout", "reset", "connect"})


@dataclass
class RetryPolicy:
    max_attempts: int = 3
    seed: int = 0
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)  # jitter: seeded, so a replay can be repeated

    def delay_s(self, outcome: Outcome, attempt: int) -> float | None:
        """Seconds to wait before attempt ``attempt + 1``, or None: do not retry."""
        if attempt >= self.max_attempts:
            return None
        if outcome.error is None and outcome.status < 500 and outcome.status != 429:
            return None
        if outcome.error is not None and outcome.error not in _RETRIED_ERRORS:
            return None
        if outcome.status in (429, 503) and outcome.retry_after_s is not None:
            return min(outcome.retry_after_s, RETRY_AFTER_CAP_S)
        return self._rng.uniform(0, min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** (attempt - 1)))

    def will_retry(self, result: Record) -> bool:
        """Whether an attempt's result is followed by another: ``--fail-fast`` judges a
        request by its last attempt, not by the 429s a retry storm is made of."""
        if (result.attempt or 1) >= self.max_attempts:
            return False
        status, error = result.status or 0, result.error
        if error is not None and error in _RETRIED_ERRORS:
            return True
        return status == 429 or status >= 500
