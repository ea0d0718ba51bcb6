"""Sending one request and measuring it: the dispatcher's only contact with the network.

A small interface (``Transport.send``) so the dispatcher's timing logic can be
tested with a fake, while integration tests and real replays use ``HttpTransport``
(aiohttp, one connector sized by --connections).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

import aiohttp

from tailreplay.openai_api import parse_usage
from tailreplay.replayer.request import RequestSpec

__all__ = ["HttpTransport", "Outcome", "Transport"]

_TAIL = 16 << 10


@dataclass(slots=True)
class Outcome:
    status: int = 0
    error: str | None = None
    ttfb_ns: int | None = None
    duration_ns: int | None = None
    gaps_us: list[int] | None = None
    bytes_out: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    error_text: str = ""


class Transport(Protocol):
    async def send(self, spec: RequestSpec, headers: dict[str, str]) -> Outcome: ...

    async def close(self) -> None: ...


class HttpTransport:
    def __init__(self, base_url: str, *, connections: int, timeout_s: float) -> None:
        self.base = base_url.rstrip("/")
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=connections, limit_per_host=connections),
            timeout=aiohttp.ClientTimeout(total=timeout_s, sock_connect=min(timeout_s, 10)),
            read_bufsize=1 << 20,
            auto_decompress=True,
        )

    async def send(self, spec: RequestSpec, headers: dict[str, str]) -> Outcome:
        out = Outcome()
        t0 = time.monotonic_ns()
        try:
            async with self._session.request(
                spec.method, self.base + spec.path, data=spec.body, headers=headers
            ) as resp:
                out.status = resp.status
                tail = bytearray()
                last = 0
                gaps: list[int] | None = [] if spec.stream else None
                async for chunk in resp.content.iter_any():
                    now = time.monotonic_ns()
                    if out.ttfb_ns is None:
                        out.ttfb_ns = now - t0
                    elif gaps is not None:
                        gaps.append((now - last) // 1000)
                        gaps.extend([0] * (chunk.count(b"\n\n") - 1))
                    last = now
                    out.bytes_out += len(chunk)
                    tail += chunk
                    if len(tail) > 2 * _TAIL:
                        del tail[:-_TAIL]
                out.duration_ns = time.monotonic_ns() - t0
                out.gaps_us = gaps
                if resp.status >= 400:
                    out.error_text = bytes(tail[:2000]).decode("utf-8", "replace")
                else:
                    usage = parse_usage(bytes(tail))
                    out.prompt_tokens = usage.prompt_tokens
                    out.completion_tokens = usage.completion_tokens
                    out.finish_reason = usage.finish_reason
        except TimeoutError:
            out.error = "timeout"
        except aiohttp.ClientConnectorError:
            out.error = "connect"
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, aiohttp.ClientOSError):
            out.error = "reset"
        except aiohttp.ClientError as exc:
            out.error = type(exc).__name__
        if out.duration_ns is None:
            out.duration_ns = time.monotonic_ns() - t0
        return out

    async def close(self) -> None:
        await self._session.close()
