"""What the commands share: the parameter types of everything a user types, and option sets.

Values are parsed by click types at parse time: factors (``2x``, ``200%``),
speeds (``1x..4x``), durations, sizes, HOST:PORT, K=V pairs, shards, headers,
URLs, bucket edges. A wrong value raises ``UsageError`` naming the flag, which
the group prints as one line with exit 2 (click's own range checks print
click's usage message, also with exit 2).

Option sets used by more than one command are decorators here: the archives
argument, ``-o/--output``, ``--skip-corrupt``, ``--buckets``, the SLO flags and
the OTLP flags (which hand the command one ``otlp: OtlpOptions``); and
``replay``'s ``--event-loop``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from tailreplay import option_values as values
from tailreplay.declared import Text
from tailreplay.errors import UsageError
from tailreplay.eventloop import EVENT_LOOPS
from tailreplay.exporters.otlp_options import PROTOCOLS, OtlpOptions
from tailreplay.output_path import check_output_file
from tailreplay.replayer.scrape import parse_scrape
from tailreplay.replayer.speed import parse_speed
from tailreplay.replayer.users import parse_users
from tailreplay.shared_options import Setting
from tailreplay.units import parse_duration

__all__ = [
    "BODY_DROP",
    "BODY_SET",
    "BUCKETS",
    "DURATION",
    "FACTOR",
    "HEADER",
    "HOST_PORT",
    "HTTP_URL",
    "KEY_VALUE",
    "MODEL_MAP",
    "SCRAPE",
    "SHARD",
    "SIZE",
    "SPEED",
    "SPEED_TEXT",
    "TAIL_COST",
    "FiniteRange",
    "Parsed",
    "archive_args",
    "archive_paths",
    "archives_argument",
    "buckets_option",
    "client_options",
    "event_loop_option",
    "otlp_from_params",
    "otlp_options",
    "output_file",
    "output_option",
    "scrape_option",
    "setting_option",
    "skip_corrupt_option",
    "slo_options",
    "write_text",
]

F = TypeVar("F", bound=Callable[..., Any])


if TYPE_CHECKING:
    _ParamType = click.ParamType[Any, Any]  # generic since click 8.5
else:
    _ParamType = click.ParamType


class Parsed(_ParamType):
    """A click type over one of tailreplay's parsers, called as ``parse(text, flag)``."""

    def __init__(self, name: str, parse: Callable[[str, str], Any]) -> None:
        self.name = name
        self._parse = parse
        self.text = Text(name, parse)
        """The neutral declaration of the same reading (``tailreplay/declared.py``)."""

    @classmethod
    def of(cls, text: Text) -> Parsed:
        """The click type of a declared reading."""
        return cls(text.name, text.parse)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value  # a default already of the parsed type
        try:
            return self._parse(value, _flag(param))
        except ValueError as exc:  # a parser's own words, as one usage line
            self.fail(str(exc), param, ctx)


