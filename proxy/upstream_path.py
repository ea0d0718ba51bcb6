"""What the proxy says about ``--upstream``'s path, where one common mistake shows.

Clients put ``/v1`` in their base URL themselves (the OpenAI SDKs' ``base_url``
ends in it), and the proxy appends a request's whole path to the upstream's. An
upstream given as ``http://host:8000/v1`` so receives ``/v1/v1/chat/completions``:
every answer is a 404, relayed and recorded as ordinary traffic. The proxy warns
at start when the path ends in ``/v1``, and ``/healthz`` and the exit line say so
when most answers are 404s (``AnswerCounts``).
"""

from __future__ import annotations

from yarl import URL

from tailreplay.proxy.exchange import Exchange
from tailreplay.traces.text.redact_targets import redact_url

__all__ = ["MIN_ANSWERS", "AnswerCounts", "not_found_note", "v1_warning"]

MIN_ANSWERS = 20
"""Answers before their share of 404s is judged: a few probes of paths that do not
exist are no sign of a wrong base path."""


def v1_warning(flag: str, url: URL) -> str | None:
    """The start-up warning for an upstream whose path ends in a ``v1`` segment, or None.

    >>> v1_warning("--upstream", URL("http://h:8000/v1")) is not None
    True
    """
    segments = [s for s in url.path.split("/") if s]
    if not segments or segments[-1].lower() != "v1":
        return None
    return (
        f"{flag} {redact_url(str(url))} ends in /v1: a client whose base URL also ends in "
        "/v1 reaches /v1/v1/… (404); give the upstream without /v1 unless its routes "
        "really sit under it"
    )


def not_found_note(answers: int, not_found: int) -> str | None:
    """What to say when over half of at least ``MIN_ANSWERS`` answers were 404s, or None.

    >>> not_found_note(20, 11).startswith("11 of 20 answers were 404")
    True
    """
    if answers < MIN_ANSWERS or 2 * not_found <= answers:
        return None
    return (
        f"{not_found:,} of {answers:,} answers were 404 "
        "(the paths clients send do not exist upstream: check --upstream's path)"
    )


class AnswerCounts:
    """The upstream's answers to production's requests, and how many were 404s."""

    __slots__ = ("answers", "not_found")

    def __init__(self) -> None:
        self.answers = 0
        self.not_found = 0

    def observe(self, ex: Exchange) -> None:
        """Count a finished exchange whose answer came from the upstream (the proxy's
        own refusals and errors, and the replayer's probes, are not the upstream's
        verdict on its paths)."""
        if ex.tap is None or ex.probe:
            return
        self.answers += 1
        if ex.status == 404:
            self.not_found += 1

    def note(self) -> str | None:
        return not_found_note(self.answers, self.not_found)
