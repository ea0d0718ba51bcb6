"""The recorder sink, with the recording work in a process of its own, supervised.

Python runs one thread at a time, so record building in the proxy's process —
usage parsing, tokenising prompts, hashing, redaction, packing — would be paid
for by forwarding (it cost ~40% of throughput when done on a thread). Instead
the proxy's event loop only appends each finished exchange to a batch; every
20 ms the batch is pickled and written to a pipe (non-blocking) read by the
recorder process (``proxy/recorder_process.py``), which builds records and
writes the archive.

Nothing here can hurt a request: when the pipe backs up past a limit, batches
are dropped and counted. If the proxy dies (even kill -9), the recorder sees
the pipe close, writes what it has, and exits. If the recorder dies, the proxy
sees it at once (its process sentinel becomes readable), counts every exchange
it had sent that the recorder never wrote as dropped, and starts a new one;
exchanges finished meanwhile wait for it (up to a batch's limit). If the recorder
hangs (SIGSTOP, a stuck disk), its counters stop moving: capture is marked down
and, if it stays hung, the recorder is killed and restarted the same way
(``proxy/capture_health.py``). At shutdown a recorder that stops making progress is
killed too. Every exchange served is thus written, sampled out, failed, or
counted as dropped — exactly, whatever state the recorder is in.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tailreplay.batch_pipe import BatchPipe
from tailreplay.dialects import ROUTES
from tailreplay.proxy.capture_health import HUNG_S, RESTART_HUNG_S, CaptureHealth
from tailreplay.proxy.config import ProxyConfig
from tailreplay.proxy.exchange import Exchange
from tailreplay.proxy.recorder_process import Stat, child_main
from tailreplay.proxy.upstream_path import not_found_note

__all__ = ["RecorderClient", "RecorderCounts"]

log = logging.getLogger("tailreplay.proxy")

_FLUSH_S = 0.02
_PIPE_LIMIT = 64 << 20  # bytes waiting for the recorder before batches are dropped
_MAX_BATCH = 20_000
_RESTART_BACKOFF_S = (0.5, 30.0)  # first and longest wait between failed restarts
_WATCH_EVERY_S = 0.25  # how often the recorder's progress is looked at


@dataclass
class RecorderCounts:
    """What became of the exchanges served, over all the recorder's lifetimes: once the
    recorder has ended, ``served = written + dropped + sampled_out + failed``."""

    served: int = 0
    written: int = 0
    dropped: int = 0
    sampled_out: int = 0
    failed: int = 0
    shed: int = 0
    """Of the records built, those written without their prompt's work (the
    recorder was behind: ``Record.shed``)."""
    backlog: int = 0
    """Exchanges served and not yet accounted for (written, dropped, sampled out or
    failed): in the loop's next batch, in the pipe, or in the recorder's hands."""
    copies: int = 0
    """Of those served, the copies sent to ``--shadow`` (``proxy/shadow.py``)..."""
    copies_failed: int = 0
    """...and of those, the ones the shadow failed (``shadow.copy_failed``)..."""
    copies_unfinished: int = 0
    """...and the ones the proxy cut when it stopped, the shadow still answering..."""
    copies_cut: int = 0
    """...and the ones cut at a bound (``ShadowCounts.cut``: too many 1xx heads, a head
    too large, an answer too long or too slow)."""
    copies_not_sent: int = 0
    """Copies the shadow's sender dropped (not served, so not in ``served``): the
    shadow was taken for down, or had ``--shadow-max-inflight`` copies in flight."""
    tokens: list[int] = field(default_factory=lambda: [0] * (2 * len(ROUTES)))
    """(input, output) per route in ROUTES order."""
    answers: int = 0
    """Of those served, the ones the upstream answered (not copies), and of those the
    404s: the proxy's own counts (``proxy/upstream_path.py``), set by ``run`` as it
    returns, for the exit line."""
    not_found: int = 0

    def summary(self) -> str:
        """The exit line's account: served, then where every one of them went."""
        written = f"{self.written:,} records written"
        if self.shed:
            written += f" ({self.shed:,} shed: without their prompt's body and analysis)"
        parts = [written, f"{self.dropped:,} dropped"]
        if self.sampled_out:
            parts.append(f"{self.sampled_out:,} sampled out")
        if self.failed:
            parts.append(f"{self.failed:,} could not be recorded")
        failed = f", {self.copies_failed:,} failed there" if self.copies_failed else ""
        if self.copies_unfinished:
            failed += f", {self.copies_unfinished:,} unfinished when the proxy stopped"
        if self.copies_cut:
            failed += f", {self.copies_cut:,} cut at a bound"
        if self.copies_not_sent:
            failed += (
                f"; {self.copies_not_sent:,} more not sent: the shadow was down or had "
                "--shadow-max-inflight in flight"
            )
        copies = ""
        if self.copies or self.copies_not_sent:
            copies = f" ({self.copies:,} of them copies to the shadow{failed})"
        note = not_found_note(self.answers, self.not_found)
        warning = f"; {note}" if note is not None else ""
        return f"{self.served:,} exchanges served{copies}: " + ", ".join(parts) + warning

    @classmethod
    def total(cls, counts: list[RecorderCounts]) -> RecorderCounts:
        """The sum over several proxies' recorders (``--workers``)."""
        names = (
            "served",
            "written",
            "dropped",
            "sampled_out",
            "failed",
            "shed",
            "backlog",
            "copies",
            "copies_failed",
            "copies_unfinished",
            "copies_cut",
            "copies_not_sent",
            "answers",
            "not_found",
        )
        return cls(**{name: sum(getattr(c, name) for c in counts) for name in names})


