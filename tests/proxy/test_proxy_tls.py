"""The proxy's TLS listener: an HTTPS endpoint's clients keep speaking HTTPS to it."""

from __future__ import annotations

import ssl
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import httpx2 as httpx
import openai
import pytest
import trustme

from tailreplay.sim.launcher import sim_process
from tests.proxy_helpers import records, start_proxy_process


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    with sim_process(["--decode-base-ms", "1", "--output-mean", "8"]) as url:
        yield url


@pytest.fixture
def tls_files(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(CA bundle, server certificate chain, server key) for 127.0.0.1."""
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    paths = tmp_path / "ca.pem", tmp_path / "cert.pem", tmp_path / "key.pem"
    ca.cert_pem.write_to_path(str(paths[0]))
    cert.private_key_and_cert_chain_pem.write_to_path(str(paths[1]))
    cert.private_key_pem.write_to_path(str(paths[2]))
    return paths


def test_the_openai_sdk_streams_through_the_tls_listener_and_it_is_recorded(
    tmp_path: Path, sim_url: str, tls_files: tuple[Path, Path, Path]
) -> None:
    ca, cert, key = tls_files
    out = tmp_path / "out"
    proc, url, _ = start_proxy_process(sim_url, out, "--tls-cert", str(cert), "--tls-key", str(key))
    try:
        assert url.startswith("http://")  # the helper's guess; the proxy said https
        base = url.replace("http://", "https://") + "/v1"
        client = openai.OpenAI(
            base_url=base,
            api_key="sk-test",
            http_client=httpx.Client(verify=ssl.create_default_context(cafile=ca)),
        )
        stream = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True, max_tokens=8
        )
        client_tokens = [c.choices[0].delta.content for c in stream if c.choices]
        client_tokens = [t for t in client_tokens if t]
        # A client that does not trust the certificate is refused at the handshake.
        with pytest.raises(openai.APIConnectionError):
            openai.OpenAI(base_url=base, api_key="sk-test", max_retries=0).models.list()
        # TLS 1.1 is not offered.
        old = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        old.load_verify_locations(ca)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # as it should be
            old.maximum_version = ssl.TLSVersion.TLSv1_1
        with pytest.raises((ssl.SSLError, httpx.ConnectError)):
            httpx.get(base + "/models", verify=old)
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
    (record,) = [r for r in records(out) if r.path == "/v1/chat/completions"]
    assert record.status == 200 and record.ttfb_ns is not None
    assert record.output_tokens == len(client_tokens) > 0


def test_an_unusable_certificate_is_one_line_and_exit_2(
    tmp_path: Path, tls_files: tuple[Path, Path, Path]
) -> None:
    ca, cert, _ = tls_files
    for args, expected in (
        (["--tls-cert", str(cert)], "--tls-cert and --tls-key go together"),
        (["--tls-cert", str(cert), "--tls-key", str(ca)], "cannot use them"),
        (["--tls-cert", str(cert), "--tls-key", str(tmp_path / "nope.pem")], "no such file"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "tailreplay", "proxy", "--upstream", "http://127.0.0.1:9",
             "--out", str(tmp_path / "o"), *args],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and expected in done.stderr
