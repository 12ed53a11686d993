"""What the benchmark and soak scripts share (see scripts/README.md).

- where the built pieces are: the release `sonde`, the bundled and testing plugins, otlp-loadgen;
- the rotel OTLP collector (from the `rotel` PyPI package that `./dev setup` installs): finding
  its binary and starting it with a blackhole or an OTLP exporter;
- starting sonde in a scratch directory and waiting until it is ready, or until its first sample
  (the cold-start figure), and a compile cache made once so later rounds start warm;
- a process's CPU time (its kernel CPU-time clock, in ns), RSS, open files and threads, and a
  per-thread reading (name, CPU, wake-ups) for the breakdowns, read from /proc;
- the floor sampler (tools/floor-sampler) the whole-process benchmark puts beside sonde;
- the psutil sampler the whole-process benchmarks put beside sonde.

Only the standard library is imported here.
"""

import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# SONDE_BIN runs another build (e.g. a copy of an earlier one, for a before/after).
SONDE = os.environ.get("SONDE_BIN") or os.path.join(ROOT, "target/release/sonde")
BUNDLED = os.path.join(ROOT, "target/plugins/bundled")
TESTBED = os.path.join(ROOT, "target/plugins/testing/testbed.wasm")
LOADGEN = os.path.join(ROOT, "target/release/otlp-loadgen")
FLOOR = os.path.join(ROOT, "target/floor-sampler")
TICK = os.sysconf("SC_CLK_TCK")

# A Python sampler doing the reads sonde does (CPU per core and total, memory, network per
# interface, disk per device) every 100 ms for argv[1] seconds; prints how many samples it took.
PSUTIL_PEER = r"""
import psutil, time, sys
period = 0.1
n = 0
psutil.cpu_percent(percpu=True)
next_t = time.monotonic()
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    psutil.cpu_percent(percpu=True); psutil.cpu_percent()
    psutil.virtual_memory()
    psutil.net_io_counters(pernic=True)
    psutil.disk_io_counters(perdisk=True)
    n += 1
    next_t += period
    time.sleep(max(0, next_t - time.monotonic()))
print(n)
"""


# ---------------------------------------------------------------- processes and /proc

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def cpu_seconds(pid):
    """User + system CPU time of a process so far, threads that ended included. Read from the
    process's CPU-time clock (the kernel's nanosecond sum, as clock_getcpuclockid gives it);
    /proc/PID/stat (10 ms ticks, too coarse for a 20 s window of an idle sampler) only where
    that clock cannot be read."""
    try:
        return time.clock_gettime_ns(((~pid) << 3) | 2) / 1e9  # CPUCLOCK_SCHED of the process
    except OSError:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


def memory_parts(pid):
    """Resident memory of a process by where it lives (MB), from /proc/PID/smaps: the sonde
    binary's own pages, other shared libraries, the compiled plugins (mapped .cwasm files),
    the glibc heap, and anonymous mappings by size (thread stacks, malloc arenas, wasm linear
    memories and everything else mmap'd)."""
    parts = {}
    name, size_kb = None, 0
    exe = os.readlink(f"/proc/{pid}/exe")
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split()
            if "-" in head[0] and not line.startswith(("Rss", "Size")) and ":" not in head[0]:
                lo, hi = (int(x, 16) for x in head[0].split("-"))
                size_kb = (hi - lo) // 1024
                path = head[5] if len(head) > 5 else ""
                if path == exe:
                    name = "sonde binary"
                elif path.endswith(".cwasm"):
                    name = "compiled plugins (.cwasm)"
                elif path == "[heap]":
                    name = "heap (brk)"
                elif path.startswith("[stack"):
                    name = "main stack"
                elif path.startswith("/"):
                    name = "shared libraries"
                elif path:
                    name = path
                elif size_kb >= 1 << 20:
                    name = "anon ≥ 1 GiB (wasm memories)"
                elif size_kb >= 60 << 10:
                    name = "anon 60 MiB–1 GiB (malloc arenas)"
                elif size_kb in (2052, 4100, 8196, 8192, 4096, 2048):
                    name = "thread stacks"
                else:
                    name = "anon, other"
            elif head[0] == "Rss:":
                parts[name] = parts.get(name, 0) + int(head[1]) / 1024
    return {k: v for k, v in sorted(parts.items(), key=lambda kv: -kv[1]) if v >= 0.05}


