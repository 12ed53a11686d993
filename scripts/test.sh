#!/usr/bin/env bash
# `./dev test`: the whole suite, in stages: what the tests need (setup, the
# plugins, the MPI probe, the fake NVML library, the dashboard), one build of
# every test binary, then the Rust tests (unit, plugin runtime, end to end
# against real collectors and engines, the container image under podman; the
# fuzz seeds replayed), the plugins' own tests, the Kubernetes manifests, the
# dashboard in chromium, and the Python client with real frameworks. Each
# stage prints a line as it ends; the run ends with a table of the stages'
# times and the total of passed and failed tests. The coverage-guided fuzzing
# is `./dev fuzz`, not a stage here.
#
# Runs from the repository root; $JUST is the `just` that started it.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
just="${JUST:-just}"

# A missing guest toolchain fails its tests here instead of skipping them
# (sonde_e2e::toolchains_required).
export REQUIRE_TOOLCHAINS=1

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
log="$tmp/log" times="$tmp/times"
: >"$log"
: >"$times"
failed_stages=0

# stage <name> <command...>: runs the command, notes its time and outcome;
# the test runners' output also goes to $log for the closing total
stage() {
    local name="$1" t0 rc took
    shift
    t0=$(date +%s.%N)
    "$@" 2>&1 | tee -a "$log"
    rc=${PIPESTATUS[0]}
    took="$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')"
    printf '%s\t%s\t%s\n' "$name" "$took" "$([ "$rc" = 0 ] && echo ok || echo FAILED)" >>"$times"
    printf '== stage %s: %.0f s, %s\n' "$name" "$took" "$([ "$rc" = 0 ] && echo ok || echo FAILED)"
    [ "$rc" = 0 ] || failed_stages=$((failed_stages + 1))
    return "$rc"
}

report() {
    echo
    echo "stage            seconds  outcome"
    awk -F'\t' '{ printf "%-16s %7.1f  %s\n", $1, $2, $3; s += $2 } END { printf "%-16s %7.1f\n", "all", s }' "$times"
    awk '/^test result:/ { p += $4; f += $6 } END { printf "\ntotal: %d passed, %d failed\n", p, f }' "$log"
}

# what the tests need; a failure here stops the run (nothing after it can pass)
stage setup "$just" setup || { report; exit 1; }

# PyTorch and friends (about 5 GB from PyPI on a fresh machine) download while
# the builds below use the CPUs; the python stage waits for them. The same for
# the manifest checkers (checkov: minutes of pip on a fresh machine), which the
# manifests stage waits for.
"$just" python-frameworks >"$tmp/frameworks.log" 2>&1 &
frameworks=$!
"$just" manifest-checkers >"$tmp/checkers.log" 2>&1 &
checkers=$!

stage plugins "$just" plugins \
    && stage mpi-probe "$just" mpi-probe \
    && stage fake-nvml "$just" fake-nvml \
    && stage web "$just" web \
    && stage build cargo test --workspace --no-run \
    || { report; exit 1; }
# `cargo test --no-run` above built target/debug/sonde too (cargo builds a
# package's binaries for its integration tests), with the same dependency
# features as the tests, so no later step compiles sonde a second time.

# --no-fail-fast: one failing suite must not hide whether the suites after it pass
stage "cargo tests" cargo test --workspace --no-fail-fast
stage "plugin tests" cargo test --manifest-path plugins/Cargo.toml --workspace

wait "$checkers"
checkers_rc=$?
manifest_checks() {
    [ "$checkers_rc" = 0 ] || { cat "$tmp/checkers.log"; echo "installing the manifest checkers failed"; return 1; }
    "$just" manifests
}
stage manifests manifest_checks

stage "browser tests" bash scripts/browser-tests.sh

# (waited for here: a stage runs in a subshell, which cannot wait for its parent's job)
wait "$frameworks"
frameworks_rc=$?
python_tests() {
    [ "$frameworks_rc" = 0 ] || { cat "$tmp/frameworks.log"; echo "installing the Python frameworks failed"; return 1; }
    "$just" test-python --ignored no
}
stage python python_tests

report
[ "$failed_stages" = 0 ]
