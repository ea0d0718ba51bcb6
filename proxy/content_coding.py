"""Request bodies sent with a ``Content-Encoding``: which codings a request names, and
the recorder's bounded decoding of its own copy of the body.

The proxy forwards such a body as the client sent it: it cannot edit compressed bytes
(no usage injection, no model mapping), and inflating it on the request path would
cost forwarding the CPU the recorder is there to take. The recorder decodes its
copy, every coding within ``limit`` bytes of output (the recorder passes
``--max-body``, the most an uncompressed body may be): a small bomb stops at the
bound (zlib's ``max_length``, brotli's ``output_buffer_limit``, a bounded zstd read),
never inflated whole. A body that cannot be decoded (an unknown coding, corrupt or
cut short, over the bound) is ``None``: the record then goes without its body's
fields, and the client never knew.
"""

from __future__ import annotations

import importlib
import zlib
from collections.abc import Callable, Iterable, Sequence
from types import ModuleType

import zstandard

brotli: ModuleType | None
try:  # a dependency; where it is missing, a br body is recorded without its fields
    brotli = importlib.import_module("brotli")
except ImportError:  # pragma: no cover
    brotli = None

__all__ = ["MAX_CODINGS", "ZSTD_WINDOW", "decode_body", "encoded", "named_codings"]

MAX_CODINGS = 3
"""Codings stacked on one body that are undone; more make it undecodable (each costs
a pass of up to ``limit`` bytes, and clients stack one at most)."""
ZSTD_WINDOW = 8 << 20
"""The largest zstd window decoded: RFC 9659's bound for the ``zstd`` content coding,
so a frame cannot make the recorder reserve the format's 128 MiB-and-more windows."""
_BROTLI_STEP = 256 << 10
"""Output asked of the brotli decoder per call: what it may overshoot the bound by."""


def named_codings(values: Iterable[str]) -> list[str]:
    """The codings ``Content-Encoding`` header values name, in the order they were
    applied, lower-cased, ``identity`` left out.

    >>> named_codings(["gzip, identity", "BR"])
    ['gzip', 'br']
    """
    out = []
    for value in values:
        for part in value.split(","):
            name = part.strip().lower()
            if name and name != "identity":
                out.append("gzip" if name == "x-gzip" else name)  # RFC 9110 §8.4.1.3
    return out


def encoded(values: Iterable[str]) -> bool:
    """Whether ``Content-Encoding`` header values name a coding other than identity:
    the body's bytes are then not the JSON they carry, and are sent as they are."""
    return bool(named_codings(values))


def decode_body(data: bytes, codings: Sequence[str], limit: int) -> bytes | None:
    """``data`` with ``codings`` (as ``named_codings`` gives them) undone, last applied
    first; None when a coding is unknown, the bytes are corrupt or cut short, or any
    step would give more than ``limit`` bytes.

    >>> decode_body(zlib.compress(b"{}"), ["deflate"], 1 << 20)
    b'{}'
    """
    if len(codings) > MAX_CODINGS:
        return None
    out: bytes | None = data
    for name in reversed(codings):
        decoder = _DECODERS.get(name)
        if decoder is None or out is None:
            return None
        try:
            out = decoder(out, limit)
        except _ERRORS:
            return None
    return out


def _inflate(data: bytes, wbits: int, limit: int) -> bytes | None:
    """zlib's formats; a gzip body may hold several members one after the other
    (RFC 1952), each decoded in turn."""
    out = bytearray()
    while True:
        decoder = zlib.decompressobj(wbits)
        out += decoder.decompress(data, limit + 1 - len(out))  # >= 1: 0 means no bound
        if len(out) > limit or not decoder.eof:
            return None  # over the bound, or cut short
        data = decoder.unused_data
        if not data:
            return bytes(out)
        if wbits != _GZIP:
            return None  # bytes after a zlib or raw deflate stream: not this coding


_GZIP = 16 + zlib.MAX_WBITS


def _gzip(data: bytes, limit: int) -> bytes | None:
    return _inflate(data, _GZIP, limit)


def _deflate(data: bytes, limit: int) -> bytes | None:
    """HTTP's deflate is zlib's format (RFC 9110 §8.4.1.2), but some clients send raw
    deflate, as browsers once did: a zlib header decides which."""
    zlib_header = len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0
    return _inflate(data, zlib.MAX_WBITS if zlib_header else -zlib.MAX_WBITS, limit)


def _br(data: bytes, limit: int) -> bytes | None:
    """Brotli, asked for at most ``_BROTLI_STEP`` of output a call (its decoder keeps
    the rest of the input until asked again)."""
    if brotli is None:
        return None
    decoder = brotli.Decompressor()
    out = bytearray(decoder.process(data, output_buffer_limit=_BROTLI_STEP))
    while len(out) <= limit and not decoder.is_finished():
        more = decoder.process(b"", output_buffer_limit=_BROTLI_STEP)
        if not more:
            break  # the input ends inside the stream
        out += more
    return bytes(out) if len(out) <= limit and decoder.is_finished() else None


def _zstd(data: bytes, limit: int) -> bytes | None:
    """zstd, read through a stream reader that gives at most ``limit + 1`` bytes. The
    reader stops silently where the input is cut short, so the frames are decoded a
    second time, known now to be within the bound, to see that each of them ends."""
    decompressor = zstandard.ZstdDecompressor(max_window_size=ZSTD_WINDOW)
    reader = decompressor.stream_reader(data, read_across_frames=True)
    out = bytearray()
    while len(out) <= limit and (piece := reader.read(limit + 1 - len(out))):
        out += piece
    if len(out) > limit:
        return None
    rest = data
    while rest:
        frame = decompressor.decompressobj()
        frame.decompress(rest)
        if not frame.eof:
            return None
        rest = frame.unused_data
    return bytes(out)


_ERRORS: tuple[type[Exception], ...] = (zlib.error, zstandard.ZstdError) + (
    (brotli.error,) if brotli is not None else ()
)
"""What a decoder raises on bytes that are not its coding."""
_DECODERS: dict[str, Callable[[bytes, int], bytes | None]] = {
    "gzip": _gzip,
    "deflate": _deflate,
    "br": _br,
    "zstd": _zstd,
}