def threads(pid):
    """{tid: (name, cpu_ns, voluntary switches, involuntary switches)} of a process's threads
    now. A voluntary switch is the thread going to sleep, so each one is a later wake-up."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        base = f"/proc/{pid}/task/{tid}"
        try:
            with open(f"{base}/comm") as f:
                name = f.read().strip()
            with open(f"{base}/status") as f:
                st = dict(line.split(":", 1) for line in f if "ctxt_switches" in line)
            try:
                cpu = time.clock_gettime_ns(((~int(tid)) << 3) | 6)  # the thread's CPUCLOCK_SCHED
            except OSError:
                with open(f"{base}/schedstat") as f:
                    cpu = int(f.read().split()[0])
        except (OSError, ValueError):
            continue  # ended while read
        out[int(tid)] = (name, cpu, int(st["voluntary_ctxt_switches"]), int(st["nonvoluntary_ctxt_switches"]))
    return out


def per_thread(before, after, n_ticks):
    """Per thread name, between two `threads()` snapshots: [threads, µs of CPU per tick,
    wake-ups per tick, involuntary switches per tick], over the threads alive at both ends;
    what threads that came or went used is the difference to the process total."""
    rows = {}
    for tid, (name, cpu1, vol1, inv1) in after.items():
        b = before.get(tid)
        if b is None or b[0] != name:
            continue
        r = rows.setdefault(name, [0, 0.0, 0.0, 0.0])
        r[0] += 1
        r[1] += (cpu1 - b[1]) / 1e3 / n_ticks
        r[2] += (vol1 - b[2]) / n_ticks
        r[3] += (inv1 - b[3]) / n_ticks
    return rows


def rotated(items, r):
    """`items` started at its (r mod len)-th: round r's order, so that each goes first in turn
    (a window's place in the round, e.g. after another sonde's exit, must not favour one)."""
    items = list(items)
    k = r % len(items)
    return items[k:] + items[:k]


def print_thread_columns(columns):
    """Each thread's medians over rounds, one column per run beside the others: `columns` is
    [(label, [per_thread() of each round])]. Threads under 0.05 µs a tick everywhere are left
    out; the costliest come first."""
    names = {n for _, rounds in columns for r in rounds for n in r}
    med = lambda rounds, n, i: statistics.median(r.get(n, [0, 0, 0, 0])[i] for r in rounds)
    top = {n: max(med(rounds, n, 1) for _, rounds in columns) for n in names}
    print("\nper thread, medians (µs of CPU per tick; wake-ups per tick)")
    print(f"{'thread':18}" + "".join(f" | {label + ': µs':>14}{'wakes':>7}" for label, _ in columns))
    for n in sorted((n for n in names if top[n] >= 0.05), key=lambda n: -top[n]):
        print(f"{n:18}" + "".join(f" | {med(r, n, 1):>14.1f}{med(r, n, 2):>7.2f}" for _, r in columns))


def rss_mb(pid, field="VmRSS"):
    """The process's resident memory in MB; field="VmHWM" gives its peak so far."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


def proc_counts(pid):
    """(open file descriptors, threads) of a process."""
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    with open(f"/proc/{pid}/status") as f:
        threads = next(int(line.split()[1]) for line in f if line.startswith("Threads:"))
    return fds, threads


def stop(p, timeout=10):
    """SIGTERM, then SIGKILL if the process has not ended within `timeout` seconds."""
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout)
    except subprocess.TimeoutExpired:
        p.kill()


def get(api, path):
    """GET http://{api}{path} as JSON."""
    with urllib.request.urlopen(f"http://{api}{path}", timeout=5) as r:
        return json.loads(r.read())


# ---------------------------------------------------------------- rotel

def rotel_agent():
    """Path of the rotel binary shipped inside the `rotel` Python package."""
    try:
        import rotel
    except ImportError:
        sys.exit("the rotel collector is missing: run ./dev setup (pip install rotel)")
    return os.path.join(os.path.dirname(rotel.__file__), "rotel-agent")


def start_rotel(grpc_port=None, export_to=None, extra=(), stdout=None, settle=1.0):
    """Starts rotel receiving OTLP/gRPC on grpc_port (a free one if None), with a blackhole
    exporter, or with OTLP/gRPC export (uncompressed, like sonde's) to port `export_to`.
    `extra` adds rotel arguments; its output goes to `stdout` (a file) or nowhere. Waits
    `settle` seconds for it to listen. Returns (process, grpc_port)."""
    grpc_port = grpc_port or free_port()
    exporter = ["--exporter", "blackhole"] if export_to is None else [
        "--exporter", "otlp", "--otlp-exporter-endpoint", f"http://127.0.0.1:{export_to}",
        "--otlp-exporter-protocol", "grpc", "--otlp-exporter-compression", "none"]
    out = stdout if stdout is not None else subprocess.DEVNULL
    p = subprocess.Popen([rotel_agent(), "start", *exporter,
                          "--otlp-grpc-endpoint", f"127.0.0.1:{grpc_port}",
                          "--otlp-http-endpoint", f"127.0.0.1:{free_port()}", *extra],
                         stdout=out, stderr=subprocess.STDOUT if stdout is not None else subprocess.DEVNULL)
    time.sleep(settle)
    return p, grpc_port


# ---------------------------------------------------------------- sonde

def need_release_build(*paths, recipe="./dev bench"):
    """Exits with a clear message when sonde (or another built piece) is missing."""
    for path in (SONDE, *paths):
        if not os.path.exists(path):
            sys.exit(f"{os.path.relpath(path, ROOT)} is missing: build it with {recipe}")


