"""The replayer does not trust its target: a compressed answer it never asked for is
not inflated, one it asked for inflates only so far, and a response head or a plain
body past its bounds ends the request as ``bad_response`` — quickly, and in memory
bounded by the bounds, not by what the target sends."""

from __future__ import annotations

import asyncio
import socketserver
import threading
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tailreplay.http.connection import MAX_HEAD_BYTES, MAX_HEADER_LINES
from tailreplay.replayer.request import RequestSpec
from tailreplay.replayer.results import result_record
from tailreplay.replayer.schedule import Planned
from tailreplay.replayer.transport import MAX_BODY_BYTES, HttpTransport, Outcome
from tailreplay.traces.archive.record import Record
from tests.helpers import metric
from tests.proxy_helpers import echo_upstream, rss_mb, start_proxy_process

BOMB_BYTES = 256 << 20


def _gzip_bomb() -> bytes:
    """256 MiB of zeros as one gzip member (about 250 KB)."""
    z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(1 << 20)
    return b"".join([*(z.compress(block) for _ in range(BOMB_BYTES >> 20)), z.flush()])


BOMB = _gzip_bomb()


def _answer(head: bytes, body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\n%bContent-Length: %d\r\n\r\n%b" % (head, len(body), body)


def _bomb() -> Iterator[bytes]:
    yield _answer(b"Content-Type: application/json\r\nContent-Encoding: gzip\r\n", BOMB)


def _many_headers() -> Iterator[bytes]:
    yield b"HTTP/1.1 200 OK\r\n"
    for i in range(100_000):
        yield b"X-H%d: v\r\n" % i
    yield b"Content-Length: 0\r\n\r\n"


def _big_header() -> Iterator[bytes]:
    yield b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * (1 << 20) + b"\r\nContent-Length: 0\r\n\r\n"


def _padded_header() -> Iterator[bytes]:
    """One header whose value is preceded by 50 MB of blanks (which a parser skips)."""
    yield b"HTTP/1.1 200 OK\r\nX-Pad:"
    block = b" " * (1 << 20)
    for _ in range(50):
        yield block
    yield b"v\r\nContent-Length: 0\r\n\r\n"


def _early_hints() -> Iterator[bytes]:
    """200,000 informational heads (10 MB) before the answer."""
    for _ in range(2_000):
        yield b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" * 100
    yield b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"


HEADS = ["100,000 headers", "a 1 MiB header", "50 MB of blanks in a header", "200,000 early hints"]


def _big_body() -> Iterator[bytes]:
    yield b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
    yield b"Content-Length: %d\r\n\r\n" % (100 << 20)
    block = bytes(1 << 20)  # one block sent a hundred times: the server holds 1 MiB
    for _ in range(100):
        yield block


HTML_PAGE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 17\r\n\r\n<html>oops</html>"
)

REDIRECT = (
    b"HTTP/1.1 307 Temporary Redirect\r\n"
    b"Location: http://127.0.0.1:9/v1\r\nContent-Length: 0\r\n\r\n"
)

_JSON_BODY = b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
NOT_HTTP = {
    "a garbage status line": b"this is not HTTP\r\n\r\n",
    "a status of 099": b"HTTP/1.1 099 OK\r\n" + _JSON_BODY,
    "a status of 000": b"HTTP/1.1 000 OK\r\n" + _JSON_BODY,
    "an RTSP answer": b"RTSP/1.0 200 OK\r\n" + _JSON_BODY,
    "an HTTP/2.0 status line": b"HTTP/2.0 200 OK\r\n" + _JSON_BODY,
    "an HTTP/0.9 answer": b'{"choices": []}',
    "a malformed chunk": b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
    b'Transfer-Encoding: chunked\r\n\r\n5\r\n{"a":xx\r\nzz\r\n',
}

# Made as they are sent: the server runs in this process, whose allocations count.
ANSWERS: dict[str, Callable[[], Iterator[bytes]]] = {
    "gzip bomb": _bomb,
    "100,000 headers": _many_headers,
    "a 1 MiB header": _big_header,
    "50 MB of blanks in a header": _padded_header,
    "200,000 early hints": _early_hints,
    "a 100 MiB body": _big_body,
    "an HTML page": lambda: iter([HTML_PAGE]),
    "a redirect": lambda: iter([REDIRECT]),
    **{name: (lambda answer=answer: iter([answer])) for name, answer in NOT_HTTP.items()},
}


