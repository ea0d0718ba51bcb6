"""Do workload models predict the P99 the real traffic gets, better than Poisson?

Azure's 2023 conversation trace (tests/data, one hour) is cut in two halves; a
model is fitted to the first and validated against the second with
``traces validate-model``: the exact second half, the model's synthesis of it and
a Poisson baseline with the same requests, each replayed against a fresh
simulator, ``--seeds`` syntheses each. The simulator is the ``fast`` profile with
prefill at 0.08 ms/token, so the half's 5.5 req/s keep it busy (prefill alone
~55% of its time) and queues form in the busier minutes. Replays run ``--speed``
times faster, the simulator's steps as much shorter.

    .venv/bin/python bench/model_fidelity.py --window 29m --seeds 3 --speed 4x
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONV = ROOT / "tests/data/azure_llm_2023/AzureLLMInferenceTrace_conv.csv"
SIM = ["--sim-profile", "fast", "--sim-arg=--prefill-per-token-ms=0.08"]


def tailreplay(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "tailreplay", *args], check=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--window", default="29m")
    ap.add_argument("--seeds", default="3")
    ap.add_argument("--speed", default="4x")
    ap.add_argument("--out-dir", type=Path, default=Path("bench-model-fidelity"))
    args = ap.parse_args()
    out = args.out_dir
    out.mkdir(exist_ok=True)
    conv, first, second = (out / f"{n}.msgpack" for n in ("conv", "first", "second"))
    for path in (conv, first, second):
        path.unlink(missing_ok=True)
    tailreplay("traces", "import", "azure", str(CONV), "-o", str(conv))
    tailreplay("traces", "slice", str(conv), "--to", "+29m", "-o", str(first))
    tailreplay("traces", "slice", str(conv), "--from", "+29m", "-o", str(second))
    model = out / "model.json"
    model.unlink(missing_ok=True)
    tailreplay("traces", "fit", str(first), "-o", str(model))
    tailreplay("traces", "validate-model", str(second), "--model", str(model),
               "--window", args.window, "--seeds", args.seeds, "--speed", args.speed, *SIM,
               "--out-dir", str(out / "arms"), "--json", str(out / "check.json"))  # fmt: skip


if __name__ == "__main__":
    main()