class FiniteRange(click.FloatRange):
    """``click.FloatRange`` that also refuses nan and inf (which compare false to any bound)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{number} is not a finite number.", param, ctx)
        return number


def setting_option(setting: Setting[Any], type: _ParamType | None = None) -> Callable[[F], F]:
    """The click option of a shared setting (``tailreplay.shared_options``): its flag,
    default and help, and its range unless ``type`` parses the value."""
    if type is None:
        type = FiniteRange(
            setting.low, setting.high, min_open=setting.low_open, max_open=setting.high_open
        )
    option: Callable[[F], F] = click.option(
        setting.flag, type=type, default=setting.default, show_default=True, help=setting.help
    )
    return option


def _flag(param: click.Parameter | None) -> str:
    if param is None:
        return "value"
    return param.opts[0] if param.opts else f"<{param.name}>"


FILE_OUT = Parsed.of(values.FILE_OUT)
FACTOR = Parsed.of(values.FACTOR)
SPEED = Parsed("speed", lambda text, flag: parse_speed(text))


def _speed_text(text: str, flag: str) -> str:
    parse_speed(text)  # refuses what replay would
    return text


SPEED_TEXT = Parsed("speed", _speed_text)
"""``--speed`` checked as replay parses it, and kept as given (for a command line)."""
DURATION = Parsed.of(values.DURATION)
SIZE = Parsed.of(values.SIZE)
HOST_PORT = Parsed.of(values.HOST_PORT)
HTTP_URL = Parsed.of(values.HTTP_URL)
KEY_VALUE = Parsed.of(values.KEY_VALUE)
MODEL_MAP = Parsed.of(values.MODEL_MAP)
SHARD = Parsed.of(values.SHARD)
HEADER = Parsed.of(values.HEADER)
BUCKETS = Parsed.of(values.BUCKETS)
TAIL_COST = Parsed.of(values.TAIL_COST)
SCRAPE = Parsed("URL[@1s]", lambda text, flag: parse_scrape(text))
BODY_SET = Parsed.of(values.BODY_SET)
BODY_DROP = Parsed.of(values.BODY_DROP)


def output_file(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    """``check_output_file`` as a click callback: a bad output fails before any work."""
    if value is not None:
        check_output_file(_flag(param), value)
    return value


def archive_paths(
    _ctx: click.Context, _param: click.Parameter, value: tuple[Path, ...]
) -> tuple[Path, ...]:
    """Archives as given, each folder replaced by the archives in it (in the order the
    proxy wrote them: ``traces/archive/folders.py``)."""
    from tailreplay.traces.archive.folders import expand_folders

    return tuple(expand_folders(value))


def archive_args(name: str = "files") -> Callable[[F], F]:
    """The archives argument (one or more; folders read as their archives) as ``name``."""
    return click.argument(
        name,
        nargs=-1,
        required=True,
        type=click.Path(path_type=Path, dir_okay=True),
        callback=archive_paths,
    )


archives_argument = archive_args()

output_option = click.option(
    "-o",
    "--output",
    "--out",
    "out",
    required=True,
    type=FILE_OUT,
    callback=output_file,
    help="File to write.",
)

scrape_option = click.option(
    "--scrape",
    "scrapes",
    type=SCRAPE,
    multiple=True,
    help="Read Prometheus metrics from URL every interval (default 1s) during the run "
    "(repeatable; 'target' is the target's own /metrics, the built-in simulator's too): "
    "kept beside the results, read by the report (vLLM, SGLang, TGI, llama.cpp, DCGM).",
)


def client_options(f: F) -> F:
    """How the replayed clients behave: ``--users`` and ``--think`` (a closed loop,
    ``Dispatcher.run_users``), ``--retries`` and ``--max-attempts`` (``replayer/retry.py``),
    ``--client-aborts`` (``RequestBuilder``)."""
    f = click.option(
        "--client-aborts",
        type=click.Choice(["replay", "off"]),
        default="replay",
        show_default=True,
        help="replay: a request the client abandoned (client_abort) is abandoned after as "
        "many streamed tokens (or, those unknown, as long); off: every answer read whole.",
    )(f)
    f = click.option(
        "--max-attempts",
        type=click.IntRange(1, 100),
        default=3,
        show_default=True,
        help="With --retries policy: attempts per request at most, the first included.",
    )(f)
    f = click.option(
        "--retries",
        type=click.Choice(["recorded", "policy", "off"]),
        default="recorded",
        show_default=True,
        help="recorded: send each record once, retries as recorded; policy: retry a 429/503 "
        "after its Retry-After, a 5xx or timeout with backoff and jitter; off: never retry.",
    )(f)
    f = click.option(
        "--think",
        type=Parsed(
            "think", lambda text, flag: None if text == "recorded" else parse_duration(text)
        ),
        default="0s",
        show_default=True,
        help="With --users: each user's pause between an answer and its next request, or "
        "'recorded': the session's recorded gap from the last request's end to this one's start.",
    )(f)
    return click.option(
        "--users",
        type=Parsed("users", lambda text, flag: parse_users(text)),
        help="Closed loop: N users, each sending the next record (in recorded order) once its "
        "last is answered and --think has passed; the target sets the rate, not --speed. "
        "Steps: 10,20,50@1m.",
    )(f)


event_loop_option = click.option(
    "--event-loop",
    type=click.Choice(EVENT_LOOPS),
    default="asyncio",
    show_default=True,
    help="The event loop the replay runs on: asyncio's own, uvloop (pip install uvloop), "
    "or auto: uvloop when it can be imported.",
)

skip_corrupt_option = click.option(
    "--skip-corrupt",
    is_flag=True,
    help="Skip damaged regions (reporting how many bytes) instead of stopping.",
)

buckets_option = click.option(
    "--buckets",
    type=BUCKETS,
    default="50,256,512,1024,2048",
    show_default=True,
    help="Input-token bucket edges.",
)


def _objectives(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> Any:
    from tailreplay.report.slo import parse_objectives

    return parse_objectives(value)


def slo_options(f: F) -> F:
    """Add ``--slo`` (the command gets ``slos``, a list of Objective), ``--slo-min-score``,
    ``--slo-by`` and ``--slo-window``."""
    f = click.option(
        "--slo-by",
        type=click.Choice(["model", "path", "session", "phase"]),
        help="Also judge every objective per model, path, session or load phase: each class "
        "must meet them.",
    )(f)
    f = click.option(
        "--slo-window",
        type=DURATION,
        help="Also judge every objective in each window this long (e.g. 1m) of the replay: "
        "every window with 20 requests or more must meet them.",
    )(f)
    f = click.option(
        "--slo-min-score",
        type=FiniteRange(0, 1),
        default=1.0,
        show_default=True,
        help="Weighted share of the objectives that must be met; below it the exit code is 1.",
    )(f)
    return click.option(
        "--slo",
        "slos",
        multiple=True,
        callback=_objectives,
        help="Objective METRIC:PCT<=LIMIT[*WEIGHT] (repeatable, or comma-separated), e.g. "
        "latency:p99<=800ms*10, ttft:p95<=1.2x (of the recorded), error_rate<=1%.",
    )(f)


_PEM = click.Path(exists=True, dir_okay=False, path_type=Path)

_OTLP_OPTIONS = [
    click.option(
        "--otlp-endpoint",
        help="Send spans here, e.g. http://127.0.0.1:4318/v1/traces or "
        "http://127.0.0.1:4317 (gRPC); also OTEL_EXPORTER_OTLP_ENDPOINT.",
    ),
    click.option(
        "--otlp-protocol",
        type=click.Choice(PROTOCOLS),
        help="Default: OTEL_EXPORTER_OTLP_PROTOCOL, else gRPC for port 4317, else HTTP.",
    ),
    click.option(
        "--otlp-header",
        "otlp_headers",
        type=KEY_VALUE,
        multiple=True,
        help="K=V sent with every export (repeatable), e.g. authorization=Bearer ...",
    ),
    click.option("--otlp-ca", type=_PEM, help="CA certificate (PEM) to trust."),
    click.option("--otlp-cert", type=_PEM, help="Client certificate (PEM) for mTLS."),
    click.option("--otlp-key", type=_PEM, help="Client private key (PEM) for mTLS."),
    click.option(
        "--otlp-insecure",
        is_flag=True,
        help="gRPC without TLS (as OTEL_EXPORTER_OTLP_INSECURE); OTLP/HTTP follows "
        "the endpoint's scheme.",
    ),
    click.option(
        "--otlp-timeout", type=DURATION, default="5s", show_default=True, help="Per export request."
    ),
    click.option(
        "--resource",
        "resource_attrs",
        type=KEY_VALUE,
        multiple=True,
        help="K=V resource attribute (repeatable), e.g. deployment.environment=staging.",
    ),
]
_LIVE_TRAFFIC_OPTIONS = [
    click.option(
        "--trace-sample",
        type=FiniteRange(0, 1, min_open=True),
        default=1.0,
        show_default=True,
        help="Share of traces to export (by trace id; errors and the tail always).",
    ),
    click.option(
        "--otlp-capture-content",
        is_flag=True,
        help="Put prompt and completion text in spans (off: they may hold personal data).",
    ),
    click.option(
        "--gen-ai-provider",
        default="openai",
        show_default=True,
        help="gen_ai.provider.name on spans.",
    ),
]


def otlp_from_params(kwargs: dict[str, Any]) -> OtlpOptions:
    """Take the OTLP flags out of a command's keyword arguments, as one OtlpOptions."""
    cert, key = kwargs.pop("otlp_cert"), kwargs.pop("otlp_key")
    if (cert is None) != (key is None):
        raise UsageError("--otlp-cert and --otlp-key go together (mTLS needs both)")
    return OtlpOptions(
        endpoint=kwargs.pop("otlp_endpoint"),
        protocol=kwargs.pop("otlp_protocol"),
        headers=tuple(kwargs.pop("otlp_headers")),
        ca=kwargs.pop("otlp_ca"),
        cert=cert,
        key=key,
        insecure=kwargs.pop("otlp_insecure"),
        resource=tuple(kwargs.pop("resource_attrs")),
        timeout_s=kwargs.pop("otlp_timeout"),
        trace_sample=kwargs.pop("trace_sample", 1.0),
        capture_content=kwargs.pop("otlp_capture_content", False),
        provider_name=kwargs.pop("gen_ai_provider", "openai"),
    )


def otlp_options(*, spans_of_live_traffic: bool = True) -> Callable[[F], F]:
    """The OTLP flags; the command gets one ``otlp: OtlpOptions`` argument instead.

    ``spans_of_live_traffic`` adds the sampling and content flags (the proxy and the
    replayer; an archive export sends every record).
    """

    def decorate(func: F) -> F:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            kwargs["otlp"] = otlp_from_params(kwargs)
            return func(*args, **kwargs)

        options = _OTLP_OPTIONS + (_LIVE_TRAFFIC_OPTIONS if spans_of_live_traffic else [])
        for option in reversed(options):
            wrapper = option(wrapper)
        return wrapper  # type: ignore[return-value]

    return decorate


def write_text(path: Path, text: str) -> None:
    """``text`` to ``path``, whole (0600), or to stdout for ``-``; a failure is one
    ``InputError`` line."""
    from tailreplay.errors import InputError
    from tailreplay.output_path import write_output

    try:
        write_output(path, text)
    except OSError as exc:
        raise InputError(f"{path}: write failed ({exc.strerror or exc})") from None
