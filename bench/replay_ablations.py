"""What each part of a paced replay costs, by taking it away: the replay's CPU at a rate
with one part removed, beside the whole replay, run by run in turn.

One replay process sends evenly spaced chat requests (16-token prompts, 2-token outputs)
at ``--rate`` to nginx returning a fixed body for ``--seconds``, as
``bench/dispatch_parts.py`` does; a ``sitecustomize`` in the replay's interpreter takes
one part away for an arm:

- ``whole``: nothing taken away;
- ``no-build``: every request reuses the first one built (no prompt drawn, no body made);
- ``no-archive``: no ``--out`` (no result archive written, no writer thread);
- ``no-answer``: an answer's body is not read for usage and finish reason;
- ``no-wait``: the timer wakes the dispatcher at the due time, no busy wait before it;
- ``no-gc``: the cyclic garbage collector off.

And arms that change how a part is done rather than take it away:

- ``batch-build``: the look-ahead refilled once it holds under 32 requests (built
  until full or out of time) rather than from half its bounds;
- ``batch-results``: each finished request's accounting (its result record, the
  archive, the summary) deferred and done 50 ms' worth at a time;
- ``uvloop``: ``--event-loop uvloop``;
- ``margin-2dev``, ``margin-1dev``: the timer armed ahead of due by the wake-ups'
  smoothed lateness plus two of its smoothed deviations, or one, rather than by the
  lateness alone (``timer.WakeMargin``): more busy wait before each send, fewer
  sends late.

Printed per arm: the median over ``--runs`` of the replay's CPU as a share of a core
(the summary's ``client.cpu_share``: the dispatch's span), and its difference from
``whole`` in the same invocation (what the part costs, in microseconds a request),
and the median of its dispatch lag P99. The spread of ``whole`` across its runs is
printed too: a difference inside it is noise.
Needs nginx. Run: ``.venv/bin/python bench/replay_ablations.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay import even_archive

from proxy import free_port, nginx, process

_ONLY_IN_REPLAY = 'import sys\nif "replay" in sys.argv:\n'
_DEVIATIONS = """    from tailreplay.replayer import timer
    init = timer.WakeMargin.__init__
    def __init__(self, *, first, widest, share, deviations=0.0):
        init(self, first=first, widest=widest, share=share, deviations={})
    timer.WakeMargin.__init__ = __init__
"""
TAKEN_AWAY = {
    "whole": "",
    "no-build": _ONLY_IN_REPLAY
    + """    from tailreplay.replayer import lookahead
    built, first = lookahead.Lookahead._build, []
    def _build(self, item):
        if not first:
            first.append(built(self, item))
        return first[0]
    lookahead.Lookahead._build = _build
""",
    "no-archive": "",
    "no-answer": _ONLY_IN_REPLAY
    + """    from tailreplay.replayer import transport
    transport._Reader.finish = lambda self, spec: self.out
""",
    "no-wait": _ONLY_IN_REPLAY
    + """    import tailreplay.replayer.timer as timer
    timer.WakeMargin.at = lambda self, due: 0.0
""",
    "no-gc": _ONLY_IN_REPLAY + "    import gc\n    gc.disable()\n",
    "batch-build": _ONLY_IN_REPLAY
    + """    from tailreplay.replayer import lookahead
    one_build = lookahead.Lookahead.build_ahead
    def build_ahead(self, time_left_s):
        if len(self._ready) >= 32 and not getattr(self, "_filling", False):
            return False
        self._filling = one_build(self, time_left_s)
        return self._filling
    lookahead.Lookahead.build_ahead = build_ahead
""",
    "batch-results": _ONLY_IN_REPLAY
    + """    import asyncio
    from tailreplay.replayer import dispatch
    done, settle = dispatch.Dispatcher._done, dispatch.Dispatcher._settle
    def _flush(self):
        queued, self._queued = self._queued, []
        for args in queued:
            done(self, *args)
    def _done(self, *args):
        queued = self.__dict__.setdefault("_queued", [])
        queued.append(args)
        if len(queued) == 1:
            asyncio.get_running_loop().call_later(0.05, _flush, self)
    async def _settle(self):
        await settle(self)
        await asyncio.sleep(0.06)  # the last batch accounted for before the summary
    dispatch.Dispatcher._done, dispatch.Dispatcher._settle = _done, _settle
""",
    "uvloop": "",
    "margin-2dev": _ONLY_IN_REPLAY + _DEVIATIONS.format(2.0),
    "margin-1dev": _ONLY_IN_REPLAY + _DEVIATIONS.format(1.0),
}
EXTRA_ARGS = {"uvloop": ["--event-loop", "uvloop"]}


def one_run(arm: str, url: str, archive: Path, tmp: Path) -> tuple[float, float]:
    """One replay with ``arm``'s part taken away: its CPU share of a core, and its
    dispatch lag P99 (ms)."""
    site = tmp / f"site-{arm}"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(TAKEN_AWAY[arm])
    summary = tmp / "s.json"
    cmd = [sys.executable, "-m", "tailreplay", "replay", str(archive), "--target", url,
           "--json", str(summary), "--tail-stretch", "1", *EXTRA_ARGS.get(arm, [])]  # fmt: skip
    if arm != "no-archive":
        cmd += ["--out", str(tmp / "r.msgpack"), "--overwrite"]
    env = {**os.environ, "PYTHONPATH": str(site)}
    subprocess.run(cmd, check=True, capture_output=True, env=env, cwd=tmp)
    summary_map = json.loads(summary.read_text())
    return summary_map["client"]["cpu_share"], summary_map["lag_ms"]["p99"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument(
        "--arms",
        default="whole,no-build,no-archive,no-answer,no-wait,no-gc",
        help=f"comma-separated, of {', '.join(TAKEN_AWAY)}",
    )
    args = parser.parse_args()
    arms = args.arms.split(",")
    shares: dict[str, list[float]] = {arm: [] for arm in arms}
    lags: dict[str, list[float]] = {arm: [] for arm in arms}
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        port = free_port()
        with process(nginx(tmp, 1, free_port(), port, fixed=port), port):
            archive = tmp / "even.msgpack"
            even_archive(archive, args.rate, args.seconds)
            for _ in range(args.runs):
                for arm in arms:
                    share, lag = one_run(arm, f"http://127.0.0.1:{port}", archive, tmp)
                    shares[arm].append(share)
                    lags[arm].append(lag)
    report(args, shares, lags)


def report(
    args: argparse.Namespace, shares: dict[str, list[float]], lags: dict[str, list[float]]
) -> None:
    med = {arm: statistics.median(v) for arm, v in shares.items()}
    whole = med.get("whole")
    print(f"{args.rate:,}/s for {args.seconds:g} s at nginx, median of {args.runs} runs "
          f"an arm, arms in turn")  # fmt: skip
    if "whole" in shares:
        runs = shares["whole"]
        print(f"whole: {min(runs):.1%} to {max(runs):.1%} of a core across its runs")
    print()
    head = "| arm | CPU, share of a core | µs a request | against whole, µs a request |"
    print(head + " lag P99, ms |")
    print("|---|---:|---:|---:|---:|")
    for arm, share in med.items():
        against = "" if whole is None else f"{(share - whole) / args.rate * 1e6:+.0f}"
        lag = statistics.median(lags[arm])
        print(f"| {arm} | {share:.1%} | {share / args.rate * 1e6:.0f} | {against} | {lag:.2f} |")


if __name__ == "__main__":
    main()