class _Hostile(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            more = self.request.recv(65536)
            if not more:
                return
            data += more
        try:
            for piece in self.server.answer():  # type: ignore[attr-defined]
                self.request.sendall(piece)
        except OSError:
            pass  # the client stopped reading: what it should do


@pytest.fixture
def hostile() -> Iterator[Callable[[str], str]]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Hostile)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()

    def serving(name: str) -> str:
        server.answer = ANSWERS[name]  # type: ignore[attr-defined]
        return f"http://127.0.0.1:{server.server_address[1]}"

    try:
        yield serving
    finally:
        server.shutdown()
        server.server_close()


def _send(target: str, headers: dict[str, str]) -> tuple[Outcome, float, int]:
    """One request through the replay's transport: its outcome, seconds, peak bytes
    allocated meanwhile."""

    async def go() -> Any:
        transport = HttpTransport(target, connections=2, timeout_s=60)
        try:
            spec = RequestSpec("POST", "/v1/chat/completions", b"{}", False, None)
            return await transport.send(spec, headers)
        finally:
            await transport.close()

    tracemalloc.start()
    began = time.monotonic()
    try:
        outcome = asyncio.run(go())
        return outcome, time.monotonic() - began, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_compressed_answer_not_asked_for_is_not_inflated(hostile: Callable[[str], str]) -> None:
    out, seconds, peak = _send(hostile("gzip bomb"), {})
    assert out.error == "bad_response" and "not asked for" in out.error_text
    assert out.bytes_out == 0 and seconds < 10 and peak < 32 << 20


def test_a_gzip_bomb_inflates_only_to_its_bound(hostile: Callable[[str], str]) -> None:
    out, seconds, peak = _send(hostile("gzip bomb"), {"Accept-Encoding": "gzip"})
    assert out.error == "bad_response" and "bound" in out.error_text
    # Inflated at most 100x the compressed bytes read (the bomb is ~1000x), never 256 MiB.
    assert out.bytes_out <= 100 * len(BOMB) + 65536 and out.bytes_out < BOMB_BYTES // 4
    assert seconds < 10 and peak < 64 << 20


@pytest.mark.parametrize("name", HEADS)
def test_a_response_head_past_its_bounds_is_refused(
    hostile: Callable[[str], str], name: str
) -> None:
    out, seconds, peak = _send(hostile(name), {})
    assert out.error == "bad_response" and out.status == 0
    assert seconds < 10 and peak < 16 << 20
    assert MAX_HEADER_LINES <= 256 and MAX_HEAD_BYTES <= 64 << 10


def test_an_answer_that_is_not_the_api_s_says_why(hostile: Callable[[str], str]) -> None:
    out, _, _ = _send(hostile("an HTML page"), {})
    assert out.status == 200 and out.error == "bad_response"
    assert out.error_text == "a 200 whose body is not JSON (text/html)"
    spec = RequestSpec("POST", "/v1/chat/completions", b"{}", False, None)
    item = Planned(0.0, Record(start_ns=1), 0, False, None)
    record = result_record(item, 1, shard=None, spec=spec, outcome=out)
    assert record.error_message == out.error_text  # the summary's reason beside its kind


@pytest.mark.parametrize("name", NOT_HTTP)
def test_an_answer_that_is_not_http_is_a_bad_response(
    hostile: Callable[[str], str], name: str
) -> None:
    """Not a reset: the target answered, with bytes no HTTP/1.1 client can read."""
    out, seconds, _ = _send(hostile(name), {})
    assert out.error == "bad_response" and out.error_text.startswith("malformed response")
    assert seconds < 10


def test_a_redirect_is_the_request_s_result_and_an_error(hostile: Callable[[str], str]) -> None:
    out, _, _ = _send(hostile("a redirect"), {})
    assert (out.status, out.error) == (307, "http_307")


