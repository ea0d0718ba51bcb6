"""Dispatch lag seen on the wire: one observer for every load tool.

A tool's own lag figure (tailreplay's ``lag_ms``) is measured inside the tool,
and k6 reports none, so comparing tools on "lag P99 <= 1 ms" needs a referee
outside both. ``WireTap`` runs tcpdump on the loopback for the responder's port
and keeps, for every request, the time its first segment (``POST ...``) crossed
the interface. ``wire_lag`` turns those times into lags against an evenly spaced
schedule: request i is due ``i / rate`` after the schedule's start, and the start
is taken where it makes the tool look best — the earliest send relative to its
slot counts as on time — so a lag here is a lower bound on the tool's true lag
(no tool sends before due). The same estimate for every tool: the numbers compare.

tcpdump's ring hands packets over in blocks, with a timeout of one second: the
tap waits that long after the load before it stops, or the last packets are lost.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import struct
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["WireLag", "WireTap", "wire_lag"]

_SNAP = 96
"""Bytes kept of a packet: link, IP and TCP headers, then the request line's start."""
_LINK_HEADER = {1: 14, 113: 16, 276: 20}
"""Link-layer header length by pcap link type (Ethernet, Linux cooked v1 and v2)."""


@dataclass(frozen=True)
class WireLag:
    requests: int
    """Requests seen on the wire (the last ``expected`` of them are judged)."""
    p50_ms: float
    p99_ms: float
    achieved: float
    """Requests a second between the first and last judged send."""


class WireTap:
    """tcpdump on ``lo`` for requests to ``port``, as a context manager; ``times`` after."""

    def __init__(self, port: int, pcap: Path) -> None:
        self.port, self.pcap = port, pcap
        self.times: list[float] = []
        self._proc: subprocess.Popen[bytes] | None = None

    @staticmethod
    def available() -> bool:
        """tcpdump is installed and may capture (it needs root here)."""
        return shutil.which("tcpdump") is not None and os.geteuid() == 0

    def __enter__(self) -> WireTap:
        # Only segments that carry data to the responder: requests, not ACKs or answers.
        bpf = f"tcp dst port {self.port} and (tcp[tcpflags] & tcp-push != 0)"
        self._proc = subprocess.Popen(
            ["tcpdump", "-i", "lo", "-s", str(_SNAP), "-B", "32768", "-nn", "-U",
             "--time-stamp-precision=nano", "-w", str(self.pcap), bpf],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        assert self._proc.stderr is not None
        line = self._proc.stderr.readline()  # "listening on lo, ...": capturing from here
        if b"listening" not in line:
            raise RuntimeError(f"tcpdump did not start: {line.decode(errors='replace')}")
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._proc is not None
        time.sleep(1.5)  # past the ring's one-second block timeout
        self._proc.send_signal(signal.SIGINT)
        _, err = self._proc.communicate(timeout=30)
        dropped = re.search(rb"^(\d+) packets dropped by kernel", err, re.MULTILINE)
        if (dropped is None or int(dropped.group(1))) and not exc[0]:
            raise RuntimeError(f"tcpdump dropped packets: {err.decode(errors='replace')}")
        self.times = request_times(self.pcap.read_bytes())
        self.pcap.unlink()


def request_times(data: bytes) -> list[float]:
    """Capture times (s) of the segments in a pcap file that begin an HTTP request."""
    magic, _, _, _, _, _, link = struct.unpack_from("<IHHiIII", data, 0)
    scale = 1e-9 if magic == 0xA1B23C4D else 1e-6
    skip = _LINK_HEADER[link]
    times: list[float] = []
    offset = 24
    while offset + 16 <= len(data):
        sec, frac, size, _ = struct.unpack_from("<IIII", data, offset)
        packet = data[offset + 16 : offset + 16 + size]
        offset += 16 + size
        ip = packet[skip:]
        tcp = ip[(ip[0] & 0x0F) * 4 :]
        payload = tcp[(tcp[12] >> 4) * 4 :]
        if payload[:4] in (b"POST", b"GET ", b"PUT "):
            times.append(sec + frac * scale)
    return times


def wire_lag(times: list[float], rate: float, expected: int) -> WireLag | None:
    """Lag of the last ``expected`` requests (earlier ones, such as a pre-flight probe,
    are not part of the schedule) against slots ``1 / rate`` apart; None when none
    were seen."""
    if expected <= 0 or not times:
        return None
    sends = sorted(times)[-expected:]
    gap = 1.0 / rate
    offsets = [t - i * gap for i, t in enumerate(sends)]
    start = min(offsets)
    lags = sorted((o - start) * 1e3 for o in offsets)

    def pct(q: float) -> float:
        return lags[min(len(lags) - 1, int(q * len(lags)))]

    span = sends[-1] - sends[0]
    achieved = (len(sends) - 1) / span if span > 0 else 0.0
    return WireLag(len(times), pct(0.50), pct(0.99), achieved)
