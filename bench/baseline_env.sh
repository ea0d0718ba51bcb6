#!/usr/bin/env bash
# A virtual environment with another commit of tailreplay installed, for benchmarks
# that compare two commits side by side (bench/proxy.py --baseline-python).
# Usage: bench/baseline_env.sh COMMIT [DIR]   (DIR: .bench/COMMIT)
# Prints the interpreter's path. Built once; later calls print the same path.
set -euo pipefail
commit=$(git rev-parse --short "${1:?usage: bench/baseline_env.sh COMMIT [DIR]}")
dir=${2:-.bench/$commit}
if [ ! -x "$dir/venv/bin/python" ] || [ ! -f "$dir/COMMIT" ]; then
  rm -rf "$dir"
  mkdir -p "$dir"
  git archive "$commit" | tar -x -C "$dir" --one-top-level=src
  python3 -m venv "$dir/venv"
  "$dir/venv/bin/pip" install --quiet "$dir/src" >&2
  echo "$commit" > "$dir/COMMIT"
fi
echo "$(cd "$dir" && pwd)/venv/bin/python"
