"""A replay as its user asks for it: the options of ``tailreplay replay``, parsed and typed.

The command line parses into a ``ReplayArgs``; the Python API and the studies build one
in code. ``to_argv`` writes one back as ``replay``'s own arguments, for the child
processes the studies run (a capacity trial, a validate-model arm) and the pods of a
sharded job: no caller spells a replay's flags by hand.

Each field declares its option (``tailreplay/declared.py``): the command's click
options are generated from these fields, in their order, and a field's default is the
declared one read as the parser reads it (``tests/test_option_declarations.py``;
``tests/test_replay_args.py`` holds every field's round trip through ``to_argv`` and
the real parser). Options other commands or the replayer's configs share are declared
where those meet (``shared_options``, ``replayer/settings.py``, ``report/slo.py``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from yarl import URL

from tailreplay import shared_options as shared
from tailreplay.declared import Choice, Kind, Setting, Text, declared
from tailreplay.exporters.otlp_options import OtlpOptions
from tailreplay.option_values import (
    BODY_DROP,
    BODY_SET,
    DURATION,
    FILE_OUT,
    HEADER,
    HOST_PORT,
    MODEL_MAP,
    TAIL_COST,
)
from tailreplay.replayer import settings
from tailreplay.replayer.scrape import ScrapeTarget
from tailreplay.replayer.speed import Shape
from tailreplay.replayer.users import Users
from tailreplay.report.slo import SLO, SLO_BY, SLO_MIN_SCORE, SLO_WINDOW, Objective
from tailreplay.sim.profiles import SIM_ARG, SIM_PROFILE
from tailreplay.traces.archive.folders import ARCHIVES
from tailreplay.traces.results.client_health import LAG_LIMIT
from tailreplay.units import host_port, parse_time

__all__ = ["ReplayArgs"]

_Argv = Callable[[Any], list[str]]


def _seconds(v: float) -> str:
    return f"{v!r}s"


def _one(flag: str, text: Callable[[Any], str] = str) -> _Argv:
    """``flag VALUE`` for a set option."""
    return lambda v: [flag, text(v)]


def _each(flag: str, text: Callable[[Any], str] = str) -> _Argv:
    """``flag VALUE`` per value of a repeatable option."""
    return lambda values: [a for v in values for a in (flag, text(v))]


def _switch(on: str, off: str) -> _Argv:
    """A boolean pair (``--preflight/--no-preflight``)."""
    return lambda v: [on if v else off]


def _flag(flag: str) -> _Argv:
    return lambda v: [flag] if v else []


def _writes(argv: _Argv) -> dict[str, _Argv]:
    """A field's metadata: how its value is written back as ``replay``'s arguments."""
    return {"argv": argv}


def _otlp_argv(o: OtlpOptions) -> list[str]:
    """The ``--otlp-*`` flags, those set."""
    out: list[str] = []
    for flag, value in (
        ("--otlp-endpoint", o.endpoint),
        ("--otlp-protocol", o.protocol),
        ("--otlp-ca", o.ca),
        ("--otlp-cert", o.cert),
        ("--otlp-key", o.key),
    ):
        if value is not None:
            out += [flag, str(value)]
    out += [a for k, v in o.headers for a in ("--otlp-header", f"{k}={v}")]
    out += [a for k, v in o.resource for a in ("--resource", f"{k}={v}")]
    out += ["--otlp-insecure"] if o.insecure else []
    defaults = OtlpOptions()
    if o.timeout_s != defaults.timeout_s:
        out += ["--otlp-timeout", _seconds(o.timeout_s)]
    if o.trace_sample != defaults.trace_sample:
        out += ["--trace-sample", repr(o.trace_sample)]
    out += ["--otlp-capture-content"] if o.capture_content else []
    if o.provider_name != defaults.provider_name:
        out += ["--gen-ai-provider", o.provider_name]
    return out


def _time(text: str, flag: str) -> int | None:
    return parse_time(text) if text.strip() else None


def _given(flag: str, help: str, kind: Kind | None = None, **more: Any) -> Setting[None]:
    """An option without a default value."""
    return Setting(flag, None, help, kind=kind, **more)


def _switch_of(setting: Setting[Any]) -> _Argv:
    assert setting.off is not None
    return _switch(setting.flag, setting.off)


def _is(flag: str, help: str) -> Setting[bool]:
    return Setting(flag, False, help, is_flag=True)


_TARGET = replace(shared.TARGET, help="Base URL to replay at (default: the built-in simulator).")


@dataclass(frozen=True)
class ReplayArgs:
    """``replay``'s options, parsed: one field per option, named as click names it,
    declared in the order ``--help`` lists them."""

    archives: tuple[Path, ...] = declared(ARCHIVES)
    """The archives to replay (``replay``'s arguments, written last)."""
    target: URL | None = declared(_TARGET, argv=_one("--target"))
    speed: Shape = declared(settings.SPEED, argv=_one("--speed"))
    amplify: float = declared(settings.AMPLIFY, argv=_one("--amplify", lambda v: f"{v!r}x"))
    spread_ticks: bool | None = declared(
        settings.SPREAD_TICKS, argv=_switch_of(settings.SPREAD_TICKS)
    )
    tick_placement: str = declared(settings.TICK_PLACEMENT, argv=_one("--tick-placement"))
    tail_stretch: float = declared(shared.TAIL_STRETCH, argv=_one(shared.TAIL_STRETCH.flag, repr))
    tail_quantile: float = declared(
        shared.TAIL_QUANTILE, argv=_one(shared.TAIL_QUANTILE.flag, repr)
    )
    force_lengths: bool = declared(settings.FORCE_LENGTHS, argv=_switch_of(settings.FORCE_LENGTHS))
    headers: tuple[tuple[str, str], ...] = declared(
        _given(
            "--header",
            "'Name: value' to send (repeatable); also TAILREPLAY_HEADER_<NAME>.",
            HEADER,
            multiple=True,
        ),
        argv=_each("--header", lambda v: f"{v[0]}: {v[1]}"),
    )
    model_maps: tuple[tuple[str, str], ...] = declared(
        _given("--model-map", "A=B: send model B where A was recorded.", MODEL_MAP, multiple=True),
        argv=_each("--model-map", lambda v: f"{v[0]}={v[1]}"),
    )
    body_sets: tuple[tuple[str, Any], ...] = declared(
        _given(
            "--body-set",
            "KEY=VALUE to set in every JSON body, last of all (repeatable); VALUE is JSON "
            "(0, true, {...}) or else a string; KEY may be dotted, e.g. "
            "stream_options.include_usage.",
            BODY_SET,
            multiple=True,
        ),
        argv=_each("--body-set", lambda v: f"{v[0]}={json.dumps(v[1])}"),
    )
    body_drops: tuple[str, ...] = declared(
        _given("--body-drop", "KEY to remove from every JSON body.", BODY_DROP, multiple=True),
        argv=_each("--body-drop"),
    )
    max_inflight: int = declared(settings.MAX_INFLIGHT, argv=_one("--max-inflight"))
    connections: int = declared(settings.CONNECTIONS, argv=_one("--connections"))
    timeout: float = declared(settings.TIMEOUT, argv=_one("--timeout", _seconds))
    duration: float | None = declared(
        _given(
            "--duration",
            "Send only what is due within this much replay time (e.g. 10m); the summary "
            "says how many were never sent.",
            DURATION,
        ),
        argv=_one("--duration", _seconds),
    )
    limit: int | None = declared(
        _given("--limit", "Replay only the first N records.", int, low=0), argv=_one("--limit")
    )
    from_: str | None = declared(
        _given("--from", "Start of the window (ISO-8601, unix s, or +DURATION)."),
        argv=_one("--from"),
    )
    to: str | None = declared(_given("--to", "End of the window (exclusive)."), argv=_one("--to"))
    out: Path | None = declared(
        _given(
            "--out",
            "Result archive, or an existing folder to write it in (default "
            "replays/replay-<UTC>.msgpack).",
            FILE_OUT,
            short="-o",
            aliases=("--output",),
        ),
        argv=_one("--out"),
    )
    overwrite: bool = declared(
        _is(
            "--overwrite",
            "Replace an existing result archive at --out (else refused, exit 2); never "
            "one another replay is writing.",
        ),
        argv=_flag("--overwrite"),
    )
    """Replace an existing result archive at ``out`` (else refused, exit 2)."""
    json_out: Path | None = declared(
        _given("--json", "Write the summary as JSON here.", FILE_OUT), argv=_one("--json")
    )
    shard: tuple[int, int] = declared(
        settings.SHARD_OF, argv=_one("--shard", lambda v: f"{v[0]}/{v[1]}")
    )
    start_at: int | None = declared(
        _given(
            "--start-at",
            "Common start (ISO-8601 or unix s) for sharded replays.",
            Text("time", _time),
        ),
        argv=_one("--start-at", lambda v: repr(v / 1e9)),
    )
    """Unix ns."""
    allow_upstream: bool = declared(
        _is("--allow-upstream", "Allow replaying at the captured upstream itself."),
        argv=_flag("--allow-upstream"),
    )
    new_trace_ids: bool = declared(
        _is("--new-trace-ids", "Start new traces instead of spans in the recorded ones."),
        argv=_flag("--new-trace-ids"),
    )
    dry_run: bool = declared(
        _is("--dry-run", "Write the schedule as a result archive; send nothing."),
        argv=_flag("--dry-run"),
    )
    seed: int = declared(settings.SEED, argv=_one("--seed"))
    sim_profile: str = declared(SIM_PROFILE, argv=_one("--sim-profile"))
    sim_args: tuple[str, ...] = declared(
        replace(
            SIM_ARG,
            help="An argument for the built-in simulator (repeatable; as `tailreplay sim` "
            "takes it), e.g. --sim-arg=--max-model-len=200000; wins over the sizing.",
        ),
        argv=lambda v: [f"--sim-arg={a}" for a in v],
    )
    tail_cost: tuple[float, float] | None = declared(
        _given(
            "--tail-cost",
            "input=MS,output=MS: the cost per token that ranks the tail when the archive "
            "records no latencies [default: the simulator profile's prefill and decode step].",
            TAIL_COST,
        ),
        argv=_one("--tail-cost", lambda v: f"input={v[0]!r},output={v[1]!r}"),
    )
    max_context: int | None = declared(
        _given(
            "--max-context",
            "The target's context in tokens: a tail budget is cut so input + output fits.",
            int,
            low=1,
        ),
        argv=_one("--max-context"),
    )
    skip_corrupt: bool = declared(shared.SKIP_CORRUPT, argv=_flag("--skip-corrupt"))
    scrapes: tuple[ScrapeTarget, ...] = declared(
        settings.SCRAPE, argv=_each("--scrape", lambda s: f"{s.url}@{s.interval_s!r}s")
    )
    users: Users | None = declared(settings.USERS, argv=_one("--users"))
    think: float | None = declared(
        settings.THINK, argv=_one("--think", lambda v: "recorded" if v is None else _seconds(v))
    )
    """Seconds; None: the recorded gap."""
    retries: str = declared(settings.RETRIES, argv=_one("--retries"))
    max_attempts: int = declared(settings.MAX_ATTEMPTS, argv=_one("--max-attempts"))
    client_aborts: str = declared(settings.CLIENT_ABORTS, argv=_one("--client-aborts"))
    metrics_listen: tuple[str, int] | None = declared(
        _given(
            "--metrics-listen",
            "HOST:PORT to serve Prometheus metrics on while the replay runs.",
            HOST_PORT,
        ),
        argv=_one("--metrics-listen", lambda v: host_port(*v)),
    )
    metrics_linger: float = declared(
        settings.METRICS_LINGER, argv=_one("--metrics-linger", _seconds)
    )
    lag_limit: float = declared(LAG_LIMIT, argv=_one("--lag-limit", _seconds))
    """Seconds."""
    preflight: bool = declared(settings.PREFLIGHT, argv=_switch_of(settings.PREFLIGHT))
    fail_fast: int = declared(settings.FAIL_FAST, argv=_one("--fail-fast"))
    report_out: Path | None = declared(
        _given(
            "--report",
            "After the run, write the report (recorded against replayed) here: .html, .md "
            "or .json by the suffix. Also written after Ctrl-C.",
            FILE_OUT,
        ),
        argv=_one("--report"),
    )
    slos: list[Objective] = declared(SLO, argv=_each("--slo", lambda o: o.text))
    slo_min_score: float = declared(SLO_MIN_SCORE, argv=_one("--slo-min-score", repr))
    slo_window: float | None = declared(SLO_WINDOW, argv=_one("--slo-window", _seconds))
    slo_by: str | None = declared(SLO_BY, argv=_one("--slo-by"))
    slo_stop: str | None = declared(
        _given(
            "--slo-stop",
            "Stop once a --slo objective on latency, TTFT or error rate is missed whatever "
            "the rest of the run does (enough requests already over its limit): now, sending "
            "no more; or after-sending, once the whole schedule is sent. Requests in flight "
            "are cancelled; the exit code is 1.",
            Choice(("now", "after-sending")),
        ),
        argv=_one("--slo-stop"),
    )
    slo_report: bool = declared(
        Setting("--no-slo-report", True, is_flag=True, flag_value=False, hidden=True),
        argv=lambda v: [] if v else ["--no-slo-report"],
    )
    """False: a caller judges the results itself (``capacity``'s trials)."""
    workers: int = declared(
        Setting(
            "--workers",
            1,
            "Processes on this machine, one shard each, merged into one result "
            "(one process keeps a 1 ms lag P99 to 5,000-7,000 requests/s on 2 shared cores, "
            "docs/benchmarks.md).",
            kind=int,
            low=1,
            high=64,
            show_default=True,
        ),
        argv=_one("--workers"),
    )
    event_loop: str = declared(settings.EVENT_LOOP, argv=_one("--event-loop"))
    otlp: OtlpOptions = field(default_factory=OtlpOptions, metadata=_writes(_otlp_argv))
    """The OTLP flags, an option set of their own (``cli/options.otlp_options``)."""

    def to_argv(self) -> list[str]:
        """``replay``'s arguments for these options: each option that differs from its
        default, then the archives."""
        defaults = ReplayArgs()
        argv: list[str] = []
        for f in fields(self):
            value = getattr(self, f.name)
            # Every option has its writer; the archives, arguments, come last.
            if "argv" in f.metadata and value != getattr(defaults, f.name):
                argv += f.metadata["argv"](value)
        paths = [str(p) for p in self.archives]
        # A path that starts with "-" would read as an option.
        return [*argv, *(["--"] if any(p.startswith("-") for p in paths) else []), *paths]
