#!/usr/bin/env bash
# The dashboard's browser tests: each suite in web/tests/ (not the shared
# harness.mjs and checks.mjs) against a real sonde (target/debug/sonde, or
# $SONDE_BIN) in Debian's chromium. Runs every suite even when one fails.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rc=0
for t in web/tests/*.mjs; do
    case "$t" in web/tests/harness.mjs | web/tests/checks.mjs) continue ;; esac
    node "$t" || rc=1
done
exit $rc
