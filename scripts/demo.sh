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

echo; echo "== 3. replay the capture at 2x"
$BIN/replay --speed 2x --out "$OUT/capture-replay.msgpack" "$OUT/capture.msgpack"
