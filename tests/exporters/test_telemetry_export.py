"""``traces export otlp`` and the OTLP flags: HTTP, TLS with a private CA, mTLS, dead ends.

The endpoint is a real OTLP/HTTP receiver on loopback (tests/otlp_receiver.py),
given certificates from a throwaway CA (trustme).
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme
from click.testing import CliRunner

from tailreplay.cli import cli
from tests.helpers import chat_archive, write_plain
from tests.otlp_receiver import receiver_in_thread


def _archive(path: Path, n: int) -> list[dict]:
    maps = chat_archive(path, n, gap_ms=7, seed=11, model="m")
    for i, m in enumerate(maps):
        m["status"] = 500 if i % 100 == 0 else 200  # some errors among them
    write_plain(path, maps)
    return maps


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stderr


def test_export_sends_every_record_with_its_original_times(tmp_path: Path) -> None:
    maps = _archive(tmp_path / "a.msgpack", 1000)
    with receiver_in_thread() as otlp:
        code, err = _run(
            "traces", "export", "otlp", str(tmp_path / "a.msgpack"), "--otlp-endpoint", otlp.url
        )
        assert code == 0, err
        assert f"exported 1,000 spans to {otlp.url}" in err
    assert len(otlp.spans) == 1000
    by_id = {s.span_id: s for s in otlp.spans}
    for m in maps:
        span = by_id[m["span_id"].hex()]
        assert span.trace_id == m["trace_id"].hex()
        assert (span.start_ns, span.end_ns) == (m["start_ns"], m["start_ns"] + m["duration_ns"])
        assert span.kind == 2  # SERVER: a captured exchange
        assert span.attributes["gen_ai.usage.input_tokens"] == m["input_tokens"]
        assert span.status_code == (2 if m["status"] == 500 else 0)
    assert otlp.spans[0].resource["service.name"] == "tailreplay-export"


@pytest.mark.parametrize("ids", ["auto", "keep"])
def test_a_capture_already_exported_live_goes_out_under_new_span_ids(
    tmp_path: Path, ids: str
) -> None:
    maps = chat_archive(tmp_path / "tmp.msgpack", 20, gap_ms=7, seed=3, model="m")
    header = {"format": "tailreplay", "version": 1, "source": "proxy", "created_ns": 0,
              "capture": {"listen": ["10.0.0.5", 8080], "otlp_live": True}}  # fmt: skip
    write_plain(tmp_path / "live.msgpack", maps, header)
    with receiver_in_thread() as otlp:
        code, err = _run("traces", "export", "otlp", str(tmp_path / "live.msgpack"),
                         "--otlp-endpoint", otlp.url, "--ids", ids)  # fmt: skip
        assert code == 0, err
    assert len(otlp.spans) == 20
    for span, m in zip(sorted(otlp.spans, key=lambda s: s.start_ns), maps, strict=True):
        # As the live span said it: the proxy's listener is the server.
        assert (span.attributes["server.address"], span.attributes["server.port"]) == (
            "10.0.0.5", 8080)  # fmt: skip
        assert span.trace_id == m["trace_id"].hex()
        if ids == "keep":
            assert span.span_id == m["span_id"].hex() and not span.links
            continue
        # A receiver drops a span id it has seen: a new one, linked to the live span.
        assert span.span_id != m["span_id"].hex()
        assert span.links == [(m["trace_id"].hex(), m["span_id"].hex())]
        assert (span.name, span.kind) == ("chat m", 2)  # still the captured SERVER span
    if ids == "auto":
        assert "(20 under new span ids linked to the originals exported live)" in err


def test_rebase_time_shifts_every_span_to_end_now(tmp_path: Path) -> None:
    maps = _archive(tmp_path / "a.msgpack", 50)
    with receiver_in_thread() as otlp:
        before = time.time_ns()
        code, err = _run(
            "traces", "export", "otlp", str(tmp_path / "a.msgpack"),
            "--otlp-endpoint", otlp.url, "--rebase-time",
        )  # fmt: skip
        assert code == 0, err
    shifts = {s.start_ns - m["start_ns"] for s, m in zip(otlp.spans, maps, strict=True)}
    assert len(shifts) == 1  # one shift for all: the arrival process is kept
    last_end = max(s.end_ns for s in otlp.spans)
    assert before <= last_end <= time.time_ns()


def test_bare_base_url_gets_v1_traces(tmp_path: Path) -> None:
    _archive(tmp_path / "a.msgpack", 3)
    with receiver_in_thread() as otlp:
        base = otlp.url.removesuffix("/v1/traces")
        code, err = _run(
            "traces", "export", "otlp", str(tmp_path / "a.msgpack"), "--otlp-endpoint", base
        )
        assert code == 0, err
    assert len(otlp.spans) == 3


def test_environment_variables_configure_the_exporter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _archive(tmp_path / "a.msgpack", 3)
    with receiver_in_thread() as otlp:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", otlp.url)
        monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=staging")
        code, err = _run("traces", "export", "otlp", str(tmp_path / "a.msgpack"))
        assert code == 0, err
    assert len(otlp.spans) == 3
    assert otlp.spans[0].resource["deployment.environment"] == "staging"


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def pem(ca: trustme.CA, tmp_path: Path) -> Iterator[dict[str, Path]]:
    client = ca.issue_cert("client.tailreplay.test")
    paths = {
        "ca": tmp_path / "ca.pem",
        "cert": tmp_path / "client.pem",
        "key": tmp_path / "client.key",
    }
    ca.cert_pem.write_to_path(str(paths["ca"]))
    client.cert_chain_pems[0].write_to_path(str(paths["cert"]))
    client.private_key_pem.write_to_path(str(paths["key"]))
    yield paths


def _server_context(ca: trustme.CA, *, require_client: bool) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(ctx)
    if require_client:
        ctx.verify_mode = ssl.CERT_REQUIRED
        ca.configure_trust(ctx)
    return ctx


def _export(archive: Path, url: str, *extra: str) -> tuple[int, str]:
    return _run(
        "traces",
        "export",
        "otlp",
        str(archive),
        "--otlp-endpoint",
        url,
        "--otlp-timeout",
        "2s",
        *extra,
    )


def test_tls_endpoint_with_a_private_ca(
    ca: trustme.CA, pem: dict[str, Path], tmp_path: Path
) -> None:
    archive = tmp_path / "a.msgpack"
    _archive(archive, 20)
    with receiver_in_thread(_server_context(ca, require_client=False)) as otlp:
        code, err = _export(archive, otlp.url)  # the CA is not trusted: refused
        assert code == 5
        assert len(err.strip().splitlines()) == 1 and "OTLP export to" in err
        assert otlp.spans == []
        code, err = _export(archive, otlp.url, "--otlp-ca", str(pem["ca"]))
        assert code == 0, err
    assert len(otlp.spans) == 20


def test_mtls_needs_the_client_certificate(
    ca: trustme.CA, pem: dict[str, Path], tmp_path: Path
) -> None:
    archive = tmp_path / "a.msgpack"
    _archive(archive, 20)
    with receiver_in_thread(_server_context(ca, require_client=True)) as otlp:
        code, err = _export(archive, otlp.url, "--otlp-ca", str(pem["ca"]))
        assert code == 5, err
        assert otlp.spans == []
        code, err = _export(
            archive, otlp.url, "--otlp-ca", str(pem["ca"]),
            "--otlp-cert", str(pem["cert"]), "--otlp-key", str(pem["key"]),
        )  # fmt: skip
        assert code == 0, err
    assert len(otlp.spans) == 20


def test_dead_endpoint_is_one_line_and_exit_5(tmp_path: Path) -> None:
    archive = tmp_path / "a.msgpack"
    _archive(archive, 20)
    t0 = time.monotonic()
    code, err = _export(archive, "http://127.0.0.1:9/v1/traces")
    assert code == 5
    assert err.strip().splitlines() == [
        "Error: OTLP export to http://127.0.0.1:9/v1/traces failed: 0 of the first 20 spans "
        "delivered; the rest were not sent"
    ]
    assert time.monotonic() - t0 < 10  # bounded by --otlp-timeout, not the default retries


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--otlp-cert", "CA"], "--otlp-cert and --otlp-key go together"),
        (["--otlp-protocol", "thrift"], "Invalid value for '--otlp-protocol'"),
        (["--resource", "novalue"], "invalid --resource 'novalue'"),
        ([], "no --otlp-endpoint"),
    ],
)
def test_bad_otlp_flags_exit_2(
    tmp_path: Path, pem: dict[str, Path], args: list[str], message: str
) -> None:
    archive = tmp_path / "a.msgpack"
    _archive(archive, 2)
    endpoint = ["--otlp-endpoint", "http://127.0.0.1:9/v1/traces"] if args else []
    argv = [str(pem["ca"]) if a == "CA" else a for a in args]
    code, err = _run("traces", "export", "otlp", str(archive), *endpoint, *argv)
    assert code == 2
    assert message in err
