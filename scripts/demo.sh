#!/usr/bin/env bash
# `make demo`: the main job as far as it exists today — archives and `traces` commands
# on a real public trace. Grows with each issue (replay, proxy, simulator).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
OUT=demo-out
CSV=../shared/data/azure_llm_2023/AzureLLMInferenceTrace_conv.csv
rm -rf "$OUT" && mkdir -p "$OUT"

echo "== 1. a rotating capture of the Azure 2023 conversation trace (19,366 requests)"
$BIN/python scripts/demo_capture.py "$CSV" "$OUT/capture"
ls -l "$OUT/capture" | head -4

echo; echo "== 2. merge the rotated files into one time-ordered archive"
$BIN/tailreplay traces merge "$OUT"/capture/*.msgpack -o "$OUT/azure-conv.msgpack"

echo; echo "== 3. stats: rate, percentiles, per input-length bucket"
$BIN/tailreplay traces stats "$OUT/azure-conv.msgpack"

echo; echo "== 4. the busiest 5 minutes as its own archive"
$BIN/tailreplay traces peak "$OUT/azure-conv.msgpack" --window 5m -o "$OUT/peak.msgpack"
$BIN/tailreplay traces inspect "$OUT/peak.msgpack" -n 2

echo; echo "== 5. the built-in simulator (the default replay target) under the openai SDK"
$BIN/python scripts/demo_sim.py

echo; echo "== 6. replay the first minute of the peak at 2x against the built-in simulator"
$BIN/tailreplay replay --speed 2x --to +60s --sim-profile fast \
    --out "$OUT/replay.msgpack" --json "$OUT/replay.json" "$OUT/peak.msgpack"
