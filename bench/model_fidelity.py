"""Do workload models predict the P99 the real traffic gets, better than Poisson?

Azure's 2023 conversation trace (tests/data, one hour) is cut in two halves; a
model is fitted to the first and validated against the second with
``traces validate-model``: the exact second half, the model's synthesis of it and
a Poisson baseline with the same requests, each replayed against a fresh
simulator, ``--seeds`` syntheses each. The simulator is the ``fast`` profile with
prefill at 0.08 ms/token (``--prefill-ms``), so the half's 5.5 req/s keep it busy (prefill alone
~55% of its time) and queues form in the busier minutes. Replays run ``--speed``
times faster, the simulator's steps as much shorter.

    .venv/bin/python bench/model_fidelity.py --window 29m --seeds 3 --speed 4x

``--trace mmpp`` and ``--trace weibull`` do the same on processes with known
parameters instead, stamped on ``--tick`` second ticks (0: exact times), with the
conversation trace's (input, output) pairs drawn at random: a two-state MMPP
(3.5 req/s, with spells of 11 req/s lasting ~17 s; 5.4 req/s on average) or a
renewal process with Weibull gaps of shape 0.6 (5.4 req/s). The model is fitted
to one 30-minute draw and validated against another (``--window`` of it, or
``--windows`` consecutive windows pooled: one window's P99 is one draw of it).

    .venv/bin/python bench/model_fidelity.py --trace weibull --tick 1 --window 10m --seeds 3

``--trace mooncake`` takes Mooncake's FAST'25 conversation trace (tests/data: an hour,
12,031 requests of 12,000 tokens on average, with ``hash_ids``) the same way as
Azure's, on the ``fast`` profile as ``validate-model`` sizes it to the held-out
window (no ``--prefill-ms`` unless given): the table's ``cached`` column is the
prompt tokens each arm found in the simulator's prefix cache.

    .venv/bin/python bench/model_fidelity.py --trace mooncake --window 3m --seeds 2 --speed 2x

``--trace azure-code`` takes Azure's 2023 code trace (an hour, 8,818 requests, exact
times) the same way as the conversation trace. ``--prefill-ms sized`` leaves the
simulator to ``validate-model``'s own sizing on any trace.
"""

from __future__ import annotations

import argparse
import csv
import math
import subprocess
import sys
from pathlib import Path

import numpy as np

from tailreplay.traces.archive.batch_writer import write_archive
from tailreplay.traces.archive.format import make_header
from tailreplay.traces.archive.record import Record
from tailreplay.traces.workload.hmm import Mmpp
from tailreplay.units import parse_duration

ROOT = Path(__file__).resolve().parents[1]
CONV = ROOT / "tests/data/azure_llm_2023/AzureLLMInferenceTrace_conv.csv"
CODE = ROOT / "tests/data/azure_llm_2023/AzureLLMInferenceTrace_code.csv"
MOONCAKE = ROOT / "tests/data/mooncake_fast25/conversation_trace.jsonl"


def tailreplay(*args: str, ok: tuple[int, ...] = (0,)) -> None:
    done = subprocess.run([sys.executable, "-m", "tailreplay", *args], check=False)
    if done.returncode not in ok:
        sys.exit(f"tailreplay {args[0]} {args[1]} exited {done.returncode}")


WEIBULL_SHAPE = 0.6
RATE = 5.4  # requests/s, both known processes


def arrival_times(trace: str, rng: np.random.Generator, seconds: float) -> np.ndarray:
    """Arrival times (s) of a known bursty process over ``seconds``."""
    if trace == "mmpp":
        mmpp = Mmpp(1.0, [3.5, 11.0], [[0.98, 0.02], [0.06, 0.94]], [1.0, 0.0], 0.0, 0.0)
        counts, _ = mmpp.counts(rng, int(seconds), None, 0)
        # Within each second the MMPP's arrivals are uniform, as a Poisson's are.
        return np.sort(np.repeat(np.arange(counts.size), counts) + rng.random(int(counts.sum())))
    scale = 1.0 / (RATE * math.gamma(1.0 + 1.0 / WEIBULL_SHAPE))
    gaps = scale * rng.weibull(WEIBULL_SHAPE, int(seconds * RATE * 1.5) + 1000)
    times = np.cumsum(gaps)
    return times[times < seconds]


