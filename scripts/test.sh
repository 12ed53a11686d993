#!/usr/bin/env bash
# `./dev test`: the whole suite, in stages: what the tests need (setup, the
# plugins, the MPI probe, the fake NVML library, the dashboard), one build of
# every test binary, then the Rust tests (unit, plugin runtime, end to end
# against real collectors and engines, the container image under podman; the
# fuzz seeds replayed), the plugins' own tests, the Kubernetes manifests, the
# dashboard in chromium, and the Python client with real frameworks. Each
# stage prints a line as it ends; the run ends with a table of the stages'
# times, the wall-clock total and the total of passed and failed tests. The
# coverage-guided fuzzing is `./dev fuzz`, not a stage here.
#
# After the one build, the Rust tests run in front while the other stages run
# beside them in turn (plugin tests, browser tests, manifests, Python): the
# end-to-end suites spend most of their time waiting on processes and
# timers, so the two lines share the two cores instead of taking turns. The
# side line's output is printed as a whole when it ends, not interleaved.
# The end-to-end tests that judge the machine's own contention or time what
# they inject (bottleneck, mpi, paramserver, delivery) run last, alone: beside the
# rest they read the other tests' load as the cause they look for.
#
# Before that, the host's dependencies compile while the test inputs build
# beside them (see `inputs` below).
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
log="$tmp/log" side_log="$tmp/side.log" times="$tmp/times"
: >"$log"
: >"$side_log"
: >"$times"
started=$(date +%s.%N)

# stage <name> <command...>: runs the command, notes its time and outcome;
# the output also goes to $STAGE_LOG (the front line's log, or the side
# line's) for the closing total
STAGE_LOG="$log"
stage() {
    local name="$1" t0 rc took
    shift
    t0=$(date +%s.%N)
    "$@" 2>&1 | tee -a "$STAGE_LOG"
    rc=${PIPESTATUS[0]}
    took="$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')"
    printf '%s\t%s\t%s\n' "$name" "$took" "$([ "$rc" = 0 ] && echo ok || echo FAILED)" >>"$times"
    printf '== stage %s: %.0f s, %s\n' "$name" "$took" "$([ "$rc" = 0 ] && echo ok || echo FAILED)"
    return "$rc"
}

report() {
    echo
    echo "stage            seconds  outcome"
    awk -F'\t' '{ printf "%-16s %7.1f  %s\n", $1, $2, $3 }' "$times"
    awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { printf "%-16s %7.1f  (wall clock; overlapping stages counted once)\n", "all", b - a }'
    cat "$log" "$side_log" | awk '/^test result:/ { p += $4; f += $6 } END { printf "\ntotal: %d passed, %d failed\n", p, f }'
}

failed() { grep -c $'\tFAILED$' "$times"; }

# what the tests need; a failure here stops the run (nothing after it can pass)
stage setup "$just" setup || { report; exit 1; }

# PyTorch and friends (about 5 GB from PyPI on a fresh machine) download while
# the builds below use the CPUs; the python stage waits for them. The same for
# the manifest checkers (checkov: minutes of pip on a fresh machine), which the
# manifests stage waits for. Each writes its exit status to a file when done.
( "$just" python-frameworks >"$tmp/frameworks.log" 2>&1; echo $? >"$tmp/frameworks.rc" ) &
( "$just" manifest-checkers >"$tmp/checkers.log" 2>&1; echo $? >"$tmp/checkers.rc" ) &

# await <name>: waits for a background install, then says whether it worked
await() {
    while [ ! -s "$tmp/$1.rc" ]; do sleep 1; done
    [ "$(cat "$tmp/$1.rc")" = 0 ] || { cat "$tmp/$1.log"; echo "installing the $1 failed"; return 1; }
}

# The host's build script embeds the plugins and the dashboard, so nothing of
# sonde itself compiles before they are built; its dependencies can. The
# plugins' build (fat LTO of one plugin at a time, for long stretches) leaves
# a core idle, so the dependencies compile beside it and the test inputs
# (plugins, dashboard, MPI probe, fake NVML) build in a lane of their own.
# The early build compiles exactly the units the tests use
# (scripts/check_features.py checks it).
inputs() {
    STAGE_LOG="$inputs_log"
    stage plugins "$just" plugins \
        && stage web "$just" web \
        && stage mpi-probe "$just" mpi-probe \
        && stage fake-nvml "$just" fake-nvml
}
inputs_log="$tmp/inputs.log"
: >"$inputs_log"
inputs >"$tmp/inputs.out" 2>&1 &
inputs_pid=$!
# shellcheck disable=SC2046 # one word per argument
stage dependencies cargo build --lib $(python3 scripts/workspace_deps.py)
deps_rc=$?
wait "$inputs_pid"
inputs_rc=$?
echo
echo "== the test inputs (plugins, dashboard, MPI probe, fake NVML):"
cat "$tmp/inputs.out"
cat "$inputs_log" >>"$log"
[ "$deps_rc" = 0 ] && [ "$inputs_rc" = 0 ] || { report; exit 1; }
stage build cargo test --workspace --no-run || { report; exit 1; }
# The end-to-end test binary just built, for the Python stage to run directly
# (E2E_TEST_BIN, the test-python recipe): through cargo it would wait for the
# lock the Rust tests in front hold on target/ until they end.
E2E_TEST_BIN="$(cargo test -p sonde-e2e --test e2e --no-run --message-format=json 2>/dev/null \
    | python3 -c 'import json, sys
for line in sys.stdin:
    j = json.loads(line)
    if j.get("reason") == "compiler-artifact" and j.get("executable") and j["target"]["name"] == "e2e":
        print(j["executable"])')"
[ -x "$E2E_TEST_BIN" ] || { echo "the end-to-end test binary was not found"; report; exit 1; }
export E2E_TEST_BIN
# `cargo test --no-run` above built target/debug/sonde too (cargo builds a
# package's binaries for its integration tests), with the same dependency
# features as the tests, so no later step compiles sonde a second time.

# The side line, one stage after another; its output is printed when it ends.
side() {
    STAGE_LOG="$side_log"
    stage "plugin tests" cargo test --manifest-path plugins/Cargo.toml --workspace
    stage "browser tests" bash scripts/browser-tests.sh
    stage manifests manifest_checks
    stage python python_tests
}
manifest_checks() { await checkers && "$just" manifests; }
python_tests() { await frameworks && "$just" test-python --ignored no; }
side >"$tmp/side.out" 2>&1 &
side_pid=$!

# --no-fail-fast: one failing suite must not hide whether the suites after it pass.
# Three test threads on two cores: most end-to-end tests wait far more than
# they compute.
quiet=(bottleneck:: mpi:: paramserver:: delivery::)
stage "cargo tests" cargo test --workspace --no-fail-fast -- --test-threads 3 "${quiet[@]/#/--skip=}"

wait "$side_pid"
echo
echo "== the side line (plugin tests, browser tests, manifests, Python):"
cat "$tmp/side.out"

# Alone now; they take turns among themselves too (sonde_e2e::one_at_a_time).
stage "timing tests" cargo test -p sonde-e2e --test e2e -- "${quiet[@]}"

report
[ "$(failed)" = 0 ]
