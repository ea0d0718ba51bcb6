"""What the ``proxy --shadow`` tests share: a production upstream at an LLM's pace,
shadows that misbehave, an open-loop client that loads several proxies alike, and a
shadowed capture written directly."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from aiohttp import ClientSession, TCPConnector, web

from tests.helpers import write_plain

__all__ = [
    "EVENTS",
    "HEADER",
    "JSON_ANSWER",
    "T0",
    "fixed_upstream",
    "open_loop",
    "shadow_app",
    "shadow_counts",
    "shadowed_capture",
    "stop_proxy",
]


T0 = 1_700_000_000 * 10**9
HEADER = {
    "format": "tailreplay",
    "version": 1,
    "source": "proxy",
    "upstream": "http://127.0.0.1:8000",
    "capture": {"shadow": {"target": "http://127.0.0.1:9000", "share": 0.25}},
}


def shadowed_capture(path: Path, n: int = 400) -> Path:
    """A capture as ``proxy --shadow`` writes it: ``n`` production exchanges of
    200-400 ms, every fourth copied to a shadow that takes twice as long (and fails
    one copy in fifty)."""
    rng = random.Random(3)
    maps: list[dict[str, Any]] = []
    for i in range(n):
        trace, span = rng.randbytes(16), rng.randbytes(8)
        # In the share (25%) by trace id, as the proxy picks, exactly when copied.
        first = rng.randrange(0, 0x40) if i % 4 == 0 else rng.randrange(0x40, 0x100)
        trace = bytes([first]) + trace[1:]
        duration = rng.randint(200, 400) * 10**6
        prod = {
            "start_ns": T0 + i * 10**8,
            "trace_id": trace,
            "span_id": span,
            "method": "POST",
            "path": "/v1/chat/completions",
            "status": 200,
            "stream": True,
            "duration_ns": duration,
            "ttfb_ns": duration // 4,
            "input_tokens": rng.choice([100, 600, 3000]),
            "output_tokens": 40,
        }
        maps.append(prod)
        if i % 4 == 0:
            copy = {**prod, "span_id": rng.randbytes(8), "shadow_of": span}
            copy.update(start_ns=prod["start_ns"] + 10**5, duration_ns=2 * duration)
            copy["ttfb_ns"] = duration // 2
            if i % 200 == 0:
                copy.update(status=500, error="http_500")
            maps.append(copy)
    return write_plain(path, maps, HEADER)


def stop_proxy(proc: subprocess.Popen[bytes]) -> bytes:
    """SIGTERM, and the proxy's output once it has drained and closed its archive."""
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    return out


def shadow_counts(admin: str) -> dict[str, float]:
    """The proxy's shadow counters and copies in flight, read off its /metrics."""
    text = urllib.request.urlopen(f"{admin}/metrics", timeout=10).read().decode()
    counts = {}
    for name in ("sent", "dropped", "errors", "in_flight", "throttled", "cut"):
        suffix = "" if name == "in_flight" else "_total"
        line = next(
            x for x in text.splitlines() if x.startswith(f"tailreplay_proxy_shadow_{name}{suffix} ")
        )
        counts[name] = float(line.split()[1])
    return counts


JSON_ANSWER = json.dumps(
    {
        "id": "x",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }
).encode()
EVENTS = [
    b'data: {"id":"x","choices":[{"index":0,"delta":{"content":"o"}}]}\n\n',
    b'data: {"id":"x","choices":[{"index":0,"delta":{"content":"k"}}]}\n\n',
    b'data: {"id":"x","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n',
    b"data: [DONE]\n\n",
]


# Production answers at an LLM's pace: the first token after 60 ms, the whole answer
# after 150 ms. 5% of that (7.5 ms) is above a busy machine's timer noise; the added
# milliseconds of a fast upstream are measured by bench/shadow_faults.py.
FIRST_S, EVENT_S, JSON_S = 0.060, 0.030, 0.150


def fixed_upstream() -> web.Application:
    """Production: the same bytes every time, at the pace above."""

    async def answer(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if not body.get("stream"):
            await asyncio.sleep(JSON_S)
            return web.Response(body=JSON_ANSWER, content_type="application/json")
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for i, event in enumerate(EVENTS):
            await asyncio.sleep(EVENT_S if i else FIRST_S)
            await response.write(event)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", answer)
    return app


def shadow_app(kind: str, seen: list[dict[str, Any]]) -> web.Application:
    """A shadow that hangs (reads the copy, never answers), streams without end as fast
    as it can, or answers 500; every copy's path, headers and body kept in ``seen``."""

    async def answer(request: web.Request) -> web.StreamResponse:
        seen.append(
            {
                "path": request.path_qs,
                "headers": dict(request.headers),
                "body": await request.json(),
            }
        )
        if kind == "hang":
            await asyncio.sleep(3600)
        if kind == "endless":
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            event = EVENTS[0] * 64
            with contextlib.suppress(ConnectionError):
                for _ in range(10**7):  # bounded: the proxy cuts it at 16 MiB long before
                    await response.write(event)
            return response
        return web.json_response({"error": {"message": "down"}}, status=500)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", answer)
    return app


async def open_loop(
    bases: list[str], rounds: int, every_s: float = 0.02
) -> list[list[tuple[float, bytes]]]:
    """A round every ``every_s``, each sending one request to every proxy at once (in a
    new order each round; streamed every other round): at 20 ms, about 8 in flight at
    each, and the machine's load falls on every proxy alike. Per proxy: (seconds, body)
    each, in round order."""
    out: list[list[tuple[float, bytes]]] = [[(0.0, b"")] * rounds for _ in bases]
    order = random.Random(0)
    headers = {"Authorization": "Bearer sk-client-credential-0123456789"}

    async def one(session: ClientSession, r: int, i: int) -> None:
        payload = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        payload["stream"] = r % 2 == 0
        payload["stream_options"] = {"include_usage": True}
        t0 = time.perf_counter()
        async with session.post(
            f"{bases[i]}/v1/chat/completions", json=payload, headers=headers
        ) as response:
            body = await response.read()
        out[i][r] = (time.perf_counter() - t0, body)

    async with ClientSession(connector=TCPConnector(limit=0)) as session:
        tasks = []
        for r in range(rounds):
            proxies = list(range(len(bases)))
            order.shuffle(proxies)
            tasks += [asyncio.create_task(one(session, r, i)) for i in proxies]
            await asyncio.sleep(every_s)
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=120)
    return out
