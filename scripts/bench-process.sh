#!/usr/bin/env bash
# Whole-process benchmark (see scripts/bench_process.py); needs a release build and the plugins.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 scripts/bench_process.py "$@"