def plugin_dirs(work, bundled=True, extra=None, bundled_from=None):
    """Makes work/plugins (with the bundled plugins, from `bundled_from` if given, unless
    bundled=False, and `extra`: {plugin name: component path}) and work/sinks. Returns
    (plugins, sinks)."""
    plugins, sinks = os.path.join(work, "plugins"), os.path.join(work, "sinks")
    os.makedirs(plugins, exist_ok=True)
    os.makedirs(sinks, exist_ok=True)
    source = bundled_from or BUNDLED
    for f in os.listdir(source) if bundled else []:
        shutil.copy(os.path.join(source, f), plugins)
    for name, path in (extra or {}).items():
        shutil.copy(path, os.path.join(plugins, f"{name}.wasm"))
    return plugins, sinks


def start_sonde(work, api, endpoint=None, settings=(), data_dir=None, extra=(), stdout=None, exe=None):
    """Starts the release sonde with work/plugins and work/sinks (see plugin_dirs), its data in
    `data_dir` (default: work), its API on `api`, exporting to `endpoint` if given; each of
    `settings` is a `key=value` for --set, and `extra` are more arguments as they are. Its output
    goes to `stdout` (a file) or nowhere; `exe` runs another copy of the binary. Returns at
    once: see wait_until, wait_ready and start_sonde_timed."""
    args = [exe or SONDE, "--data-dir", data_dir or work, "--plugins-dir", os.path.join(work, "plugins"),
            "--sinks-dir", os.path.join(work, "sinks"), "--listen", api]
    if endpoint:
        args += ["--export-endpoint", endpoint]
    for s in settings:
        args += ["--set", s]
    args += list(extra)
    out = stdout if stdout is not None else subprocess.DEVNULL
    return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT if stdout is not None else subprocess.DEVNULL)


def wait_until(check, proc, what, seconds=30.0, step=0.05):
    """Calls check() until it returns true (errors count as not yet); exits naming `what` when
    `proc` ends first or `seconds` pass."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            if check():
                return
        except Exception:
            pass
        if proc.poll() is not None:
            sys.exit(f"{what}: sonde exited with {proc.returncode}")
        time.sleep(step)
    sys.exit(f"{what}: not within {seconds:.0f} s")


def wait_ready(api, proc, what="sonde did not become ready", seconds=30.0):
    wait_until(lambda: get(api, "/api/ready") is not None, proc, what, seconds)


def ticks(api):
    """How many samples the sonde at `api` has taken."""
    return get(api, "/api/status")["sampler"]["period"]["ticks"]


def start_ready(work, api, endpoint=None, cache=None, binary=None, seconds=30.0, settings=(), bundled_from=None):
    """sonde on `work` with the bundled plugins (from `bundled_from`, if given), `settings` (see
    start_sonde) and a copy of the compile cache `cache` (if given), run from its own copy of
    `binary` (default: the release build), once it took its first sample. Its own copy: one sonde per node runs from its binary alone, and two sondes
    mapping one file would share its pages, which sonde's code page-out then leaves
    resident (see host/src/footprint.rs). Written files are synced first for the same reason:
    the kernel does not page out dirty pages."""
    plugin_dirs(work, bundled_from=bundled_from)
    if cache:
        shutil.copytree(cache, os.path.join(work, "cache"))
    exe = os.path.join(work, "sonde")
    shutil.copy(binary or SONDE, exe)
    os.sync()
    p = start_sonde(work, api, endpoint, settings=settings, exe=exe)
    wait_until(lambda: ticks(api) >= 1, p, f"{binary or SONDE} did not take its first sample", seconds)
    return p


def start_sonde_timed(work, api, endpoint):
    """Starts sonde with the bundled plugins on `work` and waits for its first sample.
    Returns (process, ms from start to the first sample): the cold-start figure."""
    plugin_dirs(work)
    t0 = time.monotonic()
    p = start_sonde(work, api, endpoint)
    while True:
        try:
            st = get(api, "/api/status")
            if st["sampler"] and st["sampler"]["period"]["ticks"] >= 1:
                return p, (time.monotonic() - t0) * 1000
        except Exception:
            pass
        if p.poll() is not None:
            sys.exit(f"sonde exited early with {p.returncode}")
        time.sleep(0.005)


def cold_start(endpoint, keep_cache=None):
    """Starts sonde twice in a new directory: once compiling the plugins, once from the compile
    cache. Returns (ms to the first sample without the cache, RSS 2 s later, ms with the cache);
    copies the cache to `keep_cache` if given, for later rounds to start warm."""
    data = tempfile.mkdtemp(prefix="sonde-cold-")
    try:
        p, cold_ms = start_sonde_timed(data, f"127.0.0.1:{free_port()}", endpoint)
        time.sleep(2)
        cold_rss = rss_mb(p.pid)
        stop(p)
        p, warm_ms = start_sonde_timed(data, f"127.0.0.1:{free_port()}", endpoint)
        stop(p)
        if keep_cache:
            shutil.copytree(os.path.join(data, "cache"), keep_cache)
        return cold_ms, cold_rss, warm_ms
    finally:
        shutil.rmtree(data, ignore_errors=True)