def known_draw(path: Path, trace: str, tick: float, minutes: float, seed: int) -> None:
    """A known bursty process on ``tick``-second ticks with the conversation trace's lengths."""
    rng = np.random.default_rng(seed)
    with CONV.open(newline="") as f:
        pairs = np.array([(int(r[1]), int(r[2])) for r in list(csv.reader(f))[1:]])
    times = arrival_times(trace, rng, minutes * 60)
    ticks = np.floor(times / tick) * tick if tick > 0 else times
    picks = pairs[rng.integers(0, len(pairs), ticks.size)]
    t0 = 1_700_000_000 * 10**9
    records = (Record(start_ns=t0 + int(t * 1e9), input_tokens=int(a), output_tokens=max(int(b), 1),
                      path="/v1/chat/completions", stream=True)
               for t, (a, b) in zip(ticks, picks, strict=True))  # fmt: skip
    write_archive(path, make_header("synth", ordered=True), records)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", choices=["azure", "azure-code", "mooncake", "mmpp", "weibull"],
                    default="azure")  # fmt: skip
    ap.add_argument("--tick", type=float, default=3.0, help="Known processes' tick (s); 0: exact.")
    ap.add_argument("--window", default="29m")
    ap.add_argument("--seeds", default="3")
    ap.add_argument("--windows", type=int, default=1,
                    help="Held-out windows of --window, pooled (known processes: the held-out "
                    "draw is made long enough).")  # fmt: skip
    ap.add_argument("--speed", default="4x")
    ap.add_argument("--prefill-ms", help="The simulator's prefill per token, or 'sized': as "
                    "validate-model sizes it (the default on mooncake; others: 0.08).")  # fmt: skip
    ap.add_argument(
        "--lengths",
        choices=["all", "recent"],
        default="all",
        help="The lengths the synthetic arms draw (validate-model --lengths).",
    )
    ap.add_argument(
        "--scaling",
        choices=["periods", "users"],
        default="periods",
        help="How the model's synthesis reaches each window's rate (validate-model --scaling).",
    )
    ap.add_argument("--out-dir", type=Path, default=Path("bench-model-fidelity"))
    args = ap.parse_args()
    out = args.out_dir
    out.mkdir(exist_ok=True)
    conv, first, second = (out / f"{n}.msgpack" for n in ("conv", "first", "second"))
    for path in (conv, first, second):
        path.unlink(missing_ok=True)
    if args.trace in ("azure", "azure-code", "mooncake"):
        source = {"azure": CONV, "azure-code": CODE, "mooncake": MOONCAKE}[args.trace]
        half = "+29m" if args.trace == "azure" else "+30m"
        kind = "mooncake" if args.trace == "mooncake" else "azure"
        tailreplay("traces", "import", kind, str(source), "-o", str(conv))
        tailreplay("traces", "slice", str(conv), "--to", half, "-o", str(first))
        tailreplay("traces", "slice", str(conv), "--from", half, "-o", str(second))
    else:
        known_draw(first, args.trace, args.tick, 30, seed=1)
        minutes = parse_duration(args.window) / 60 * args.windows
        known_draw(second, args.trace, args.tick, max(30, math.ceil(minutes) + 1), seed=2)
    prefill = args.prefill_ms or ("sized" if args.trace == "mooncake" else "0.08")
    sim_args = [] if prefill == "sized" else [f"--sim-arg=--prefill-per-token-ms={prefill}"]
    model = out / "model.json"
    model.unlink(missing_ok=True)
    tailreplay("traces", "fit", str(first), "-o", str(model))
    tailreplay("traces", "validate-model", str(second), "--model", str(model),
               "--window", args.window, "--windows", str(args.windows), "--seeds", args.seeds,
               "--speed", args.speed, "--lengths", args.lengths,
               "--scaling", args.scaling,
               "--sim-profile", "fast", *sim_args,
               "--out-dir", str(out / "arms"), "--overwrite", "--json", str(out / "check.json"),
               ok=(0, 1))  # fmt: skip  # 1: an arm was client- or simulator-bound (it says which)


if __name__ == "__main__":
    main()
