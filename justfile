# Every task a developer runs. `./dev <recipe>` installs `just` first if needed.
# The two the README starts with: `./dev run` and `./dev test`.

set shell := ["bash", "-euo", "pipefail", "-c"]

# the Python packages the end-to-end tests use: a real OTLP collector, the official OpenTelemetry SDK, the semantic conventions (the names test's oracle)
rotel := "rotel==0.0.1a15"
otel := "opentelemetry-semantic-conventions==0.66b2 opentelemetry-sdk==1.45.2 opentelemetry-exporter-otlp-proto-grpc==1.45.2 opentelemetry-exporter-otlp-proto-http==1.45.2"
# the frameworks the Python client's hooks are tested with (`./dev test-python`): real PyTorch (CPU) and friends from PyPI
frameworks := "torch==2.15.0 pytorch-lightning==2.6.6 transformers==5.23.0 accelerate==1.15.0"
# the Python guest toolchain for `sonde plugin new --lang python` (tests/tests/plugin_kit.rs builds with it)
componentize_py := "componentize-py==0.25.1"
# what validates the Kubernetes manifests without a cluster (`./dev manifests`), in their own virtual environment
manifest_checkers := "kubernetes-validate==1.37.0 checkov==3.3.30"

default:
    @just --list

# install what the build and the tests need: the wasm target, Python test packages, Debian's chromium (browser tests), Open MPI (the MPI probe's tests), Prometheus and VictoriaMetrics (remote-write tests), libfaketime (a cluster agent with a skewed clock), the OpenTelemetry JS SDK (a real OTLP/JSON sender)
setup: js-sender guest-toolchains
    rustup target add wasm32-wasip2 >/dev/null 2>&1 || rustup target add wasm32-wasip2
    python3 -m pip install --quiet --disable-pip-version-check "{{rotel}}" {{otel}}
    test -x /usr/bin/chromium || { sudo=$([ "$(id -u)" = 0 ] || echo sudo); $sudo apt-get update -qq && $sudo apt-get install -y -qq chromium; }
    { command -v mpicc >/dev/null && [ -e /usr/include/x86_64-linux-gnu/libunwind.h ]; } || { sudo=$([ "$(id -u)" = 0 ] || echo sudo); $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends openmpi-bin libopenmpi-dev libunwind-dev; }
    test -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 || { sudo=$([ "$(id -u)" = 0 ] || echo sudo); $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends faketime; }
    command -v prometheus >/dev/null && command -v victoria-metrics >/dev/null || { sudo=$([ "$(id -u)" = 0 ] || echo sudo); $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends prometheus victoria-metrics; }

# the official OpenTelemetry JS SDK in tests/otlp-js/, pinned by its package-lock.json (the OTLP/JSON tests send with it)
js-sender:
    cd tests/otlp-js && { cmp -s package-lock.json node_modules/.sonde-lock || { npm ci --no-audit --no-fund --loglevel=error && cp package-lock.json node_modules/.sonde-lock; }; }

# the toolchains that build Python and JavaScript plugins: componentize-py from PyPI, componentize-js pinned by tests/guest-js/package-lock.json
guest-toolchains:
    componentize-py --version 2>/dev/null | grep -qx "componentize-py {{trim_start_match(componentize_py, "componentize-py==")}}" || python3 -m pip install --quiet --disable-pip-version-check "{{componentize_py}}"
    cd tests/guest-js && { cmp -s package-lock.json node_modules/.sonde-lock || { npm ci --no-audit --no-fund --loglevel=error && cp package-lock.json node_modules/.sonde-lock; }; }

# the dashboard's npm packages, pinned by web/package-lock.json (installed again only when it changes)
web-deps:
    cd web && { cmp -s package-lock.json node_modules/.sonde-lock || { npm ci --no-audit --no-fund --loglevel=error && cp package-lock.json node_modules/.sonde-lock; }; }

# the dashboard, bundled into web/dist/
web: web-deps
    cd web && npm run --silent build

# build the plugins (wasm32-wasip2 components) into target/plugins/
plugins:
    bash scripts/build-plugins.sh

