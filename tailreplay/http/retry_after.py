"""A ``Retry-After`` header's wait (RFC 9110 §10.2.3), read by the proxy when it
records a 429 or 503 and by the replayer when it retries one."""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

__all__ = ["MAX_WAIT_S", "retry_after_s"]


MAX_WAIT_S = 1e9
"""The longest wait read (about 32 years): a longer one, or a date further off, is
read as this, so the milliseconds a record keeps stay in the archive's range for
``retry_after_ms`` (below 2^40, docs/archive-format.md)."""


def retry_after_s(value: str | None, now: datetime | None = None) -> float | None:
    """A ``Retry-After`` header's wait in seconds: delta-seconds or an HTTP date, at
    most ``MAX_WAIT_S``.

    >>> retry_after_s("2"), retry_after_s("soon"), retry_after_s("\xb2"), retry_after_s(None)
    (2.0, None, None, None)
    >>> retry_after_s("Wed, 21 Oct 2015 07:28:10 GMT", datetime(2015, 10, 21, 7, 28, tzinfo=UTC))
    10.0
    """
    if value is None:
        return None
    text = value.strip()
    if text.isascii() and text.isdigit():  # not "²": str.isdigit takes any Unicode digit
        return min(float(text), MAX_WAIT_S)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return min(max((when - (now or datetime.now(UTC))).total_seconds(), 0.0), MAX_WAIT_S)
