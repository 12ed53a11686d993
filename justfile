# Every task a developer runs. `./dev <recipe>` installs `just` first if needed;
# `./dev` alone (or `./dev --list`) prints this file as a menu, group by group.
# The README starts with `./dev run` and `./dev test`.
#
# Each recipe's `[doc]` is its line in the menu; the comment above it says more.
# Scripts longer than a few lines live in scripts/.

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

[private]
default:
    @just --list --unsorted

# ---------------------------------------------------------------- run

# Builds the release binary first. Extra args go to sonde, e.g.
# `./dev run --export-endpoint http://127.0.0.1:4317`.
[doc('run sonde on this machine with its bundled plugins; extra args go to sonde')]
[group('run')]
[no-exit-message]
run *ARGS: build
    mkdir -p sonde-data/plugins sonde-data/sinks
    for f in target/plugins/bundled/*.wasm; do cmp -s "$f" "sonde-data/plugins/$(basename "$f")" || cp "$f" sonde-data/plugins/; done
    exec target/release/sonde --data-dir sonde-data --plugins-dir sonde-data/plugins --sinks-dir sonde-data/sinks {{ARGS}}

# Beside `./dev run --role master`: named NAME, its API on 127.0.0.1:PORT, its
# data in sonde-data/NAME; extra args go to sonde.
[doc('a cluster agent NAME on 127.0.0.1:PORT beside `./dev run --role master`')]
[group('run')]
[no-exit-message]
agent NAME PORT *ARGS: build
    mkdir -p "sonde-data/{{NAME}}/plugins" "sonde-data/{{NAME}}/sinks"
    for f in target/plugins/bundled/*.wasm; do cmp -s "$f" "sonde-data/{{NAME}}/plugins/$(basename "$f")" || cp "$f" "sonde-data/{{NAME}}/plugins/"; done
    exec target/release/sonde --role agent --master http://127.0.0.1:4317 --listen "127.0.0.1:{{PORT}}" --data-dir "sonde-data/{{NAME}}" --plugins-dir "sonde-data/{{NAME}}/plugins" --sinks-dir "sonde-data/{{NAME}}/sinks" --set "host.name={{NAME}}" --set ingest.otlp_grpc_listen=off --set ingest.otlp_http_listen=off {{ARGS}}

# ---------------------------------------------------------------- test

# The edit loop: the host's unit tests (the fuzz seeds replayed among them),
# the plugins' native tests and the Python client's unit tests. No setup, no
# end-to-end tests; about a minute once built.
[doc('the quick tests for the edit loop: host unit tests, plugin tests, Python client unit tests')]
[group('test')]
test-quick:
    cargo test --workspace --lib
    cargo test --manifest-path plugins/Cargo.toml --workspace
    python3 clients/python/tests/run.py

# Unit, plugin runtime with real components, end to end against real
# collectors and engines, the fuzz seeds, plugin logic, the Kubernetes
# manifests, the dashboard in chromium, the Python client with real
# frameworks; ends with a table of how long each stage took (scripts/test.sh).
[doc('the whole test suite, stage by stage, with a table of stage times at the end')]
[group('test')]
test:
    JUST="{{just_executable()}}" bash scripts/test.sh

# rustfmt and clippy -D warnings on the native workspace and the plugins (for
# wasm32-wasip2 and natively with their tests), eslint on web/, the host's
# import layers, and that every cargo command of the recipes builds sonde with
# the same dependency features (scripts/check_features.py: else each compiles
# the host again). CI runs it before the tests.
[doc('the fast checks before a commit: rustfmt, clippy, eslint, import layers, features')]
[group('test')]
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
    python3 scripts/check_features.py

# the same as `check`
alias lint := check

# The sonde binary against a real collector and real plugins, and the
# dashboard in chromium.
[doc('only the end-to-end tests (tests/) and the browser tests (web/tests/)')]
[group('test')]
e2e: setup plugins mpi-probe fake-nvml web
    cargo build -p sonde --bins
    cargo test -p sonde-e2e
    bash scripts/browser-tests.sh

# Each suite in web/tests/ against the debug sonde in Debian's chromium.
[doc('only the browser tests of the dashboard (web/tests/)')]
[group('test')]
test-browser: plugins web
    cargo build -p sonde --bins
    bash scripts/browser-tests.sh

# Its unit tests, then real loops (pure Python, PyTorch, Lightning, Hugging Face
# Trainer) against a running sonde. `./dev test` passes `--ignored no`: its cargo
# stage already ran the pure-Python loop and built sonde, and it names the
# built end-to-end binary in E2E_TEST_BIN, run directly here so that this
# stage need not wait for cargo's lock on target/ (held by the Rust tests).
[doc('the Python client: unit tests, then real training loops against sonde')]
[group('test')]
test-python WHICH="--include-ignored" BUILD="yes": setup python-frameworks python-client
    python3 clients/python/tests/run.py
    [ "{{BUILD}}" = no ] || cargo build -p sonde --bins
    if [ -n "${E2E_TEST_BIN:-}" ]; then "$E2E_TEST_BIN" python_client:: {{WHICH}}; else cargo test -p sonde-e2e --test e2e python_client:: -- {{WHICH}}; fi

# Rendered by `kubectl kustomize`, every object checked by kubernetes-validate
# --strict, checkov's policies (what is skipped says why beside it).
[doc('validate deploy/kubernetes/ without a cluster')]
[group('test')]
manifests: manifest-checkers
    PATH="$PWD/target/manifests-venv/bin:$PATH" bash deploy/kubernetes/check.sh

# Every decoder of outside input (fuzz/: OTLP in, ingest JSON, config, plugin
# upload, compressed bodies), coverage-guided, SECONDS each (scripts/fuzz.sh).
# `./dev test` replays the seeds only; CI runs this after it.
[doc('fuzz every decoder of outside input for SECONDS each (coverage-guided)')]
[group('test')]
fuzz SECONDS="30": fuzz-build
    bash scripts/fuzz.sh {{SECONDS}}

# cargo-fuzz, installed once; coverage instrumentation, fuzz/Cargo.toml's dev
# profile. A second build of the host, into fuzz/target (about 4 GB).
[doc('build the fuzz targets (`./dev fuzz` runs them)')]
[group('test')]
fuzz-build:
    command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
    cd fuzz && cargo fuzz build --dev --sanitizer none

# ---------------------------------------------------------------- build

# Release, with the dashboard and the bundled plugins embedded.
[doc('build the sonde binary (release) into target/release/sonde')]
[group('build')]
build: plugins web
    cargo build --release -p sonde

# The one self-contained binary, LICENSE, README, docs/deploy.md, example
# configs and systemd units; scripts/dist.sh checks each part before packing
# (the carried plugins, the dashboard, --check-config, systemd-analyze verify).
[doc('the release tarball and its SHA-256 in target/dist/')]
[group('build')]
dist: build
    bash scripts/dist.sh

# From scratch with Debian's buildah (no registry is pulled from): the release
# binary, the Debian libraries it links, CA certificates, uid 65534, no shell;
# into the local containers storage as localhost/sonde:<version> and as an OCI
# archive in target/image/, which must stay within 60 MB (scripts/image.sh).
[doc('the container image (buildah, from scratch) and its OCI archive in target/image/')]
[group('build')]
image: build container-tools
    bash scripts/image.sh

[doc('build the plugins (wasm32-wasip2 components) into target/plugins/')]
[group('build')]
plugins:
    bash scripts/build-plugins.sh

[doc('bundle the dashboard into web/dist/')]
[group('build')]
web: web-deps
    cd web && npm run --silent build

# The LD_PRELOAD library into target/probes/, the MPI test programs into target/mpi/.
[doc('build the MPI probe and the MPI test programs with mpicc')]
[group('build')]
mpi-probe:
    bash scripts/build-mpi-probe.sh

# tests/fake-nvml/: the libnvidia-ml.so.1 ABI answering from a script, into
# target/fake-nvml/; the GPU tests and benchmark load it in place of NVIDIA's driver.
[doc('build the fake NVML library for the GPU tests')]
[group('build')]
fake-nvml:
    bash scripts/build-fake-nvml.sh

# tools/floor-sampler/floor.c: the least a 100 ms sampler of this machine
# costs, run beside sonde by ./dev bench.
[doc('build the floor sampler the benchmarks compare sonde with')]
[group('build')]
floor-sampler:
    mkdir -p target && cc -O2 -Wall -Wextra -o target/floor-sampler tools/floor-sampler/floor.c

# docs/configuration.md is `sonde config reference`'s output; a host unit
# test fails while the two differ.
[doc('write docs/configuration.md again from the config structs')]
[group('build')]
config-reference:
    cargo run --quiet -p sonde -- config reference >target/configuration.md
    mv target/configuration.md docs/configuration.md

[doc('remove build outputs and the local data directory')]
[group('build')]
clean:
    cargo clean
    rm -rf plugins/target fuzz/target sonde-data web/dist web/node_modules

# ---------------------------------------------------------------- setup

# The wasm target, Python test packages, Debian's chromium (browser tests), Open
# MPI (the MPI probe's tests), Prometheus and VictoriaMetrics (remote-write
# tests), libfaketime (a cluster agent with a skewed clock), the OpenTelemetry
# JS SDK (a real OTLP/JSON sender), the guest toolchains, buildah and podman
# (the container image and its test).
[doc('install what the build and the tests need (once; quick when done)')]
[group('setup')]
setup: js-sender guest-toolchains container-tools
    rustup target add wasm32-wasip2 >/dev/null 2>&1 || rustup target add wasm32-wasip2
    python3 -m pip install --quiet --disable-pip-version-check "{{rotel}}" {{otel}}
    test -x /usr/bin/chromium || { sudo=$([ "$(id -u)" = 0 ] || echo sudo); $sudo apt-get update -qq && $sudo apt-get install -y -qq chromium; }
    { command -v mpicc >/dev/null && [ -e /usr/include/x86_64-linux-gnu/libunwind.h ]; } || { sudo=$([ "$(id -u)" = 0 ] || echo sudo); $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends openmpi-bin libopenmpi-dev libunwind-dev; }
    test -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 || { sudo=$([ "$(id -u)" = 0 ] || echo sudo); $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends faketime; }
    command -v prometheus >/dev/null && command -v victoria-metrics >/dev/null || { sudo=$([ "$(id -u)" = 0 ] || echo sudo); $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends prometheus victoria-metrics; }

# Debian's buildah (`./dev image`), podman with runc and the CNI bridge plugins
# (tests/tests/container.rs runs the image with them: crun refuses this
# machine's cgroups v1 hybrid), and busybox-static (the test's job container
# posts with its wget).
[doc('buildah, podman, runc and busybox-static for the image and its test')]
[group('setup')]
container-tools:
    command -v buildah >/dev/null && command -v podman >/dev/null && command -v runc >/dev/null && [ -x /bin/busybox ] && [ -e /usr/lib/cni/bridge ] || { sudo=$([ "$(id -u)" = 0 ] || echo sudo); $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends buildah podman runc containernetworking-plugins busybox-static; }

# The OTLP/JSON tests send with it.
[doc('the OpenTelemetry JS SDK in tests/otlp-js/, pinned by its package-lock.json')]
[group('setup')]
js-sender:
    cd tests/otlp-js && { cmp -s package-lock.json node_modules/.sonde-lock || { npm ci --no-audit --no-fund --loglevel=error && cp package-lock.json node_modules/.sonde-lock; }; }

# componentize-py from PyPI, componentize-js pinned by tests/guest-js/package-lock.json.
[doc('the toolchains that build Python and JavaScript plugins')]
[group('setup')]
guest-toolchains:
    componentize-py --version 2>/dev/null | grep -qx "componentize-py {{trim_start_match(componentize_py, "componentize-py==")}}" || python3 -m pip install --quiet --disable-pip-version-check "{{componentize_py}}"
    cd tests/guest-js && { cmp -s package-lock.json node_modules/.sonde-lock || { npm ci --no-audit --no-fund --loglevel=error && cp package-lock.json node_modules/.sonde-lock; }; }

# Installed again only when web/package-lock.json changes.
[doc("the dashboard's npm packages, pinned by web/package-lock.json")]
[group('setup')]
web-deps:
    cd web && { cmp -s package-lock.json node_modules/.sonde-lock || { npm ci --no-audit --no-fund --loglevel=error && cp package-lock.json node_modules/.sonde-lock; }; }

# Skipped when those exact versions are installed (PyPI's Linux torch wheel
# brings its CUDA libraries: about 5 GB, see clients/python/README.md).
[doc("PyTorch, Lightning, transformers and accelerate for the Python client's tests")]
[group('setup')]
python-frameworks:
    python3 -c 'import sys, importlib.metadata as m; sys.exit(any(m.version(n) != v for n, v in (p.split("==") for p in sys.argv[1:])))' {{frameworks}} 2>/dev/null \
      || python3 -m pip install --quiet --disable-pip-version-check {{frameworks}}

[doc('install the Python client (clients/python) as a user would')]
[group('setup')]
python-client:
    python3 -m pip install --quiet --disable-pip-version-check --no-build-isolation --no-deps --force-reinstall ./clients/python
    rm -rf clients/python/build clients/python/src/*.egg-info
    cd /tmp && python3 -c 'import sonde, pathlib; assert (pathlib.Path(sonde.__file__).parent / "py.typed").exists(); print("sonde-client", sonde.__version__, "installed")'

# Debian's kubectl (for `kubectl kustomize`) when missing, and kubernetes-validate
# and checkov in target/manifests-venv (installed again only when their pins
# change; several minutes the first time).
[doc('what `./dev manifests` runs: kubectl, kubernetes-validate, checkov')]
[group('setup')]
manifest-checkers:
    command -v kubectl >/dev/null || { sudo=$([ "$(id -u)" = 0 ] || echo sudo); $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends kubectl; }
    [ "$(cat target/manifests-venv/.pins 2>/dev/null)" = "{{manifest_checkers}}" ] || { rm -rf target/manifests-venv && python3 -m venv target/manifests-venv && target/manifests-venv/bin/pip install --quiet --disable-pip-version-check {{manifest_checkers}} && echo "{{manifest_checkers}}" >target/manifests-venv/.pins; }

# ---------------------------------------------------------------- bench

# Whether host/hot-code.txt still matches the binary, criterion
# micro-benchmarks, then the whole process beside the floor sampler (CPU per
# sample and ratio, per-thread breakdown, RSS, period error, cold start).
# `./dev bench --check` runs only the whole-process part and compares it with
# docs/benchmarks.md's headline figures.
[doc('benchmarks: criterion, then the whole process beside the floor sampler')]
[group('bench')]
bench *ARGS: build fake-nvml floor-sampler
    python3 scripts/hot_code.py --check || echo "(the figures below are of a binary whose hot code is spread out)"
    if [[ " {{ARGS}} " != *" --check "* ]]; then cargo bench -p sonde --bench plugin_boundary --bench sample --bench nvml --bench export --bench live --bench agent; fi
    bash scripts/bench-process.sh {{ARGS}}

# Idle, then read through the API, then taking OTLP; the functions it runs go
# to host/hot-code.txt, which a release build's linker then places first in
# the binary (host/build.rs); rebuilds with the new list.
[doc('profile the release host (perf) and list its hot functions in host/hot-code.txt')]
[group('bench')]
hot-code *ARGS: build
    cargo build --release -p otlp-loadgen
    command -v perf >/dev/null || { sudo=$([ "$(id -u)" = 0 ] || echo sudo); $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends linux-perf; }
    python3 scripts/hot_code.py {{ARGS}}
    cargo build --release -p sonde

# Bundled plugins, export off, its API read only at the end: RSS and where it
# lives each minute, the live store's size once its hour is full; --minutes N
# for a shorter run.
[doc('one idle release sonde over an hour: RSS each minute')]
[group('bench')]
rss-over-time *ARGS: build
    python3 scripts/rss_over_time.py {{ARGS}}

# Sonde with no plugins, with sysmetrics only and with every bundled plugin,
# each alone in its own window beside the floor sampler (CPU per sample, × the
# floor, RSS, each thread's CPU and wake-ups); --wake-sharing: what a wake-up
# shared with another process costs.
[doc("where the idle host's CPU above the floor goes")]
[group('bench')]
bench-parts *ARGS: build floor-sampler
    python3 scripts/bench_parts.py {{ARGS}}

# Bundled plugins, export off: CPU per sample and RSS of each, the ratio B / A
# and each thread's CPU and wake-ups, e.g. the previous commit's build against
# this one.
[doc('two sonde builds A and B side by side in one window')]
[group('bench')]
bench-ab A B *ARGS: plugins
    python3 scripts/bench_ab.py {{A}} {{B}} {{ARGS}}

# One stack walk each way and the tick itself, cost per wrapped call, NetPIPE
# and HPCC at 100 Hz and 1 kHz (stacks, and the call site alone) vs without
# the probe.
[doc("the MPI probe's overhead")]
[group('bench')]
bench-mpi: mpi-probe
    command -v NPopenmpi >/dev/null && command -v hpcc >/dev/null || { sudo=$([ "$(id -u)" = 0 ] || echo sudo); $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends netpipe-openmpi hpcc; }
    bash scripts/bench-mpi.sh

# Confusion table (injected cause x verdict) over real injected runs, and its
# CPU cost at 8 ranks x 10 steps/s.
[doc("the bottleneck plugin's verdicts against injected causes")]
[group('bench')]
bench-verdicts *ARGS: setup plugins mpi-probe
    cargo build -p sonde
    python3 scripts/bench_verdicts.py {{ARGS}}

# plugins/bottleneck/src/whatif.rs on >= 200 simulated dp x pp x tp jobs up to
# 1 024 ranks (tests/diagnosis/simulate.py), one injected cause each: confusion
# table, right-culprit and no-culprit shares, slowdown against the offline
# reference (tests/diagnosis/whatif_ref.py), time per window; --runs N, --jobs N.
[doc('the What-if diagnosis on simulated jobs against the truth')]
[group('bench')]
bench-diagnosis *ARGS:
    cargo build --release --example whatif --manifest-path plugins/Cargo.toml -p sonde-bottleneck
    python3 scripts/bench_diagnosis.py {{ARGS}}

# The same diagnosis on real PyTorch jobs (tests/py/torch_faults.py, gloo on
# CPU): a master and two agents in network namespaces, four ranks, one fault
# per run (a slow dataloader, a CPU quota, a throttled link, an unbalanced
# pipeline); the master's finding against the truth. Needs root; --runs, --steps,
# --rounds (the list again, for the rates).
[doc('the diagnosis on real PyTorch jobs with injected faults, on a cluster in namespaces')]
[group('bench')]
bench-diagnosis-real *ARGS: setup python-frameworks plugins
    cargo build -p sonde
    SONDE_BIN="${SONDE_BIN:-target/debug/sonde}" python3 scripts/bench_diagnosis_real.py {{ARGS}}

# The `sonde plugin new` templates (size, load cold and cached, memory,
# on-samples cost, ratio to Rust) and the plugins/examples/ guests next to
# their Rust twins doing the same work (also cost per event row, same
# decisions); --only templates|examples, --sonde target/debug/sonde for a debug host.
[doc('Python and JavaScript guests beside Rust in one sonde')]
[group('bench')]
bench-guests *ARGS: setup
    cargo build -p sonde --release
    python3 scripts/bench_guests.py {{ARGS}}

# sonde, collectd (Interval 0.1), prometheus-node-exporter scraped at 10 Hz, a
# psutil sampler; CPU per sample, RSS, ratios.
[doc('sonde beside its peers in one run')]
[group('bench')]
bench-peers *ARGS: build
    command -v collectd >/dev/null && command -v prometheus-node-exporter >/dev/null || { sudo=$([ "$(id -u)" = 0 ] || echo sudo); $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends collectd-core prometheus-node-exporter; }
    python3 -c "import psutil" 2>/dev/null || python3 -m pip install --quiet --disable-pip-version-check psutil
    python3 scripts/bench_peers.py {{ARGS}}

# sonde (receive -> pass-through plugin -> export) against rotel (receive ->
# blackhole), the same Rust load generator.
[doc('OTLP pipeline throughput, sonde against rotel')]
[group('bench')]
bench-otlp *ARGS: build
    cargo build --release -p otlp-loadgen
    python3 scripts/bench_otlp.py {{ARGS}}

# The series of 64 and 256 simulated agents (otlp-loadgen --agents), rotel the
# peer in the same run: CPU per 100 000 points, RSS, history bytes per
# node-hour, query p50/p99 of a 1-hour 8-node view.
[doc('one master taking many simulated agents')]
[group('bench')]
bench-cluster *ARGS: build
    cargo build --release -p otlp-loadgen
    python3 scripts/bench_cluster.py {{ARGS}}

# A release master with the bundled plugins taking otlp-loadgen --ops-ranks
# 1024 (a step a second, about 47 operations per rank with their dp/pp/tp
# coordinates, one rank made 2x slower halfway): its share of a core, RSS over
# the run, each plugin's longest hook call, p99, timeouts, traps and memory,
# and whether the What-if finding names the slow rank; --seconds N.
[doc("a master's What-if diagnosis of a 1 024-rank job: CPU, memory, hook calls")]
[group('bench')]
bench-diagnosis-load *ARGS: build
    cargo build --release -p otlp-loadgen
    python3 scripts/bench_diagnosis_load.py {{ARGS}}

# An hour-long job (8 ranks x 3 phases x 36 000 batches) and a 1 024-rank
# job's first ten minutes (1 024 x 3 x 600) in chromium: first paint, all
# batches in, zoom and pan per frame (Performance API).
[doc("the dashboard's job page for an hour-long job and a 1 024-rank one")]
[group('bench')]
bench-web: setup web
    cargo build -p sonde
    node web/bench/job-page.mjs

# What a restart reads back costs in memory: a debug sonde with 20 000
# batches x 3 ranks of timings in its job registry, killed and started again
# (scripts/bench_restart_rss.py; BATCHES as its argument).
[doc('RSS and time to ready of a sonde restarted over a full job registry')]
[group('bench')]
bench-restart-rss *ARGS:
    cargo build -p sonde
    python3 scripts/bench_restart_rss.py target/debug/sonde {{ARGS}}

# From exec to `GET /api/ready` (every carried plugin loaded) for a release
# sonde given no plugins directory: an empty data directory (written out and
# compiled), then the same one again (the compile cache); the binary's size
# and RSS both ways (scripts/bench_cold_start.py; --rounds N, --rss-after S).
[doc('cold start of the plugins the release binary carries, and its size')]
[group('bench')]
bench-cold-start *ARGS: build
    python3 scripts/bench_cold_start.py --sonde target/release/sonde {{ARGS}}

# Bare, with record_timing to a running sonde, with sonde down (µs per call).
[doc("the Python client's cost to a 10 000-step loop")]
[group('bench')]
bench-python: setup
    cargo build -p sonde --bins
    python3 clients/python/bench/overhead.py target/debug/sonde

# 8 agents directly to rotel, then through one sonde gateway killed for 60 s;
# every point counted end to end.
[doc('many nodes through a gateway that goes down')]
[group('bench')]
many-nodes *ARGS: build
    python3 scripts/many_nodes.py {{ARGS}}

# Every bundled plugin, 10 Hz sampling, 10 000 ingest rows/s, hostile plugins
# dropped in at minute 20; RSS, fds, threads, period, losses.
[doc('soak: 30 minutes under load')]
[group('bench')]
soak *ARGS: build
    python3 scripts/soak.py {{ARGS}}

# A master and three agents in network namespaces on a bridge this creates and
# removes, a job on every node, faults one at a time (link cut, tbf throttle,
# packet loss, kill -9 of master and agents, master disk full, clock jumps, the
# collector in between killed); every acknowledged timing, row and point
# checked at the end. Needs root; --fault-s N, --keep, --json FILE.
[doc('fault injection: every acknowledged write checked after partitions, kills, full disks')]
[group('bench')]
chaos *ARGS: plugins
    command -v iptables >/dev/null && command -v tc >/dev/null && [ -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ] || { sudo=$([ "$(id -u)" = 0 ] || echo sudo); $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends iptables iproute2 faketime; }
    cargo build -p sonde
    sudo=$([ "$(id -u)" = 0 ] || echo sudo); $sudo python3 scripts/chaos.py {{ARGS}}
