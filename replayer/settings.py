"""The options of ``tailreplay replay`` that set the replayer's own configs, each
declared once (``tailreplay/declared.py``): ``ReplayArgs`` (``studies/replay_args.py``)
declares its fields with them, the command line's options are generated from that,
and ``ScheduleConfig`` and ``ReplayConfig`` default to the same values."""

from __future__ import annotations

from dataclasses import replace

from tailreplay import shared_options as shared
from tailreplay.declared import Choice, Setting, Text
from tailreplay.eventloop import EVENT_LOOPS
from tailreplay.option_values import DURATION, FACTOR, SHARD
from tailreplay.replayer.scrape import parse_scrape
from tailreplay.replayer.speed import parse_speed
from tailreplay.replayer.users import parse_users
from tailreplay.units import parse_duration

__all__ = [
    "AMPLIFY",
    "CLIENT_ABORTS",
    "CONNECTIONS",
    "EVENT_LOOP",
    "FAIL_FAST",
    "FORCE_LENGTHS",
    "MAX_ATTEMPTS",
    "MAX_INFLIGHT",
    "METRICS_LINGER",
    "PLACEMENTS",
    "PREFLIGHT",
    "RETRIES",
    "SCRAPE",
    "SEED",
    "SHARD_OF",
    "SPEED",
    "SPREAD_TICKS",
    "THINK",
    "TICK_PLACEMENT",
    "TIMEOUT",
    "USERS",
]

PLACEMENTS = ("random", "even")
"""How a tick's requests are placed in it. ``random`` (the default): each at its own
seeded draw, uniform over the tick. The clock hid when in the tick each request
came; independent uniform draws assume the least about it, and keep what arrivals
at random have within a tick: bunches and gaps, so a queue meets the bursts a real
arrival process brings (on a 3 s-tick log, the sends' index of dispersion at 1 s
is that of random arrivals, about 1, where even placement reads 0.39). ``even``:
golden-ratio steps from a seeded phase (``spread_fraction``), no two closer than
0.38/n of the tick: the smoothest reading, which understates a tail that bursts
make."""

SPEED = replace(shared.SPEED, kind=Text("speed", lambda text, flag: parse_speed(text)))
"""``--speed`` read into its load shape."""
AMPLIFY: Setting[str] = Setting(
    "--amplify",
    "1x",
    "Send N copies of each request (e.g. 3x, 1.5x).",
    kind=FACTOR,
    show_default=True,
)
SPREAD_TICKS: Setting[None] = Setting(
    "--spread-ticks",
    None,
    "Spread each tick's requests over the tick when the archive's timestamps were "
    "logged in coarse ticks (1 s, 3 s: many requests share each timestamp), by a draw "
    "from --seed; the count per tick is kept. Default: on when such a clock is detected.",
    off="--no-spread-ticks",
)
TICK_PLACEMENT: Setting[str] = Setting(
    "--tick-placement",
    "random",
    "Where in its tick a spread request goes: random (each at its own draw from "
    "--seed, as requests arriving at random in the tick would) or even (evenly spaced "
    "from a drawn phase: smoother than any real arrival process).",
    kind=Choice(PLACEMENTS),
    show_default=True,
)
FORCE_LENGTHS: Setting[bool] = Setting(
    "--force-lengths",
    True,
    "Send min_tokens and ignore_eos so the target generates exactly the budget.",
    off="--no-force-lengths",
    show_default=True,
)
MAX_INFLIGHT: Setting[int] = Setting(
    "--max-inflight",
    4096,
    "Requests in flight at once; one that finds no slot within 100 ms of its due "
    "time is dropped and counted, never sent late.",
    kind=int,
    low=1,
    show_default=True,
)
CONNECTIONS: Setting[int] = Setting(
    "--connections",
    1024,
    "Connections to the target at most (0: no limit).",
    kind=int,
    low=0,
    show_default=True,
)
TIMEOUT: Setting[str] = Setting(
    "--timeout",
    "300s",
    "Longest a request may take, from sending to its last byte.",
    kind=DURATION,
    show_default=True,
)
SHARD_OF: Setting[str] = Setting(
    "--shard", "0/1", "i/N: replay this shard of the trace ids.", kind=SHARD, show_default=True
)
SEED: Setting[int] = Setting(
    "--seed",
    0,
    "Seed of synthetic prompts, --amplify's copies and the built-in simulator.",
    kind=int,
    low=-(2**63),
    high=2**63 - 1,  # it is kept in the result archive's header, a msgpack int64
    show_default=True,
)
SCRAPE: Setting[None] = Setting(
    "--scrape",
    None,
    "Read Prometheus metrics from URL every interval (default 1s) during the run "
    "(repeatable; 'target' is the target's own /metrics, the built-in simulator's too): "
    "kept beside the results, read by the report (vLLM, SGLang, TGI, llama.cpp, DCGM).",
    kind=Text("URL[@1s]", lambda text, flag: parse_scrape(text)),
    multiple=True,
)
USERS: Setting[None] = Setting(
    "--users",
    None,
    "Closed loop: N users, each sending the next record (in recorded order) once its "
    "last is answered and --think has passed; the target sets the rate, not --speed. "
    "Steps: 10,20,50@1m.",
    kind=Text("users", lambda text, flag: parse_users(text)),
)
THINK: Setting[str] = Setting(
    "--think",
    "0s",
    "With --users: each user's pause between an answer and its next request, or "
    "'recorded': the session's recorded gap from the last request's end to this one's start.",
    kind=Text("think", lambda text, flag: None if text == "recorded" else parse_duration(text)),
    show_default=True,
)
RETRIES: Setting[str] = Setting(
    "--retries",
    "recorded",
    "recorded: send each record once, retries as recorded; policy: retry a 429/503 "
    "after its Retry-After, a 5xx or timeout with backoff and jitter; off: never retry.",
    kind=Choice(("recorded", "policy", "off")),
    show_default=True,
)
MAX_ATTEMPTS: Setting[int] = Setting(
    "--max-attempts",
    3,
    "With --retries policy: attempts per request at most, the first included.",
    kind=int,
    low=1,
    high=100,
    show_default=True,
)
CLIENT_ABORTS: Setting[str] = Setting(
    "--client-aborts",
    "replay",
    "replay: a request the client abandoned (client_abort) is abandoned after as "
    "many streamed tokens (or, those unknown, as long); off: every answer read whole.",
    kind=Choice(("replay", "off")),
    show_default=True,
)
METRICS_LINGER: Setting[str] = Setting(
    "--metrics-linger",
    "0s",
    "Keep serving metrics this long after the run, so the last scrape sees the end.",
    kind=DURATION,
    show_default=True,
)
PREFLIGHT: Setting[bool] = Setting(
    "--preflight",
    True,
    "Before the schedule starts, send the first request (one output token) and stop "
    "with the cause if the target cannot answer it (down, 404, HTML, 401).",
    off="--no-preflight",
    show_default=True,
)
FAIL_FAST: Setting[int] = Setting(
    "--fail-fast",
    20,
    "Stop when the first N results all failed the same way (0: never).",
    kind=int,
    low=0,
    show_default=True,
)
EVENT_LOOP: Setting[str] = Setting(
    "--event-loop",
    "asyncio",
    "The event loop the replay runs on: asyncio's own, uvloop (pip install uvloop), "
    "or auto: uvloop when it can be imported.",
    kind=Choice(EVENT_LOOPS),
    show_default=True,
)
