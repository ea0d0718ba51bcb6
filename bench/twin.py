"""A twin of a target: calibrated from one replay, does it predict the others?

A recorded window of streamed chat requests (prompts of 30..3,000 tokens, answers of
20..60, arrivals ramping so the batch grows from one to a few dozen) is replayed
against the real target at the calibration load L (``--speed 1x``), and
``tailreplay sim calibrate`` fits a profile from those results: the twin. Then the
window is replayed at each of ``--loads`` (L times each: ``--speed``) against the real
target and against the fitted profile (``replay --offline``: the simulator's engine on
a virtual clock, as ``capacity --twin`` runs it), and the P50 and P99 of TTFT and
latency are compared, with the twin's relative error.

With ``--repeats N``, every load is replayed N times against the real target (in
rounds, each through every load, each on prompts of its own); its figures are read
from the rounds' pooled requests, and its own spread between the rounds is printed:
the noise floor of any prediction of it. The twin is calibrated on the first round's
1x replay and replayed once a load: offline it serves token counts on a virtual
clock, so another round's prompts give it the same figures.

With ``--capacity SLO``, ``tailreplay capacity`` also searches the window's capacity
under the SLO against the real target and with ``--twin`` (offline), and the two
answers and their wall times are printed.

The real target is ``--target URL`` (an engine already running: llama.cpp's server,
vLLM), or by default the built-in simulator with a hidden profile (the ``fast``
profile's costs scaled by factors the fit is not told), which checks the whole path
(replay, calibration, twin) where the answer is known.

    .venv/bin/python bench/twin.py --loads 0.5,1,1.5,2
    .venv/bin/python bench/twin.py --llama-server .venv/bin/llama-server MODEL 4 \
        --seconds 180 --rate 0.5 --rate-from 0.1 --prompt-max 600 \
        --capacity 'latency:p95<=4s'
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tailreplay.sim.launcher import sim_process
from tailreplay.traces.archive.columns import load_columns
from tailreplay.traces.results.figures import metric_values
from tailreplay.traces.results.stats import STATS_FIELDS, STATS_PRESENCE, requests
from tests.helpers import TWIN_HIDDEN, free_port, ramping_window, served, warm_llama

FIGURES = (("ttft", "TTFT"), ("latency", "latency"))


@contextlib.contextmanager
def real_target(
    url: str | None, llama: list[str] | None = None, slot_context: int = 1024
) -> Iterator[str]:
    """The given target, llama.cpp's server started with ``llama`` (its binary, model
    and slots; ``slot_context`` tokens of context a slot), or a built-in simulator with
    the hidden profile."""
    if url is not None:
        yield url
        return
    if llama is not None:
        server, model, slots = llama
        port = free_port()
        context = str(slot_context * int(slots))
        cmd = [server, "-m", model, "--host", "127.0.0.1", "--port", str(port),
               "--parallel", slots, "--ctx-size", context, "--metrics", "-t", "2"]  # fmt: skip
        with tempfile.TemporaryDirectory() as tmp:
            log = Path(tmp) / "llama-server.log"
            with served(cmd, f"http://127.0.0.1:{port}", "/health", log) as started:
                warm_llama(started, int(slots))
                yield started
        return
    hidden = [f"--{name.replace('_', '-')}={value}" for name, value in TWIN_HIDDEN.items()]
    with sim_process(["--profile", "fast", "--nice", "5", "--seed", "3", *hidden]) as started:
        yield started


def replay(archive: Path, out: Path, speed: float, target: list[str], rnd: int = 0) -> None:
    """One replay at ``speed``. Its prompts are drawn on a seed of the speed's (and the
    round's) own: a real target serves every load in turn and keeps its prefix cache
    from one to the next, which the same prompts again would hit, where each twin
    starts empty."""
    seed = str(round(speed * 1000) + 7919 * rnd)
    cmd = [sys.executable, "-m", "tailreplay", "replay", str(archive), *target,
           "--speed", f"{speed:g}x", "--out", str(out), "--overwrite", "--tail-stretch", "1",
           "--seed", seed, "--lag-limit", "1h"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode not in (0, 4):  # 4: an SLO or health verdict, the results stand
        sys.exit(f"replay at {speed:g}x exited {done.returncode}: {done.stderr[-500:]}")


def capacity(archive: Path, out: Path, slo: str, target: list[str]) -> tuple[dict, float]:
    """``tailreplay capacity`` of the window under ``slo``: its JSON answer and wall time."""
    began = time.monotonic()
    cmd = [sys.executable, "-m", "tailreplay", "capacity", str(archive), *target]
    cmd += ["--slo", slo, "--tail-stretch", "1", "--lag-limit", "1h"]
    cmd += ["--out-dir", str(out), "--overwrite", "--json", str(out.with_suffix(".json"))]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"capacity {target} exited {done.returncode}: {done.stderr[-500:]}")
    return json.loads(out.with_suffix(".json").read_text()), time.monotonic() - began


def figures(results: list[Path]) -> dict[str, tuple[float, float]]:
    """P50 and P99 (ms) of TTFT and latency, over the requests of all ``results``."""
    cols = load_columns(results, list(STATS_FIELDS), presence_only=STATS_PRESENCE)
    values = metric_values(requests(cols))
    return {
        name: tuple(float(v) for v in np.percentile(values[name], [50, 99]))  # type: ignore[misc]
        for name, _ in FIGURES
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", help="the real engine's URL (default: a hidden simulator)")
    ap.add_argument("--llama-server", nargs=3, metavar=("BINARY", "MODEL", "SLOTS"),
                    help="start llama.cpp's server as the real engine (context for "
                    "--prompt-max a slot, 2 threads)")  # fmt: skip
    ap.add_argument("--loads", default="0.5,1,1.5,2", help="multiples of the calibration load")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--rate", type=float, default=14.0, help="arrivals a second at the end")
    ap.add_argument("--rate-from", type=float, default=1.0, help="arrivals a second at first")
    ap.add_argument("--prompt-max", type=int, default=3000, help="the longest prompt, tokens")
    ap.add_argument(
        "--repeats", type=int, default=1,
        help="replay each load this many times against the real target, each round on "
        "prompts of its own, and compare the twin with the rounds' pooled requests",
    )  # fmt: skip
    ap.add_argument("--keep", type=Path, help="keep the window, the replays and the profile here")
    ap.add_argument(
        "--capacity",
        metavar="SLO",
        help="also search the capacity under SLO, against the real target and with --twin",
    )
    args = ap.parse_args()
    loads = [float(x) for x in args.loads.split(",")]
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir) if args.keep is None else args.keep
        tmp.mkdir(parents=True, exist_ok=True)
        archive = tmp / "window.msgpack"
        n = ramping_window(archive, args.seconds, args.rate, 11, rate_from=args.rate_from,
                           prompt_max=args.prompt_max)  # fmt: skip
        real: dict[float, list[Path]] = {}
        spent = {"real": 0.0, "twin": 0.0}  # wall time of the replays of --loads (one round)
        searched: dict[str, tuple[dict, float]] = {}  # --capacity: answer, wall time
        with real_target(args.target, args.llama_server, args.prompt_max + 128) as url:
            # Rounds one after another, each through every load: a drift of the
            # machine over the run falls on every load alike.
            for rnd in range(args.repeats):
                for load in sorted({1.0, *loads}):
                    out = tmp / f"real-{load:g}{_round(rnd)}.msgpack"
                    began = time.monotonic()
                    replay(archive, out, load, ["--target", url], rnd)
                    spent["real"] += (time.monotonic() - began) * (load in loads and not rnd)
                    real.setdefault(load, []).append(out)
            if args.capacity:
                against = ["--target", url]
                searched["real"] = capacity(archive, tmp / "cap-real", args.capacity, against)
        profile = tmp / "twin.json"
        subprocess.run(
            [sys.executable, "-m", "tailreplay", "sim", "calibrate",
             str(real[1.0][0]), "-o", str(profile)],
            check=True,
        )  # fmt: skip
        twin: dict[float, Path] = {}
        # The slot count is the deployment's, known to whoever runs it (llama-server's
        # --parallel); a window at half the capacity never fills the slots to show it.
        slots = [f"--sim-arg=--max-num-seqs={args.llama_server[2]}"] if args.llama_server else []
        for load in loads:
            out = tmp / f"twin-{load:g}.msgpack"
            began = time.monotonic()
            replay(archive, out, load, [f"--sim-arg=--profile={profile}", "--offline", *slots])
            spent["twin"] += time.monotonic() - began
            twin[load] = out
        if args.capacity:
            against = ["--twin", str(profile), *slots]
            searched["twin"] = capacity(archive, tmp / "cap-twin", args.capacity, against)
        pooled_real = {load: figures(paths) for load, paths in real.items()}
        pooled_twin = {load: figures([path]) for load, path in twin.items()}
        rounds = {load: [figures([p]) for p in real[load]] for load in loads}
    report(args, n, loads, pooled_real, pooled_twin)
    if args.repeats > 1:
        report_spread(args.repeats, loads, rounds)
    print(f"\nthe replays of --loads took {spent['real']:.1f} s against the real target and "
          f"{spent['twin']:.1f} s against the twin, offline "
          f"({spent['real'] / max(spent['twin'], 1e-9):.1f}x)")  # fmt: skip
    if args.capacity:
        report_capacity(args.capacity, searched)


def _round(rnd: int) -> str:
    """The file name's mark of a round after the first (the first keeps the plain name)."""
    return f"-r{rnd + 1}" if rnd else ""


