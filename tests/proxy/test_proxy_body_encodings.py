"""Request bodies sent with a Content-Encoding (gzip, deflate, br, zstd) reach the
upstream and the shadow as the client sent them; the recorder decodes its own copy,
within --max-body, for the record's fields, and records what it cannot decode
without them.

The upstream here reads bodies raw (aiohttp's ``auto_decompress=False``), keeps the
bytes and the header as they came, and decodes them itself with the codecs' own
modules before answering as ``tests/fixed_upstream.py`` does.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import brotli
import pytest
import zstandard
from aiohttp import web
from yarl import URL

from tailreplay.proxy.content_coding import MAX_CODINGS, decode_body, named_codings
from tailreplay.proxy.shadow import ShadowConfig
from tailreplay.traces.archive.reader import ArchiveReader
from tailreplay.traces.archive.record import Record
from tests.fixed_upstream import PROMPT_TOKENS, answer
from tests.proxy_helpers import proxy_to, records, serve_app

ENCODE: dict[str, Callable[[bytes], bytes]] = {
    "gzip": gzip.compress,
    "deflate": zlib.compress,  # HTTP's deflate is zlib's format
    "br": brotli.compress,
    "zstd": zstandard.ZstdCompressor().compress,
}
DECODE: dict[str, Callable[[bytes], bytes]] = {
    "gzip": gzip.decompress,
    "deflate": zlib.decompress,
    "br": brotli.decompress,
    "zstd": zstandard.ZstdDecompressor().decompress,
}
CORRUPT_GZIP = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03" + b"this is no deflate stream"

Seen = list[tuple[str | None, bytes]]
"""(Content-Encoding, the body's bytes) of each request, as the upstream received it."""
SEEN = web.AppKey("seen", Seen)


def _body(stream: bool, content: str = "Tell me about tail latency. " * 40) -> bytes:
    doc = {
        "model": "fixed",
        "messages": [{"role": "user", "content": content}],
        "stream": stream,
        "max_tokens": 7,
    }
    return json.dumps(doc).encode()


async def _chat(request: web.Request) -> web.StreamResponse:
    raw = await request.read()
    coding = request.headers.get("Content-Encoding")
    request.app[SEEN].append((coding, raw))
    try:
        doc = json.loads(DECODE[coding](raw) if coding else raw)
    except (ValueError, OSError, EOFError, zlib.error, brotli.error, zstandard.ZstdError):
        return web.json_response({"error": {"message": "cannot read the body"}}, status=400)
    return await answer(request, doc)


@asynccontextmanager
async def raw_upstream() -> AsyncIterator[tuple[str, Seen]]:
    """An upstream that keeps request bodies as they came; its URL and what it saw."""
    app = web.Application()
    app[SEEN] = []
    app.router.add_post("/v1/chat/completions", _chat)
    async with serve_app(app, auto_decompress=False) as url:
        yield url, app[SEEN]


async def _post(base: str, body: bytes, coding: str | None) -> tuple[int, bytes]:
    headers = {"Content-Type": "application/json"}
    if coding is not None:
        headers["Content-Encoding"] = coding
    async with (
        aiohttp.ClientSession(auto_decompress=False) as s,
        s.post(base + "/v1/chat/completions", data=body, headers=headers) as r,
    ):
        return r.status, await r.read()


def _coding(record: Record) -> str | None:
    return next((v for k, v in record.req_headers or [] if k.lower() == "content-encoding"), None)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("coding", list(ENCODE))
async def test_a_compressed_body_reaches_the_upstream_as_sent_and_is_recorded_decoded(
    tmp_path: Path, coding: str, stream: bool
) -> None:
    plain = _body(stream)
    sent = ENCODE[coding](plain)
    out = tmp_path / "out"
    async with raw_upstream() as (upstream, seen):
        direct = await _post(upstream, sent, coding)
        seen.clear()
        async with proxy_to(upstream, out, bodies="full") as proxy:
            proxied = await _post(proxy.url, sent, coding)
            await _post(proxy.url, plain, None)  # the same request uncompressed
    assert direct[0] == 200 and proxied == direct
    # Byte for byte, labelled as sent: no inflating, no usage injected into it.
    assert seen[0] == (coding, sent)
    by_coding = {_coding(r): r for r in records(out)}
    compressed, uncompressed = by_coding[coding], by_coding[None]
    assert compressed.status == 200 and compressed.bytes_in == len(sent)
    assert compressed.req_body == plain  # --bodies full keeps the decoded JSON
    assert (compressed.model, compressed.stream, compressed.max_tokens) == ("fixed", stream, 7)
    for name in ("model", "stream", "max_tokens", "prefix_hashes", "prompt_entropy_mbits"):
        assert getattr(compressed, name) == getattr(uncompressed, name), name
    assert compressed.prefix_hashes
    if stream:
        # Not asked for usage (the bytes could not be edited): counted from the prompt.
        assert compressed.tokens_source == "estimate" and compressed.input_tokens
    else:
        assert compressed.tokens_source == "usage"
        assert compressed.input_tokens == PROMPT_TOKENS


@pytest.mark.parametrize("coding", list(ENCODE))
async def test_the_shadow_gets_a_compressed_body_as_the_client_sent_it(
    tmp_path: Path, coding: str
) -> None:
    """Neither the model map nor the usage the shadow asks for touches its bytes."""
    sent = ENCODE[coding](_body(stream=True))
    async with raw_upstream() as (upstream, seen), raw_upstream() as (shadow_url, copies):
        shadow = ShadowConfig(URL(shadow_url), share=1.0, model_map=(("fixed", "other"),))
        async with proxy_to(upstream, tmp_path / "out", shadow=shadow) as proxy:
            status, _ = await _post(proxy.url, sent, coding)
    assert status == 200
    assert seen == [(coding, sent)]
    assert copies == [(coding, sent)]  # the proxy waits for copies as it stops
    files = sorted((tmp_path / "out").glob("*.msgpack"))
    (copy,) = ArchiveReader(files, shadows="only")
    assert copy.model == "fixed" and copy.stream is True


async def test_a_body_labelled_with_a_coding_is_never_edited_even_if_it_is_json(
    tmp_path: Path,
) -> None:
    """A streamed request's JSON labelled gzip (a client's mistake): neither usage
    injection nor the shadow's model map may rewrite it under that label."""
    sent = _body(stream=True)
    async with raw_upstream() as (upstream, seen), raw_upstream() as (shadow_url, copies):
        shadow = ShadowConfig(URL(shadow_url), share=1.0, model_map=(("fixed", "other"),))
        async with proxy_to(upstream, tmp_path / "out", shadow=shadow) as proxy:
            status, _ = await _post(proxy.url, sent, "gzip")
    assert status == 400  # the upstream cannot read it, as it could not direct
    assert seen == copies == [("gzip", sent)]


async def test_redacted_bodies_are_the_decoded_json_redacted(tmp_path: Path) -> None:
    plain = _body(stream=False, content="Write to jane.doe@example.com about the outage.")
    async with (
        raw_upstream() as (upstream, _),
        proxy_to(upstream, tmp_path / "out", bodies="redacted") as proxy,
    ):
        await _post(proxy.url, ENCODE["gzip"](plain), "gzip")
    (record,) = records(tmp_path / "out")
    assert record.req_body is not None
    assert json.loads(record.req_body)["model"] == "fixed"
    assert b"jane.doe@example.com" not in record.req_body


async def test_a_corrupt_body_passes_unchanged_and_is_recorded_without_its_fields(
    tmp_path: Path,
) -> None:
    async with raw_upstream() as (upstream, seen):
        direct = await _post(upstream, CORRUPT_GZIP, "gzip")
        seen.clear()
        async with proxy_to(upstream, tmp_path / "out", bodies="full") as proxy:
            proxied = await _post(proxy.url, CORRUPT_GZIP, "gzip")
    assert proxied == direct and direct[0] == 400  # the upstream's verdict, not the proxy's
    assert seen == [("gzip", CORRUPT_GZIP)]
    (record,) = records(tmp_path / "out")
    assert record.status == 400 and record.bytes_in == len(CORRUPT_GZIP)
    assert (record.model, record.stream, record.input_tokens) == (None, None, None)
    assert record.req_body is None and record.prefix_hashes is None


async def test_a_body_that_inflates_past_max_body_is_recorded_without_its_fields(
    tmp_path: Path,
) -> None:
    """4 MiB of prompt in 4 KB of gzip, through a proxy whose --max-body is 1 MiB: the
    recorder stops at the bound (the upstream, with no such bound, answers it)."""
    plain = _body(stream=False, content="a" * (4 << 20))
    sent = gzip.compress(plain)
    assert len(sent) < 20_000
    async with (
        raw_upstream() as (upstream, seen),
        proxy_to(upstream, tmp_path / "out", bodies="full", max_body=1 << 20) as proxy,
    ):
        status, _ = await _post(proxy.url, sent, "gzip")
    assert status == 200 and seen == [("gzip", sent)]
    (record,) = records(tmp_path / "out")
    assert record.status == 200
    assert (record.model, record.stream, record.req_body, record.prefix_hashes) == (
        None,
        None,
        None,
        None,
    )


# -- the recorder's decoder, on bytes ---------------------------------------------------

PLAIN = _body(stream=False)


@pytest.mark.parametrize("coding", list(ENCODE))
def test_each_coding_decodes_within_its_bound_and_not_past_it(coding: str) -> None:
    data = ENCODE[coding](PLAIN)
    assert decode_body(data, [coding], len(PLAIN)) == PLAIN
    assert decode_body(data, [coding], len(PLAIN) - 1) is None


@pytest.mark.parametrize("coding", list(ENCODE))
def test_a_bomb_stops_at_the_bound(coding: str) -> None:
    bomb = ENCODE[coding](b"\0" * (64 << 20))
    assert len(bomb) < 100_000
    assert decode_body(bomb, [coding], 1 << 20) is None


@pytest.mark.parametrize("coding", list(ENCODE))
def test_bytes_cut_short_or_not_of_the_coding_are_undecodable(coding: str) -> None:
    data = ENCODE[coding](PLAIN)
    assert decode_body(data[: len(data) // 2], [coding], 1 << 20) is None
    assert decode_body(data[:-1], [coding], 1 << 20) is None
    assert decode_body(PLAIN, [coding], 1 << 20) is None


def test_raw_deflate_several_gzip_members_and_stacked_codings_decode() -> None:
    raw = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    assert decode_body(raw.compress(PLAIN) + raw.flush(), ["deflate"], 1 << 20) == PLAIN
    members = gzip.compress(PLAIN[:10]) + gzip.compress(PLAIN[10:])
    assert decode_body(members, ["gzip"], 1 << 20) == PLAIN
    assert decode_body(members + b"junk", ["gzip"], 1 << 20) is None
    stacked = brotli.compress(gzip.compress(PLAIN))
    assert decode_body(stacked, named_codings(["gzip", "br"]), 1 << 20) == PLAIN
    too_many = ["gzip"] * (MAX_CODINGS + 1)
    data = PLAIN
    for _ in too_many:
        data = gzip.compress(data)
    assert decode_body(data, too_many, 1 << 20) is None


@pytest.mark.parametrize(
    ("values", "codings"),
    [
        ([], []),
        (["identity"], []),
        (["GZip"], ["gzip"]),
        (["x-gzip"], ["gzip"]),
        (["gzip, br"], ["gzip", "br"]),
        (["deflate", " zstd ,identity"], ["deflate", "zstd"]),
    ],
)
def test_content_encoding_values_name_their_codings(values: list[str], codings: list[str]) -> None:
    assert named_codings(values) == codings


def test_an_unknown_coding_is_undecodable() -> None:
    assert decode_body(PLAIN, ["compress"], 1 << 20) is None
    assert decode_body(PLAIN, [], 1 << 20) == PLAIN


async def test_a_streamed_upload_s_bytes_are_counted_as_they_pass(tmp_path: Path) -> None:
    """A route no dialect reads is streamed to the upstream: its record counts the
    bytes that passed, chunked (no declared length) or not."""
    received: list[bytes] = []

    async def files(request: web.Request) -> web.Response:
        received.append(await request.read())
        return web.json_response({"id": "file-1"})

    async def pieces() -> AsyncIterator[bytes]:
        for piece in (b"--boundary\r\n", b"a file's bytes " * 3, b"\r\n--boundary--\r\n"):
            yield piece

    app = web.Application()
    app.router.add_post("/v1/files", files)
    async with (
        serve_app(app) as upstream,
        proxy_to(upstream, tmp_path) as proxy,
        aiohttp.ClientSession() as session,
    ):
        url = proxy.url + "/v1/files"
        async with session.post(url, data=pieces()) as chunked:
            assert chunked.status == 200
        async with session.post(url, data=b"x" * 57) as declared:
            assert declared.status == 200
    assert [len(body) for body in received] == [73, 57]
    assert [r.bytes_in for r in records(tmp_path)] == [73, 57]
