"""Which traces ``--sample`` keeps and ``--shadow-share`` copies: a keyed hash of the
trace id, so a client that chooses its own ``traceparent`` cannot choose its fate.

Every test sends trace ids a client would pick to fall in the share by their first
bytes (zeros there put any id in any share when the id itself was compared): at a 10%
share, 10 ± 3% of them are kept or copied.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientSession, ClientTimeout
from click.testing import CliRunner
from yarl import URL

from tailreplay.cli import cli
from tailreplay.proxy.shadow import Shadow, ShadowConfig
from tailreplay.sampling import (
    TraceSampler,
    in_share,
    key_from_secret,
    share_threshold,
    unkeyed_point,
)
from tailreplay.traces.archive.reader import ArchiveReader
from tests.proxy_helpers import quick_sim, serve_in_thread, start_proxy_process
from tests.shadow_helpers import shadow_app, shadow_counts, stop_proxy

N = 1000
SHARE = 0.1
# A fixed key, so each count is the same every run (a random one's would be a draw of
# a binomial, outside 10 +- 3% once in a few hundred runs).
KEY = key_from_secret(b"tests/test_sampling_key.py fixed sampling secret")


def _steered(kind: str, n: int = N, seed: int = 5) -> list[bytes]:
    """Trace ids a client picks to land in a share: leading zero bytes, the smallest
    ids there are, or ids that differ only in their last byte."""
    rng = random.Random(seed)
    if kind == "zeros":
        return [bytes(8) + rng.randbytes(8) for _ in range(n)]
    if kind == "counting":
        return [(i + 1).to_bytes(16, "big") for i in range(n)]
    if kind == "low-byte":
        stem = bytes(15)
        return [stem[:14] + i.to_bytes(2, "big") for i in range(1, n + 1)]
    raise AssertionError(kind)


KINDS = ["zeros", "counting", "low-byte"]


@pytest.mark.parametrize("kind", KINDS)
def test_steered_trace_ids_are_sampled_at_the_share(kind: str) -> None:
    ids = _steered(kind)
    # Compared as they are, every one of them would be kept: the ids are steered.
    threshold = share_threshold(SHARE)
    assert all(in_share(unkeyed_point(t), threshold) for t in ids)
    sampler = TraceSampler(SHARE, KEY)
    kept = sum(sampler.keep(t) for t in ids)
    assert abs(kept / N - SHARE) <= 0.03, kept


@pytest.mark.parametrize("kind", KINDS)
def test_steered_trace_ids_are_copied_at_the_share_and_with_their_sample(kind: str) -> None:
    key = KEY
    shadow = Shadow(ShadowConfig(URL("http://127.0.0.1:9"), share=SHARE), lambda ex: None, 5.0, key)
    ids = _steered(kind)
    copied = {t for t in ids if shadow.wants(t)}
    assert abs(len(copied) / N - SHARE) <= 0.03, len(copied)
    # The same key, the same share: --sample keeps exactly the traces the shadow copies
    # (a copy is recorded only with its sampled trace).
    sampler = TraceSampler(SHARE, key)
    assert copied == {t for t in ids if sampler.keep(t)}


def test_one_secret_decides_alike_in_every_process_and_another_differently() -> None:
    ids = _steered("zeros")
    secret = b"a fleet's shared sampling secret\n".strip()
    one = TraceSampler(SHARE, key_from_secret(secret))
    two = TraceSampler(SHARE, key_from_secret(secret))
    assert [one.keep(t) for t in ids] == [two.keep(t) for t in ids]
    other = TraceSampler(SHARE, key_from_secret(b"another replica's secret, alone"))
    assert [one.keep(t) for t in ids] != [other.keep(t) for t in ids]
    # Errors and the tail are kept whatever the share.
    assert all(one.keep(t, error=True) and one.keep(t, tail=True) for t in ids)
    with pytest.raises(ValueError):
        key_from_secret(b"short")


async def _send(base: str, ids: list[bytes]) -> None:
    """One chat request a trace, 8 at a time, each with the client's chosen trace id."""
    gate = asyncio.Semaphore(8)
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    body["max_tokens"] = 2

    async def one(session: ClientSession, i: int, trace: bytes) -> None:
        headers = {"traceparent": f"00-{trace.hex()}-{(i + 1):016x}-01"}
        async with (
            gate,
            session.post(f"{base}/v1/chat/completions", json=body, headers=headers) as response,
        ):
            await response.read()
            assert response.status == 200

    async with ClientSession(timeout=ClientTimeout(total=60)) as session:
        jobs = [one(session, i, t) for i, t in enumerate(ids)]
        await asyncio.wait_for(asyncio.gather(*jobs), timeout=240)


def test_a_client_choosing_its_trace_ids_gets_the_share_through_the_proxy(
    tmp_path: Path,
) -> None:
    ids = _steered("zeros")
    key_file = tmp_path / "sampling.key"
    key_file.write_text("fleet-wide secret: 0123456789abcdef\n")
    key_file.chmod(0o600)
    seen: list[dict[str, Any]] = []
    out = tmp_path / "cap"
    with quick_sim() as production, serve_in_thread(shadow_app("500", seen)) as shadow:
        proc, url, admin = start_proxy_process(
            production,
            out,
            "--sample",
            str(SHARE),
            "--shadow",
            shadow,
            "--shadow-share",
            "10%",
            "--sampling-key-file",
            str(key_file),
            "--drain-timeout",
            "10s",
        )
        try:
            asyncio.run(_send(url, ids))
            counts = shadow_counts(admin)
        finally:
            stdout = stop_proxy(proc)
    assert b"fleet-wide secret" not in stdout  # the secret is never echoed
    assert counts["dropped"] == 0
    assert abs(len(seen) / N - SHARE) <= 0.03, len(seen)
    copied = {bytes.fromhex(s["headers"]["traceparent"][3:35]) for s in seen}
    # The decisions are the keyed hash's under the file's key: what another replica
    # given the same file decides.
    sampler = TraceSampler(SHARE, key_from_secret(key_file.read_bytes().strip()))
    assert copied == {t for t in ids if sampler.keep(t)}
    # --sample keeps those traces (and errors and the tail besides); each record carries
    # its trace's point, which is how the report tells the share without the key.
    threshold = share_threshold(SHARE)
    production_records = list(ArchiveReader(sorted(out.iterdir())))
    assert all(r.sample_point is not None for r in production_records)
    in_sample = {r.trace_id for r in production_records if in_share(r.sample_point or 0, threshold)}
    assert in_sample == copied
    assert len(production_records) < 0.2 * N  # the share, plus the tail it always keeps


@pytest.mark.parametrize(
    ("content", "code", "message"),
    [
        (None, 3, "cannot read it"),
        (b"too short\n", 2, "holds 9 bytes; a secret has at least 16"),
        (b"x" * 5000, 2, "over 4096 bytes"),
    ],
)
def test_a_bad_sampling_key_file_is_one_line(
    tmp_path: Path, content: bytes | None, code: int, message: str
) -> None:
    path = tmp_path / "key"
    if content is not None:
        path.write_bytes(content)
    args = ["proxy", "--upstream", "http://127.0.0.1:9", "--sampling-key-file", str(path)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == code, result.output
    assert message in result.stderr and "Traceback" not in result.output
    assert len(result.stderr.strip().splitlines()) == 1
    if content is not None:
        assert content.decode().strip() not in result.stderr
