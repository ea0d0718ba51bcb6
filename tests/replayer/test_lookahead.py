"""Requests built before they are due: bounded in count and bytes, and off the send path.

The dispatcher runs through the fake transport of ``test_dispatch`` (no sockets), so
what is measured is the replayer's own work: with look-ahead, a burst of long
prompts is built while the dispatcher waits for it; without, each request of the
burst waits for the builds of those before it.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np

from tailreplay.replayer.lookahead import Lookahead
from tailreplay.replayer.prompts import PromptMaker
from tailreplay.replayer.request import RequestBuilder
from tailreplay.replayer.schedule import Planned
from tailreplay.traces.archive.record import Record
from tests.replayer.test_dispatch import FakeTransport, Harness

LONG = 100_000
"""Tokens of a long prompt (~650 KB of body)."""


def _long(i: int, due_s: float, tokens: int = LONG) -> Planned:
    record = Record(
        start_ns=i, trace_id=(0xC000 + i).to_bytes(16, "big"), span_id=i.to_bytes(8, "big"),
        method="POST", path="/v1/chat/completions", model="m", input_tokens=tokens,
        output_tokens=4,
    )  # fmt: skip
    return Planned(due_s, record, copy=0, tail=False, budget=4)


def _builder() -> RequestBuilder:
    return RequestBuilder(model_map={}, force_lengths=True, prompts=PromptMaker(0))


def _fill(ahead: Lookahead) -> int:
    """Build ahead with all the time in the world until the look-ahead says no."""
    built = 0
    while ahead.build_ahead(60.0):
        built += 1
    return built


def test_the_look_ahead_is_bounded_in_count_and_refilled_in_batches() -> None:
    """Built until full; then nothing until taking has drained it to half its bound,
    and then built until full again: a batch of builds a refill, not one a send."""
    items = [_long(i, 1.0, tokens=50) for i in range(40)]
    ahead = Lookahead(iter(items), _builder(), max_items=8, max_bytes=2**30)
    assert _fill(ahead) == 8 and ahead.held[0] == 8
    for _ in range(3):
        assert ahead.take() is not None
        assert _fill(ahead) == 0  # 7, 6, 5 still built: more than half
    assert ahead.take() is not None  # 4 left: half
    assert _fill(ahead) == 4 and ahead.held[0] == 8
    taken = [ahead.take() for _ in range(8)]
    assert [t[0] for t in taken if t is not None] == items[4:12]  # in order, each once


def test_a_refill_goes_on_across_waits_until_full() -> None:
    """A wait too short for the next build ends a refill's turn, not the refill: the
    next wait goes on building from where it stopped, though more than half is built."""
    items = [_long(i, 1.0, tokens=50) for i in range(40)]
    ahead = Lookahead(iter(items), _builder(), max_items=8, max_bytes=2**30)
    assert all(ahead.build_ahead(60.0) for _ in range(5))
    assert not ahead.build_ahead(0.0)  # no time in this wait, 5 of 8 built
    assert _fill(ahead) == 3 and ahead.held[0] == 8


def test_the_look_ahead_is_bounded_in_bytes_and_reads_the_schedule_lazily() -> None:
    """A million 100k-token requests: a few MB built, and the schedule read that far only."""
    read = 0

    def schedule() -> Iterator[Planned]:
        nonlocal read
        for i in itertools.count():
            read += 1
            yield _long(i, 1.0)
            if i == 1_000_000:
                return

    ahead = Lookahead(schedule(), _builder(), max_items=256, max_bytes=2 * 2**20)
    built = _fill(ahead)
    count, held = ahead.held
    assert built == count == 4  # three bodies of ~650 KB are under 2 MiB; the fourth crosses
    assert 2 * 2**20 <= held < 2 * 2**20 + 700_000
    assert read == 4
    # What is taken was built ahead, in order; one request is taken without look-ahead.
    assert [ahead.take()[0].record.start_ns for _ in range(4)] == [0, 1, 2, 3]  # type: ignore[index]
    assert ahead.held == (0, 0) and ahead.built_ahead == 4 and ahead.built_on_take == 0


def test_no_build_starts_that_would_end_after_the_wake_up() -> None:
    ahead = Lookahead(iter([_long(0, 1.0), _long(1, 1.0)]), _builder())
    assert not ahead.build_ahead(0.0005)  # a 100k-token build takes milliseconds
    assert ahead.held == (0, 0)
    assert ahead.build_ahead(5.0)


def test_a_body_built_before_the_target_refused_the_forced_fields_is_built_again() -> None:
    builder = _builder()
    ahead = Lookahead(iter([_long(0, 1.0, tokens=20)]), builder)
    assert ahead.build_ahead(5.0)
    builder.forced_fields_ok = False  # the target refused min_tokens meanwhile
    taken = ahead.take()
    assert taken is not None
    body = taken[1].body or b""
    assert b"min_tokens" not in body and b"ignore_eos" not in body and b'"max_tokens": 4' in body


async def _burst_lags(lookahead_items: int) -> np.ndarray:
    """Dispatch lag (ms) of 24 long-prompt requests all due 0.5 s after the start."""
    h = Harness(FakeTransport(), lookahead_items=lookahead_items)
    await h.replay([_long(i, 0.5) for i in range(24)])
    assert len(h.results) == 24 and all(r.status == 200 for r in h.results)
    return np.frombuffer(h.dispatcher.lags_ns, dtype=np.int64) / 1e6


async def test_a_burst_of_long_prompts_leaves_on_time_when_built_ahead() -> None:
    """Without look-ahead the last of the burst waits for 23 builds (tens of ms);
    with it, the builds were done in the half second before: measured in one test."""
    off = await _burst_lags(0)
    on = await _burst_lags(256)
    assert off.max() > 20  # 23 builds of ~650 KB each, however fast the machine
    assert on.max() < off.max() / 3, (on.max(), off.max())


def test_the_next_due_time_is_known_without_building_it() -> None:
    items = [_long(i, i * 0.5, tokens=50) for i in range(3)]
    ahead = Lookahead(iter(items), _builder(), max_items=8, max_bytes=2**30)
    assert ahead.next_due_s() == 0.0
    assert ahead.held[0] == 0  # read from the schedule, not built
    taken = ahead.take()
    assert taken is not None and taken[0] is items[0]
    assert ahead.build_ahead(60.0)
    assert ahead.next_due_s() == 0.5  # the one built
    ahead.take()
    assert ahead.next_due_s() == 1.0
    ahead.take()
    assert ahead.next_due_s() is None and ahead.take() is None