def report_spread(
    repeats: int, loads: list[float], rounds: dict[float, list[dict[str, tuple[float, float]]]]
) -> None:
    """How far the real target's own figures moved between its rounds: the noise
    floor of any prediction of them (largest / smallest - 1)."""
    print(f"\nthe real target's own spread over its {repeats} rounds (largest / smallest - 1)")
    print()

    def spread(load: float, name: str, k: int) -> str:
        values = [r[name][k] for r in rounds[load]]
        return f"{max(values) / min(values) - 1:.0%}"

    _table(loads, spread)


def _table(loads: list[float], cell: Callable[[float, str, int], str]) -> None:
    """A markdown table of a row a load and a column a figure and quantile (P50, P99),
    each cell ``cell(load, figure, quantile index)``."""
    head = "".join(f" {label} P50 | {label} P99 |" for _, label in FIGURES)
    print(f"| load |{head}")
    print("|---:|" + "---|" * 2 * len(FIGURES))
    for load in loads:
        cells = "".join(f" {cell(load, name, k)} |" for name, _ in FIGURES for k in (0, 1))
        print(f"| {load:g}x |{cells}")


def report_capacity(slo: str, searched: dict[str, tuple[dict, float]]) -> None:
    (real, real_s), (twin, twin_s) = searched["real"], searched["twin"]
    error = twin["capacity"] / real["capacity"] - 1
    print(f"\ncapacity under {slo}:")
    print(
        f"  the real target: {real['capacity']:.3g}x, {len(real['trials'])} trials, {real_s:,.0f} s"
    )
    print(
        f"  the twin: {twin['capacity']:.3g}x ({error:+.0%}), {len(twin['trials'])} trials, "
        f"{twin_s:,.0f} s ({twin_s / real_s:.1%} of the real search's time)"
    )


def report(
    args: argparse.Namespace,
    n: int,
    loads: list[float],
    real: dict[float, dict[str, tuple[float, float]]],
    twin: dict[float, dict[str, tuple[float, float]]],
) -> None:
    what = args.target or "the built-in simulator with a hidden profile"
    if args.llama_server:
        what = f"llama-server, {args.llama_server[2]} slots, {Path(args.llama_server[1]).name}"
    print(f"{n} requests over {args.seconds:g} s ({args.rate_from:g} to {args.rate:g} req/s), "
          f"real target: "
          f"{what}; the twin calibrated at 1x; ms, real / twin (twin's error)")  # fmt: skip
    print()

    def compared(load: float, name: str, k: int) -> str:
        r, t = real[load][name][k], twin[load][name][k]
        return f"{r:,.0f} / {t:,.0f} ({t / r - 1:+.0%})"

    _table(loads, compared)


if __name__ == "__main__":
    main()