def test_a_plain_body_past_its_bound_is_cut(hostile: Callable[[str], str]) -> None:
    out, seconds, peak = _send(hostile("a 100 MiB body"), {})
    assert out.error == "bad_response" and "MiB" in out.error_text
    assert out.bytes_out <= MAX_BODY_BYTES and seconds < 20 and peak < 32 << 20


@pytest.mark.parametrize("name", HEADS)
async def test_the_proxy_answers_502_to_an_upstream_head_past_its_bounds(
    hostile: Callable[[str], str], name: str, tmp_path: Path
) -> None:
    """The proxy's upstream is a target too: its head is bounded as the replayer's is,
    the client gets a 502, and the proxy does not grow by what the upstream sends."""
    proxy, url, _ = start_proxy_process(hostile(name), tmp_path / "capture")
    try:
        async with aiohttp.ClientSession() as s:

            async def once() -> tuple[int, float]:
                began = time.monotonic()
                async with s.post(url + "/v1/chat/completions", json={"model": "m"}) as r:
                    await r.read()
                    return r.status, time.monotonic() - began

            await once()  # the first: imports and pools, before the baseline
            before = rss_mb(proxy.pid)
            answers = [await once() for _ in range(20)]
            growth = rss_mb(proxy.pid) - before
    finally:
        proxy.kill()
        proxy.wait(timeout=30)
    assert [status for status, _ in answers] == [502] * 20
    assert max(seconds for _, seconds in answers) < 10
    assert growth < 8, growth  # 20 answers of up to 11 MB each were not held


MALFORMED = [
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n",
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
]


async def test_malformed_requests_are_counted_not_each_logged_with_a_traceback(
    tmp_path: Path,
) -> None:
    """aiohttp logs every request its parser refuses with an 11-line traceback: the
    proxy's log gets one line per 10 s instead, and a counter every one."""
    async with echo_upstream() as upstream:
        proxy, url, admin = start_proxy_process(upstream, tmp_path / "capture")
        try:
            host, port = url.removeprefix("http://").rsplit(":", 1)
            for i in range(60):
                reader, writer = await asyncio.open_connection(host, int(port))
                writer.write(MALFORMED[i % len(MALFORMED)])
                answer = await asyncio.wait_for(reader.read(), 10.0)
                assert answer.split(b" ", 2)[1] == b"400", answer[:80]
                writer.close()
            malformed = await metric(admin, "tailreplay_proxy_connections_malformed_total")
        finally:
            proxy.terminate()
            _, err = proxy.communicate(timeout=60)
    assert malformed == 60
    assert b"Traceback" not in err
    assert err.count(b"malformed requests answered 400") == 1, err.decode()[-2000:]


LEAKY = [
    b"POST /v1/chat/completions HTTP/1.1\nHost: x\nAuthorization: Bearer %s\n"
    b"Content-Length: 2\n\n{}",
    b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Api-Key : %s\r\n\r\n",
    b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Long: %s" + b"a" * 9000 + b"\r\n\r\n",
]


@pytest.mark.parametrize("shape", range(len(LEAKY)), ids=["bare-lf", "space-colon", "long"])
async def test_a_malformed_request_s_credentials_never_reach_the_log(
    tmp_path: Path, shape: int
) -> None:
    """aiohttp's parser error quotes the request's bytes (a bare-LF request whole): the
    proxy's warning names the kind of fault only."""
    secret = b"sk-proj-LEAKMALFORMED0123456789abcdefABCDEF"
    async with echo_upstream() as upstream:
        proxy, url, _ = start_proxy_process(upstream, tmp_path / "capture")
        try:
            host, port = url.removeprefix("http://").rsplit(":", 1)
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(LEAKY[shape] % secret)
            answer = await asyncio.wait_for(reader.read(), 10.0)
            assert answer.split(b" ", 2)[1] in (b"400", b"431"), answer[:80]
            writer.close()
        finally:
            proxy.terminate()
            _, err = proxy.communicate(timeout=60)
    assert b"malformed requests answered 400" in err, err.decode()[-2000:]
    assert secret not in err and b"LEAKMALFORMED" not in err, err.decode()[-2000:]
