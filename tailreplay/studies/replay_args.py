"""A replay as its user asks for it: the options of ``tailreplay replay``, parsed and typed.

The command line parses into a ``ReplayArgs``; the Python API and the studies build one
in code. ``to_argv`` writes one back as ``replay``'s own arguments, for the child
processes the studies run (a capacity trial, a validate-model arm) and the pods of a
sharded job: no caller spells a replay's flags by hand.

Each field declares its option (``tailreplay/declared.py``): the command's click
options are generated from these fields, in their order, and a field's default is the
declared one read as the parser reads it (``tests/test_option_declarations.py``;
``tests/studies/test_replay_args.py`` holds every field's round trip through ``to_argv`` and
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
from tailreplay.declared import Choice, Kind, Setting, Text, declarations, declared
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


def _seconds(v: float) -> str:
    return f"{v!r}s"


def _written(setting: Setting[Any], text: Callable[[Any], str], value: Any) -> list[str]:
    """``setting``'s flag for ``value`` (not its default), as the parser reads it back."""
    if setting.is_flag:
        return [setting.flag]
    if setting.off is not None:  # a boolean pair (--preflight/--no-preflight)
        return [setting.flag if value else setting.off]
    values = value if setting.multiple else [value]
    # A value that starts with "-" (--sim-arg=--max-num-seqs=8) would read as a flag.
    return [a for v in values for a in _given_as(setting.flag, text(v))]


def _given_as(flag: str, text: str) -> list[str]:
    return [f"{flag}={text}"] if text.startswith("-") else [flag, text]


def _writes(argv: Callable[[Any], list[str]]) -> dict[str, Callable[[Any], list[str]]]:
    """The metadata of a field that is no declared option: how its value is written back
    as ``replay``'s arguments."""
    return {"argv": argv}


_OTLP_TEXT: dict[str, Callable[[Any], str]] = {"timeout_s": _seconds, "trace_sample": repr}
"""How an OTLP value is written where ``str`` would not read back the same."""


def _otlp_argv(o: OtlpOptions) -> list[str]:
    """The OTLP flags (their declarations, ``exporters/otlp_options.py``) of the values
    that differ from the defaults."""
    defaults = OtlpOptions()
    out: list[str] = []
    for name, setting in declarations(OtlpOptions):
        value = getattr(o, name)
        if value == getattr(defaults, name):
            continue
        if setting.is_flag:
            out.append(setting.flag)
        elif setting.multiple:  # K=V pairs
            out += [a for k, v in value for a in (setting.flag, f"{k}={v}")]
        else:
            out += [setting.flag, _OTLP_TEXT.get(name, str)(value)]
    return out


def _time(text: str, flag: str) -> int | None:
    return parse_time(text) if text.strip() else None


def _given(flag: str, help: str, kind: Kind | None = None, **more: Any) -> Setting[None]:
    """An option without a default value."""
    return Setting(flag, None, help, kind=kind, **more)


def _is(flag: str, help: str) -> Setting[bool]:
    return Setting(flag, False, help, is_flag=True)


_TARGET = replace(shared.TARGET, help="Base URL to replay at (default: the built-in simulator).")


