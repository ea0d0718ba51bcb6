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
$BIN/replay --speed 2x --out "$OUT/capture-replay.msgpack" --report "$OUT/capture-report.html" \
    --slo 'ttft:p99<=1s*10,latency:p99<=2x*3,error_rate<=1%' "$OUT/capture.msgpack"

echo; echo "== 4. the whole report: recorded against replayed"
$BIN/tailreplay report "$OUT/capture-replay.msgpack" --markdown "$OUT/capture-report.md" \
    --deltas "$OUT/capture-deltas.csv"
echo; echo "open $OUT/capture-report.html for the plots"