class RecorderClient:
    """The recorder sink in the proxy's process: batches exchanges to the recorder,
    and restarts the recorder when it dies."""

    def __init__(self, config: ProxyConfig) -> None:
        self.config = config
        self.restarts = 0
        self.served = 0
        self.copies = 0
        """Of ``served``, copies to ``--shadow``; the ones the shadow failed, the ones
        cut unfinished, and those not sent: the shadow sender's counts, set once it has
        closed (``proxy/server.py``)."""
        self.copies_failed = 0
        self.copies_unfinished = 0
        self.copies_cut = 0
        self.copies_not_sent = 0
        self.down: str | None = None
        """Why the recorder is not running, while it is not; None when it is."""
        self._retired = RecorderCounts()  # recorders that died
        self._final: RecorderCounts | None = None  # set once the last recorder has ended
        self._closing = False
        self._restarting: asyncio.Task[None] | None = None
        self._drop_logged_at = 0.0
        self._health = CaptureHealth(time.monotonic())
        self._watched_at = 0.0
        self._hung_logged = False
        self._spawn([])

    def _spawn(self, carried: list[Exchange]) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.stats: Any = ctx.Array("q", Stat.SIZE, lock=False)
        reader, writer = ctx.Pipe(duplex=False)
        ready_reader, ready_writer = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(
            target=child_main,
            args=(reader, ready_writer, self.config, self.stats),
            name="tailreplay-recorder",
            daemon=True,
        )
        self._proc.start()
        reader.close()
        ready_writer.close()
        self._pipe = BatchPipe(
            writer,
            limit=_PIPE_LIMIT,
            flush_s=_FLUSH_S,
            max_batch=_MAX_BATCH,
            on_drop=self._dropped,
            on_flush=self._watch,
        )
        for ex in carried:
            self._pipe.append(ex)
        self._ready = ready_reader

    async def attach(self) -> None:
        """Wait until the recorder is ready, then start sending from this loop."""
        message = await asyncio.get_running_loop().run_in_executor(None, self._wait_ready)
        if message != "ok":
            from tailreplay.errors import InputError

            raise InputError(message)
        await self._connect()

    async def _connect(self) -> None:
        await self._pipe.attach()
        asyncio.get_running_loop().add_reader(self._proc.sentinel, self._on_exit)

    def _wait_ready(self) -> str:
        if not self._ready.poll(60):
            return "the recorder process did not start"
        try:
            message: str = self._ready.recv()
        except EOFError:
            return "the recorder process exited at start"
        return message

    # -- the counts ------------------------------------------------------------------

    def counts(self) -> RecorderCounts:
        """Totals over every recorder so far, exact at the time of the call."""
        if self._final is not None:
            return self._final
        s, r = self.stats, self._retired
        return RecorderCounts(
            served=self.served,
            written=r.written + s[Stat.WRITTEN],
            dropped=r.dropped + self._pipe.dropped + s[Stat.WRITER_DROPPED],
            sampled_out=r.sampled_out + s[Stat.SAMPLED_OUT],
            failed=r.failed + s[Stat.FAILED],
            shed=r.shed + s[Stat.SHED],
            backlog=self._pipe.pending + max(self._waiting(), 0),
            copies=self.copies,
            copies_failed=self.copies_failed,
            copies_unfinished=self.copies_unfinished,
            copies_cut=self.copies_cut,
            copies_not_sent=self.copies_not_sent,
            tokens=[a + b for a, b in zip(r.tokens, s[Stat.TOKENS :], strict=True)],
        )

    @property
    def total_dropped(self) -> int:
        return self.counts().dropped

    def problem(self) -> str | None:
        """Why capture is down or degraded now (/healthz, capture_up), or None."""
        return self.down or self._health.problem(time.monotonic())

    # -- supervision -----------------------------------------------------------------

    def _waiting(self) -> int:
        """Exchanges sent to the current recorder that it has not yet written, dropped,
        sampled out or failed."""
        return self._pipe.sent - int(sum(self.stats[i] for i in Stat.ACCOUNTED))

    def _progress(self) -> int:
        """A count that moves while the recorder works: its counters, and its CPU time,
        which moves while it builds one large record (a 10 MB body redacted takes
        seconds) and stands still when it is stopped or blocked on a disk."""
        s = self.stats
        counted = int(s[Stat.HANDLED] + s[Stat.WRITTEN] + s[Stat.WRITER_DROPPED])
        return counted + _cpu_ticks(self._proc.pid)

    def _watch(self) -> None:
        """Every flush, at most every ``_WATCH_EVERY_S``: is the recorder making progress?"""
        now = time.monotonic()
        if now - self._watched_at < _WATCH_EVERY_S or self.down is not None:
            return
        self._watched_at = now
        health = self._health
        waiting = self._waiting()
        health.observe(now, waiting=waiting, progress=self._progress(), dropped=self.total_dropped)
        stalled = health.stalled_s(now)
        if stalled < HUNG_S:
            if self._hung_logged:
                log.warning("the recorder is making progress again; capture resumed")
                self._hung_logged = False
            return
        if not self._hung_logged:
            log.error("%s; restarting it after %.0f s", health.problem(now), RESTART_HUNG_S)
            self._hung_logged = True
        if stalled >= RESTART_HUNG_S and not self._closing:
            self._proc.kill()  # the sentinel fires: _on_exit counts and restarts

    def _on_exit(self) -> None:
        """The recorder died: count what it never wrote, and start another."""
        asyncio.get_running_loop().remove_reader(self._proc.sentinel)
        if self._closing:
            return
        self._proc.join(0.5)  # reap it (dead already: the sentinel closed at its exit)
        lost = self._retire()
        now = time.monotonic()
        self._health.restarted(now)
        # Its loss counts as a drop now, not when the next watch happens to look.
        self._health.observe(now, waiting=0, progress=-1, dropped=self.total_dropped)
        self._hung_logged = False
        code = self._proc.exitcode
        self.down = f"the recorder exited (code {code}); restarting it"
        log.error(
            "the recorder process exited (code %s); %d exchanges it had were not recorded "
            "(counted as dropped); restarting it",
            code,
            lost,
        )
        carried = self._pipe.take_pending()
        self._pipe.close()
        self._spawn(carried)
        self._restarting = asyncio.get_running_loop().create_task(self._restart())

    def _retire(self) -> int:
        """Fold the dead recorder's counts into the totals; returns the exchanges it lost."""
        s, r = self.stats, self._retired
        accounted: int = sum(s[i] for i in Stat.ACCOUNTED)
        lost = max(self._pipe.sent - accounted, 0)
        r.written += s[Stat.WRITTEN]
        r.dropped += s[Stat.WRITER_DROPPED] + self._pipe.dropped + lost
        r.sampled_out += s[Stat.SAMPLED_OUT]
        r.failed += s[Stat.FAILED]
        r.shed += s[Stat.SHED]
        r.tokens = [a + b for a, b in zip(r.tokens, s[Stat.TOKENS :], strict=True)]
        return lost

    async def _restart(self) -> None:
        loop = asyncio.get_running_loop()
        delay = _RESTART_BACKOFF_S[0]
        while not self._closing:
            message = await loop.run_in_executor(None, self._wait_ready)
            if self._closing:
                return
            if message == "ok":
                await self._connect()
                self.restarts += 1
                self.down = None
                log.warning("the recorder restarted; capture resumed")
                return
            self.down = f"the recorder cannot start: {message}"
            log.error("%s; retrying in %.1f s", self.down, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, _RESTART_BACKOFF_S[1])
            self._proc.kill()  # it may be alive and stuck (stopped before it was ready)
            await loop.run_in_executor(None, self._proc.join, 5.0)
            self._retire()
            carried = self._pipe.take_pending()
            self._pipe.close()
            self._spawn(carried)

    # -- the sink --------------------------------------------------------------------

    def on_request(self, ex: Exchange) -> None:
        pass

    def on_chunk(self, ex: Exchange, size: int) -> None:
        pass

    def on_complete(self, ex: Exchange) -> None:
        if ex.probe:
            return
        self.served += 1
        # The recorder is behind or gone past the pipe's limits: drop, never block.
        self._pipe.append(ex)

    def _dropped(self, n: int) -> None:
        now = time.monotonic()
        if now - self._drop_logged_at > 10:  # one line per incident, not per record
            log.warning("recorder behind: dropping records (%d so far)", self.total_dropped)
            self._drop_logged_at = now

    async def close(self, timeout_s: float = 60.0) -> None:
        """Send what is left, close the pipe, and wait for the recorder to finish: while
        it makes progress, up to ``timeout_s``. One that stops making progress (hung) is
        killed after ``HUNG_S``, and what it never wrote is counted as dropped."""
        self._closing = True
        starting = self._restarting is not None and not self._restarting.done()
        if self._restarting is not None and starting:
            self._restarting.cancel()
        loop = asyncio.get_running_loop()
        loop.remove_reader(self._proc.sentinel)
        self._pipe.close()  # not connected yet: what waits for it is counted as dropped
        if starting:  # nothing was sent to it, and it may never be ready (stopped)
            self._proc.kill()
            await loop.run_in_executor(None, self._proc.join, 5.0)
        else:
            await self._finish(loop, timeout_s)
        self._retire()
        self._final = RecorderCounts(
            served=self.served,
            written=self._retired.written,
            dropped=self._retired.dropped,
            sampled_out=self._retired.sampled_out,
            failed=self._retired.failed,
            shed=self._retired.shed,
            copies=self.copies,
            copies_failed=self.copies_failed,
            copies_unfinished=self.copies_unfinished,
            copies_cut=self.copies_cut,
            copies_not_sent=self.copies_not_sent,
            tokens=self._retired.tokens,
        )

    async def _finish(self, loop: asyncio.AbstractEventLoop, timeout_s: float) -> None:
        started = progress_at = time.monotonic()
        mark = self._progress()
        while True:
            await loop.run_in_executor(None, self._proc.join, _WATCH_EVERY_S)
            if not self._proc.is_alive():
                return
            now = time.monotonic()
            progress = self._progress()  # reads /proc: once a round
            if progress != mark:
                mark, progress_at = progress, now
            # Nothing waiting: it is closing its files (an fsync may take a while).
            waiting = self._waiting()
            if (waiting > 0 and now - progress_at >= HUNG_S) or now - started >= timeout_s:
                break
        log.warning(
            "the recorder stopped making progress while finishing (%d exchanges unwritten, "
            "counted as dropped); stopping it",
            max(waiting, 0),
        )
        self._proc.kill()
        await loop.run_in_executor(None, self._proc.join, 5.0)


def _cpu_ticks(pid: int | None) -> int:
    """The CPU time a process has used, in clock ticks (Linux /proc); 0 where unknown."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return 0
