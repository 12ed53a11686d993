#!/usr/bin/env bash
# `./dev fuzz [SECONDS]`: the coverage-guided campaign. Runs every fuzz
# target (fuzz/fuzz_targets/, built by `./dev fuzz-build`) for SECONDS each
# (default 30), from its seeds in fuzz/corpus/<target>/ and what earlier runs
# added in fuzz/target/corpus/<target>/. One line per target; a crash, a
# timeout (60 s for one input) or running out of memory (4 GiB) prints the
# panic, the reproducer and the command that reruns it, and fails the run.
# Ends with a cargo-style `test result:` line.
set -uo pipefail
seconds="${1:-30}"
cd "$(dirname "${BASH_SOURCE[0]}")/../fuzz"

passed=0
failed=0
for t in otlp_in ingest_json config plugin_upload compressed_body; do
    mkdir -p "target/corpus/$t" "artifacts/$t"
    log="target/fuzz-$t.log"
    if cargo fuzz run --dev --sanitizer none "$t" "target/corpus/$t" "corpus/$t" -- \
        -max_total_time="$seconds" -timeout=60 -rss_limit_mb=4096 >"$log" 2>&1; then
        passed=$((passed + 1))
        awk -v t="$t" -v s="$seconds" '
            /^#[0-9]+\tDONE/ { for (i = 1; i <= NF; i++) { if ($i == "cov:") c = $(i+1); if ($i == "corp:") k = $(i+1) } n = substr($1, 2) }
            END { printf "fuzz %s: %s s, %s runs, cov %s, corpus %s (inputs/size), no crash\n", t, s, n, c, k }' "$log"
    else
        failed=$((failed + 1))
        grep -A1 "panicked at" "$log" | head -n 2 || true
        grep -E "^==[0-9]+== ERROR|^SUMMARY" "$log" | head -n 2 || tail -n 20 "$log"
        crash="$(sed -nE 's#.*Test unit written to (.*/(crash|timeout|oom|leak)-.*)$#\1#p' "$log" | tail -n 1)"
        echo "FUZZ FAILURE: target $t; reproducer: ${crash:-none written, see the log}; log: fuzz/$log"
        echo "  rerun it: cd fuzz && cargo fuzz run --dev --sanitizer none $t ${crash:-artifacts/$t/<file>}"
        echo "  keep it as a test: cp ${crash:-<reproducer>} fuzz/corpus/$t/ (./dev test replays every seed)"
    fi
done
echo "test result: $([ $failed = 0 ] && echo ok || echo FAILED). $passed passed; $failed failed; fuzz targets, $seconds s each"
[ $failed = 0 ]