# build the MPI probe (LD_PRELOAD library) and the MPI test programs with mpicc into target/probes/, target/mpi/
mpi-probe:
    bash scripts/build-mpi-probe.sh

# build the fake NVML library (tests/fake-nvml/, the libnvidia-ml.so.1 ABI answering from a script) into target/fake-nvml/: the GPU tests and benchmark load it in place of NVIDIA's driver
fake-nvml:
    bash scripts/build-fake-nvml.sh

# build the sonde binary (release, with the dashboard and the bundled plugins embedded)
build: plugins web
    cargo build --release -p sonde

# the release tarball in target/dist/ and its SHA-256: the one self-contained binary, LICENSE, README, docs/deploy.md, example configs and systemd units; scripts/dist.sh checks each part before packing (the carried plugins, the dashboard, --check-config, systemd-analyze verify)
dist: build
    bash scripts/dist.sh

# run sonde on this machine with its bundled plugins; extra args go to sonde (e.g. --export-endpoint http://127.0.0.1:4317)
[no-exit-message]
run *ARGS: build
    mkdir -p sonde-data/plugins sonde-data/sinks
    for f in target/plugins/bundled/*.wasm; do cmp -s "$f" "sonde-data/plugins/$(basename "$f")" || cp "$f" sonde-data/plugins/; done
    exec target/release/sonde --data-dir sonde-data --plugins-dir sonde-data/plugins --sinks-dir sonde-data/sinks {{ARGS}}

# a cluster agent on this machine beside `./dev run --role master`: named NAME, its API on 127.0.0.1:PORT, its data in sonde-data/NAME; extra args go to sonde
[no-exit-message]
agent NAME PORT *ARGS: build
    mkdir -p "sonde-data/{{NAME}}/plugins" "sonde-data/{{NAME}}/sinks"
    for f in target/plugins/bundled/*.wasm; do cmp -s "$f" "sonde-data/{{NAME}}/plugins/$(basename "$f")" || cp "$f" "sonde-data/{{NAME}}/plugins/"; done
    exec target/release/sonde --role agent --master http://127.0.0.1:4317 --listen "127.0.0.1:{{PORT}}" --data-dir "sonde-data/{{NAME}}" --plugins-dir "sonde-data/{{NAME}}/plugins" --sinks-dir "sonde-data/{{NAME}}/sinks" --set "host.name={{NAME}}" --set ingest.otlp_grpc_listen=off --set ingest.otlp_http_listen=off {{ARGS}}

# the whole test suite: unit, plugin runtime with real components, end to end against rotel, plugin logic, the dashboard in chromium, then every fuzz target for 30 s; ends with a table of how long each stage took
test:
    #!/usr/bin/env bash
    set -uo pipefail
    just="{{just_executable()}}"
    log="$(mktemp)"; times="$(mktemp)"; trap 'rm -f "$log" "$times"' EXIT
    failed_stages=0
    # stage <name> <command...>: runs the command, notes its time and outcome;
    # the test runners' output also goes to $log for the closing total
    stage() {
        local name="$1" t0 rc; shift
        t0=$(date +%s.%N)
        "$@" 2>&1 | tee -a "$log"; rc=${PIPESTATUS[0]}
        local took; took="$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')"
        printf '%s\t%s\t%s\n' "$name" "$took" "$([ $rc = 0 ] && echo ok || echo FAILED)" >>"$times"
        printf '== stage %s: %.0f s, %s\n' "$name" "$took" "$([ $rc = 0 ] && echo ok || echo FAILED)"
        [ $rc = 0 ] || failed_stages=$((failed_stages + 1))
        return $rc
    }
    browser_tests() {
        local rc=0 t
        for t in web/tests/*.mjs; do [ "$t" = web/tests/harness.mjs ] || node "$t" || rc=1; done
        return $rc
    }
    report() {
        echo; echo "stage            seconds  outcome"
        awk -F'\t' '{ printf "%-16s %7.1f  %s\n", $1, $2, $3; s += $2 } END { printf "%-16s %7.1f\n", "all", s }' "$times"
        awk '/^test result:/ { p += $4; f += $6 } END { printf "\ntotal: %d passed, %d failed\n", p, f }' "$log"
    }
    python_tests() {
        [ "$frameworks_rc" = 0 ] || { cat "$frameworks_log"; echo "installing the Python frameworks failed"; return 1; }
        "$just" test-python --ignored no
    }
    # what the tests need; a failure here stops the run (nothing after it can pass)
    stage setup "$just" setup || { report; exit 1; }
    # PyTorch and friends (about 5 GB from PyPI on a fresh machine) download while the builds below
    # use the CPUs; the python stage waits for them
    frameworks_log="$(mktemp)"; trap 'rm -f "$log" "$times" "$frameworks_log"' EXIT
    "$just" python-frameworks >"$frameworks_log" 2>&1 & frameworks=$!
    # the same for the manifest checkers (checkov: minutes of pip on a fresh machine); the manifests stage waits for them
    checkers_log="$(mktemp)"; trap 'rm -f "$log" "$times" "$frameworks_log" "$checkers_log"' EXIT
    "$just" manifest-checkers >"$checkers_log" 2>&1 & checkers=$!
    stage plugins "$just" plugins && stage mpi-probe "$just" mpi-probe && stage fake-nvml "$just" fake-nvml && stage web "$just" web \
      && stage build cargo test --workspace --no-run \
      || { report; exit 1; }
    # `cargo test --no-run` above built target/debug/sonde too (cargo builds a package's binaries for its integration
    # tests), with the same dependency features as the tests, so no separate `cargo build` compiles sonde a second time
    # The fuzz targets' build (the host again, with coverage instrumentation: the longest compile of the run) goes on
    # at the lowest CPU priority while the tests below run, taking only what they leave idle; the fuzz stage waits for it
    fuzz_build_log="$(mktemp)"; trap 'rm -f "$log" "$times" "$frameworks_log" "$checkers_log" "$fuzz_build_log"' EXIT
    nice -n 19 "$just" fuzz-build >"$fuzz_build_log" 2>&1 & fuzz_build=$!
    # --no-fail-fast: one failing suite must not hide whether the suites after it pass
    stage "cargo tests" cargo test --workspace --no-fail-fast
    stage "plugin tests" cargo test --manifest-path plugins/Cargo.toml --workspace
    wait "$checkers"; checkers_rc=$?
    manifest_checks() {
        [ "$checkers_rc" = 0 ] || { cat "$checkers_log"; echo "installing the manifest checkers failed"; return 1; }
        "$just" manifests
    }
    stage manifests manifest_checks
    stage "browser tests" browser_tests
    # (waited for here: a stage runs in a subshell, which cannot wait for its parent's job)
    wait "$frameworks"; frameworks_rc=$?
    stage python python_tests
    wait "$fuzz_build"; fuzz_build_rc=$?
    fuzz_tests() {
        [ "$fuzz_build_rc" = 0 ] || { cat "$fuzz_build_log"; echo "building the fuzz targets failed"; return 1; }
        "$just" fuzz 30
    }
    stage fuzz fuzz_tests
    report
    [ $failed_stages = 0 ]

# PyTorch, Lightning, Hugging Face transformers + accelerate from PyPI for the client's framework tests; skipped when those exact versions are installed (PyPI's Linux torch wheel brings its CUDA libraries: about 5 GB, see clients/python/README.md)
python-frameworks:
    python3 -c 'import sys, importlib.metadata as m; sys.exit(any(m.version(n) != v for n, v in (p.split("==") for p in sys.argv[1:])))' {{frameworks}} 2>/dev/null \
      || python3 -m pip install --quiet --disable-pip-version-check {{frameworks}}

# the Python client (clients/python) installed as a user would (`pip install ./clients/python`)
python-client:
    python3 -m pip install --quiet --disable-pip-version-check --no-build-isolation --no-deps --force-reinstall ./clients/python
    rm -rf clients/python/build clients/python/src/*.egg-info
    cd /tmp && python3 -c 'import sonde, pathlib; assert (pathlib.Path(sonde.__file__).parent / "py.typed").exists(); print("sonde-client", sonde.__version__, "installed")'

# the Python client's tests: its unit tests, then real loops (pure Python, PyTorch, Lightning, Hugging Face Trainer) against a running sonde (`./dev test` passes `--ignored no`: its cargo stage already ran the pure-Python loop and built sonde)
test-python WHICH="--include-ignored" BUILD="yes": setup python-frameworks python-client
    python3 clients/python/tests/run.py
    [ "{{BUILD}}" = no ] || cargo build -p sonde --bins
    cargo test -p sonde-e2e --test python_client -- {{WHICH}}

# the Python client's cost to a 10 000-step loop: bare, with record_timing to a running sonde, with sonde down (µs per call)
bench-python: setup
    cargo build -p sonde --bins
    python3 clients/python/bench/overhead.py target/debug/sonde

# only the end-to-end tests (sonde binary + real collector, the dashboard in chromium)
e2e: setup plugins mpi-probe fake-nvml web
    cargo build -p sonde --bins
    cargo test -p sonde-e2e
    for t in web/tests/*.mjs; do [ "$t" = web/tests/harness.mjs ] || node "$t"; done

# the floor sampler (tools/floor-sampler/floor.c): the least a 100 ms sampler of this machine costs, run beside sonde by ./dev bench
floor-sampler:
    mkdir -p target && cc -O2 -Wall -Wextra -o target/floor-sampler tools/floor-sampler/floor.c

# benchmarks: whether host/hot-code.txt still matches the binary, criterion micro-benchmarks, then the whole process beside the floor sampler (CPU per sample and ratio, per-thread breakdown, RSS, period error, cold start); `./dev bench --check` runs only the whole-process part and compares it with docs/benchmarks.md's headline figures
bench *ARGS: build fake-nvml floor-sampler
    python3 scripts/hot_code.py --check || echo "(the figures below are of a binary whose hot code is spread out)"
    if [[ " {{ARGS}} " != *" --check "* ]]; then cargo bench -p sonde --bench plugin_boundary --bench sample --bench nvml --bench export --bench live --bench agent; fi
    bash scripts/bench-process.sh {{ARGS}}

# profile the release host (perf, with call stacks: idle, then read through the API, then taking OTLP) and list the functions it runs into host/hot-code.txt, which a release build's linker then places first in the binary (host/build.rs); rebuilds with the new list
hot-code *ARGS: build
    cargo build --release -p otlp-loadgen
    command -v perf >/dev/null || { sudo=$([ "$(id -u)" = 0 ] || echo sudo); $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends linux-perf; }
    python3 scripts/hot_code.py {{ARGS}}
    cargo build --release -p sonde

# one idle release sonde over an hour (bundled plugins, export off, its API read only at the end): RSS and where it lives each minute, the live store's size once its hour is full; --minutes N for a shorter run
rss-over-time *ARGS: build
    python3 scripts/rss_over_time.py {{ARGS}}

# where the idle host's CPU above the floor goes: sonde with no plugins, with sysmetrics only and with every bundled plugin, each alone in its own window beside the floor sampler (CPU per sample, × the floor, RSS, each thread's CPU and wake-ups); --wake-sharing: what a wake-up shared with another process costs
bench-parts *ARGS: build floor-sampler
    python3 scripts/bench_parts.py {{ARGS}}

# two sonde builds side by side in one window (bundled plugins, export off): CPU per sample and RSS of each, the ratio B / A and each thread's CPU and wake-ups, e.g. the previous commit's build against this one
bench-ab A B *ARGS: plugins
    python3 scripts/bench_ab.py {{A}} {{B}} {{ARGS}}

# the MPI probe's overhead: one stack walk each way and the tick itself, cost per wrapped call, NetPIPE and HPCC at 100 Hz and 1 kHz (stacks, and the call site alone) vs without the probe
bench-mpi: mpi-probe
    command -v NPopenmpi >/dev/null && command -v hpcc >/dev/null || { sudo=$([ "$(id -u)" = 0 ] || echo sudo); $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends netpipe-openmpi hpcc; }
    bash scripts/bench-mpi.sh

# the bottleneck plugin: confusion table (injected cause x verdict) over real injected runs, and its CPU cost at 8 ranks x 10 steps/s
bench-verdicts *ARGS: setup plugins mpi-probe
    cargo build -p sonde
    python3 scripts/bench_verdicts.py {{ARGS}}

# the What-if diagnosis (plugins/bottleneck/src/whatif.rs) on >= 200 simulated dp x pp x tp jobs up to 1 024 ranks (tests/diagnosis/simulate.py), one injected cause each: confusion table, right-culprit and no-culprit shares, slowdown against the offline reference (tests/diagnosis/whatif_ref.py), time per window; --runs N, --jobs N
bench-diagnosis *ARGS:
    cargo build --release --example whatif --manifest-path plugins/Cargo.toml -p sonde-bottleneck
    python3 scripts/bench_diagnosis.py {{ARGS}}

# guests beside Rust in one sonde: the `sonde plugin new` templates (size, load cold and cached, memory, on-samples cost, ratio to Rust) and the plugins/examples/ guests next to their Rust twins doing the same work (also cost per event row, same decisions); --only templates|examples, --sonde target/debug/sonde for a debug host
bench-guests *ARGS: setup
    cargo build -p sonde --release
    python3 scripts/bench_guests.py {{ARGS}}

# peers side by side in one run: sonde, collectd (Interval 0.1), prometheus-node-exporter scraped at 10 Hz, a psutil sampler; CPU per sample, RSS, ratios
bench-peers *ARGS: build
    command -v collectd >/dev/null && command -v prometheus-node-exporter >/dev/null || { sudo=$([ "$(id -u)" = 0 ] || echo sudo); $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends collectd-core prometheus-node-exporter; }
    python3 -c "import psutil" 2>/dev/null || python3 -m pip install --quiet --disable-pip-version-check psutil
    python3 scripts/bench_peers.py {{ARGS}}

# OTLP pipeline throughput, sonde (receive -> pass-through plugin -> export) against rotel (receive -> blackhole), same Rust load generator
bench-otlp *ARGS: build
    cargo build --release -p otlp-loadgen
    python3 scripts/bench_otlp.py {{ARGS}}

# one master taking the series of 64 and 256 simulated agents (otlp-loadgen --agents), rotel the peer in the same run: CPU per 100 000 points, RSS, history bytes per node-hour, query p50/p99 of a 1-hour 8-node view
bench-cluster *ARGS: build
    cargo build --release -p otlp-loadgen
    python3 scripts/bench_cluster.py {{ARGS}}

# the dashboard's job page for an hour-long job (8 ranks x 3 phases x 36 000 batches) in chromium: first paint, all batches in, zoom and pan per frame (Performance API)
bench-web: setup web
    cargo build -p sonde
    node web/bench/job-page.mjs

# many nodes: 8 agents directly to rotel, then through one sonde gateway killed for 60 s; every point counted end to end
many-nodes *ARGS: build
    python3 scripts/many_nodes.py {{ARGS}}

# soak: 30 minutes with every bundled plugin, 10 Hz sampling, 10 000 ingest rows/s, hostile plugins dropped in at minute 20; RSS, fds, threads, period, losses
soak *ARGS: build
    python3 scripts/soak.py {{ARGS}}

# build the fuzz targets (cargo-fuzz, installed once; coverage instrumentation, fuzz/Cargo.toml's dev profile); `./dev fuzz` runs them
fuzz-build:
    command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
    cd fuzz && cargo fuzz build --dev --sanitizer none

# fuzz every decoder of outside input (fuzz/: OTLP in, ingest JSON, config, plugin upload, compressed bodies) for SECONDS each; `./dev test` runs it for 30 s each
fuzz SECONDS="30": fuzz-build
    cd fuzz && passed=0; failed=0; for t in otlp_in ingest_json config plugin_upload compressed_body; do \
      mkdir -p "target/corpus/$t" "artifacts/$t"; log="target/fuzz-$t.log"; \
      if cargo fuzz run --dev --sanitizer none "$t" "target/corpus/$t" "corpus/$t" -- \
           -max_total_time={{SECONDS}} -timeout=60 -rss_limit_mb=4096 >"$log" 2>&1; then \
        passed=$((passed + 1)); \
        awk -v t="$t" '/^#[0-9]+\tDONE/ { for (i = 1; i <= NF; i++) { if ($i == "cov:") c = $(i+1); if ($i == "corp:") k = $(i+1) } n = substr($1, 2) } \
          END { printf "fuzz %s: {{SECONDS}} s, %s runs, cov %s, corpus %s (inputs/size), no crash\n", t, n, c, k }' "$log"; \
      else \
        failed=$((failed + 1)); \
        grep -A1 "panicked at" "$log" | head -n 2 || true; \
        grep -E "^==[0-9]+== ERROR|^SUMMARY" "$log" | head -n 2 || tail -n 20 "$log"; \
        crash="$(sed -nE 's#.*Test unit written to (.*/(crash|timeout|oom|leak)-.*)$#\1#p' "$log" | tail -n 1)"; \
        echo "FUZZ FAILURE: target $t; reproducer: ${crash:-none written, see the log}; log: fuzz/$log"; \
        echo "  rerun it: cd fuzz && cargo fuzz run --dev --sanitizer none $t ${crash:-artifacts/$t/<file>}"; \
      fi; \
    done; \
    echo "test result: $([ $failed = 0 ] && echo ok || echo FAILED). $passed passed; $failed failed; fuzz targets, {{SECONDS}} s each"; \
    [ $failed = 0 ]

