#!/usr/bin/env bash
# `make demo`: the main job end to end on the built-in simulator (about 4 minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
OUT=demo-out
rm -rf "$OUT" && mkdir -p "$OUT"

echo "== 1. replay the busiest 5 minutes of Azure's LLM trace at 2x against the built-in simulator"
$BIN/replay --speed 2x --out "$OUT/peak-replay.msgpack" traces/peak.msgpack

echo; echo "== 2. capture: simulator + capture proxy, a few hundred requests with the openai SDK"
$BIN/python scripts/demo_capture.py "$OUT/capture" 300
$BIN/tailreplay traces merge "$OUT"/capture/*.msgpack -o "$OUT/capture.msgpack"
$BIN/tailreplay traces stats "$OUT/capture.msgpack"

echo; echo "== 3. replay the capture at 2x, with a report and an SLO gate"
# The gate's verdict is the demo's result, whichever it is: 0 pass, 1 an SLO missed,
# 4 not judged (on a busy machine the replaying client can be the bottleneck, and the
# run says so). Any other code is something broken, and stops the demo.
verdict=0
$BIN/replay --speed 2x --out "$OUT/capture-replay.msgpack" --report "$OUT/capture-report.html" \
    --slo 'ttft:p99<=1s*10,latency:p99<=2x*3,error_rate<=1%' "$OUT/capture.msgpack" || verdict=$?
case $verdict in
    0) echo "SLO gate: pass (exit 0)" ;;
    1) echo "SLO gate: missed (exit 1): the verdict on this target, shown above" ;;
    4) echo "SLO gate: not judged (exit 4): this machine, not the target, was the limit" ;;
    *) exit "$verdict" ;;
esac

echo; echo "== 4. the whole report: recorded against replayed"
$BIN/tailreplay report "$OUT/capture-replay.msgpack" --markdown "$OUT/capture-report.md" \
    --deltas "$OUT/capture-deltas.csv"
echo; echo "open $OUT/capture-report.html for the plots"