@dataclass(frozen=True)
class ReplayArgs:
    """``replay``'s options, parsed: one field per option, named as click names it,
    declared in the order ``--help`` lists them."""

    archives: tuple[Path, ...] = declared(ARCHIVES)
    """The archives to replay (``replay``'s arguments, written last)."""
    target: URL | None = declared(_TARGET)
    speed: Shape = declared(settings.SPEED)
    amplify: float = declared(settings.AMPLIFY, text=lambda v: f"{v!r}x")
    spread_ticks: bool | None = declared(settings.SPREAD_TICKS)
    tick_placement: str = declared(settings.TICK_PLACEMENT)
    tail_stretch: float = declared(shared.TAIL_STRETCH, text=repr)
    tail_quantile: float = declared(shared.TAIL_QUANTILE, text=repr)
    force_lengths: bool = declared(settings.FORCE_LENGTHS)
    headers: tuple[tuple[str, str], ...] = declared(
        _given(
            "--header",
            "'Name: value' to send (repeatable); also TAILREPLAY_HEADER_<NAME>.",
            HEADER,
            multiple=True,
        ),
        text=lambda v: f"{v[0]}: {v[1]}",
    )
    model_maps: tuple[tuple[str, str], ...] = declared(
        _given("--model-map", "A=B: send model B where A was recorded.", MODEL_MAP, multiple=True),
        text=lambda v: f"{v[0]}={v[1]}",
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
        text=lambda v: f"{v[0]}={json.dumps(v[1])}",
    )
    body_drops: tuple[str, ...] = declared(
        _given("--body-drop", "KEY to remove from every JSON body.", BODY_DROP, multiple=True),
    )
    max_inflight: int = declared(settings.MAX_INFLIGHT)
    connections: int = declared(settings.CONNECTIONS)
    timeout: float = declared(settings.TIMEOUT, text=_seconds)
    duration: float | None = declared(
        _given(
            "--duration",
            "Send only what is due within this much replay time (e.g. 10m); the summary "
            "says how many were never sent.",
            DURATION,
        ),
        text=_seconds,
    )
    limit: int | None = declared(_given("--limit", "Replay only the first N records.", int, low=0))
    from_: str | None = declared(
        _given("--from", "Start of the window (ISO-8601, unix s, or +DURATION)."),
    )
    to: str | None = declared(_given("--to", "End of the window (exclusive)."))
    out: Path | None = declared(
        _given(
            "--out",
            "Result archive, or an existing folder to write it in (default "
            "replays/replay-<UTC>.msgpack).",
            FILE_OUT,
            short="-o",
            aliases=("--output",),
        ),
    )
    overwrite: bool = declared(
        _is(
            "--overwrite",
            "Replace an existing result archive at --out (else refused, exit 2); never "
            "one another replay is writing.",
        ),
    )
    """Replace an existing result archive at ``out`` (else refused, exit 2)."""
    json_out: Path | None = declared(_given("--json", "Write the summary as JSON here.", FILE_OUT))
    shard: tuple[int, int] = declared(settings.SHARD_OF, text=lambda v: f"{v[0]}/{v[1]}")
    start_at: int | None = declared(
        _given(
            "--start-at",
            "Common start (ISO-8601 or unix s) for sharded replays.",
            Text("time", _time),
        ),
        text=lambda v: repr(v / 1e9),
    )
    """Unix ns."""
    allow_upstream: bool = declared(
        _is("--allow-upstream", "Allow replaying at the captured upstream itself."),
    )
    new_trace_ids: bool = declared(
        _is("--new-trace-ids", "Start new traces instead of spans in the recorded ones."),
    )
    dry_run: bool = declared(
        _is("--dry-run", "Write the schedule as a result archive; send nothing."),
    )
    offline: bool = declared(
        _is(
            "--offline",
            "Serve the replay by the built-in simulator's engine in this process, on a "
            "virtual clock: no sockets and no waiting, the timings the model's exactly "
            "(a twin's answers in seconds; `--sim-arg=--profile=FILE`).",
        ),
    )
    seed: int = declared(settings.SEED)
    sim_profile: str = declared(SIM_PROFILE)
    sim_args: tuple[str, ...] = declared(
        replace(
            SIM_ARG,
            help="An argument for the built-in simulator (repeatable; as `tailreplay sim` "
            "takes it), e.g. --sim-arg=--max-model-len=200000; wins over the sizing.",
        )
    )
    tail_cost: tuple[float, float] | None = declared(
        _given(
            "--tail-cost",
            "input=MS,output=MS: the cost per token that ranks the tail when the archive "
            "records no latencies [default: the simulator profile's prefill and decode step].",
            TAIL_COST,
        ),
        text=lambda v: f"input={v[0]!r},output={v[1]!r}",
    )
    max_context: int | None = declared(
        _given(
            "--max-context",
            "The target's context in tokens: a tail budget is cut so input + output fits.",
            int,
            low=1,
            high=1 << 31,  # past every context; a budget's arithmetic is int64
        ),
    )
    skip_corrupt: bool = declared(shared.SKIP_CORRUPT)
    scrapes: tuple[ScrapeTarget, ...] = declared(
        settings.SCRAPE, text=lambda s: f"{s.url}@{s.interval_s!r}s"
    )
    users: Users | None = declared(settings.USERS)
    think: float | None = declared(
        settings.THINK, text=lambda v: "recorded" if v is None else _seconds(v)
    )
    """Seconds; None: the recorded gap."""
    retries: str = declared(settings.RETRIES)
    max_attempts: int = declared(settings.MAX_ATTEMPTS)
    client_aborts: str = declared(settings.CLIENT_ABORTS)
    metrics_listen: tuple[str, int] | None = declared(
        _given(
            "--metrics-listen",
            "HOST:PORT to serve Prometheus metrics on while the replay runs.",
            HOST_PORT,
        ),
        text=lambda v: host_port(*v),
    )
    metrics_linger: float = declared(settings.METRICS_LINGER, text=_seconds)
    lag_limit: float = declared(LAG_LIMIT, text=_seconds)
    """Seconds."""
    preflight: bool = declared(settings.PREFLIGHT)
    fail_fast: int = declared(settings.FAIL_FAST)
    report_out: Path | None = declared(
        _given(
            "--report",
            "After the run, write the report (recorded against replayed) here: .html, .md "
            "or .json by the suffix. Also written after Ctrl-C.",
            FILE_OUT,
        ),
    )
    slos: list[Objective] = declared(SLO, text=lambda o: o.text)
    slo_min_score: float = declared(SLO_MIN_SCORE, text=repr)
    slo_window: float | None = declared(SLO_WINDOW, text=_seconds)
    slo_by: str | None = declared(SLO_BY)
    slo_stop: str | None = declared(
        _given(
            "--slo-stop",
            "Stop once a --slo objective on latency, TTFT or error rate is missed whatever "
            "the rest of the run does (enough requests already over its limit): now, sending "
            "no more; or after-sending, once the whole schedule is sent. Requests in flight "
            "are cancelled; the exit code is 1.",
            Choice(("now", "after-sending")),
        ),
    )
    slo_report: bool = declared(
        Setting("--no-slo-report", True, is_flag=True, flag_value=False, hidden=True)
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
    )
    event_loop: str = declared(settings.EVENT_LOOP)
    otlp: OtlpOptions = field(default_factory=OtlpOptions, metadata=_writes(_otlp_argv))
    """The OTLP flags, an option set of their own (``cli/options.otlp_options``)."""

    def to_argv(self) -> list[str]:
        """``replay``'s arguments for these options: each option that differs from its
        default, then the archives."""
        defaults = ReplayArgs()
        argv: list[str] = []
        for f in fields(self):
            value = getattr(self, f.name)
            if value == getattr(defaults, f.name):
                continue
            if "argv" in f.metadata:
                argv += f.metadata["argv"](value)
            elif not (setting := f.metadata["setting"]).argument:  # those come last
                argv += _written(setting, f.metadata.get("text", str), value)
        paths = [str(p) for p in self.archives]
        # A path that starts with "-" would read as an option.
        return [*argv, *(["--"] if any(p.startswith("-") for p in paths) else []), *paths]