# fast checks that CI runs before the tests: rustfmt and clippy -D warnings on the native workspace and the plugins (for wasm32-wasip2 and natively with their tests), eslint on web/, the host's import layers
check: web-deps
    cargo fmt --all --check
    cargo fmt --manifest-path plugins/Cargo.toml --all --check
    cargo fmt --manifest-path fuzz/Cargo.toml --all --check
    cargo clippy --workspace --all-targets -- -D warnings
    rustup target add wasm32-wasip2 >/dev/null 2>&1 || rustup target add wasm32-wasip2
    cargo clippy --manifest-path plugins/Cargo.toml --workspace --target wasm32-wasip2 -- -D warnings
    cargo clippy --manifest-path plugins/Cargo.toml --workspace --all-targets -- -D warnings
    cd web && npx --no-install eslint .
    [ ! -f scripts/check_layers.py ] || python3 scripts/check_layers.py

# what `manifests` runs: Debian's kubectl (for `kubectl kustomize`) when missing, and kubernetes-validate and checkov in target/manifests-venv (installed again only when their pins change; several minutes the first time)
manifest-checkers:
    command -v kubectl >/dev/null || { sudo=$([ "$(id -u)" = 0 ] || echo sudo); $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends kubectl; }
    [ "$(cat target/manifests-venv/.pins 2>/dev/null)" = "{{manifest_checkers}}" ] || { rm -rf target/manifests-venv && python3 -m venv target/manifests-venv && target/manifests-venv/bin/pip install --quiet --disable-pip-version-check {{manifest_checkers}} && echo "{{manifest_checkers}}" >target/manifests-venv/.pins; }

# validate deploy/kubernetes/ without a cluster: rendered by `kubectl kustomize`, every object checked by kubernetes-validate --strict, checkov's policies (what is skipped says why beside it)
manifests: manifest-checkers
    PATH="$PWD/target/manifests-venv/bin:$PATH" bash deploy/kubernetes/check.sh

# the same as `check`
alias lint := check

# write docs/configuration.md again from the config structs (`sonde config reference`); a host unit test fails while it differs
config-reference:
    cargo run --quiet -p sonde -- config reference >target/configuration.md
    mv target/configuration.md docs/configuration.md

# remove build outputs and the local data directory
clean:
    cargo clean
    rm -rf plugins/target sonde-data web/dist web/node_modules
