#!/usr/bin/env python3
"""Writes host/hot-code.txt: the functions of the sonde binary a running host runs, which a
release build's linker places together at the start of the code (host/build.rs).

How: the release sonde runs with the bundled plugins, exporting to a blackhole
(`otlp-loadgen --sink`), and `perf record` samples it with call stacks (DWARF unwinding) in
three phases, each one's new functions listed after the phase before, by how many sampled
stacks they were on:
1. idle, nothing asking anything of it (--seconds): the code run every tick comes first;
2. read: /api/status, /api/series and /api/plugins every 0.5 s and the dashboard's live
   stream open (15 s): what a monitor or an open dashboard runs;
3. ingest: otlp-loadgen sending OTLP/gRPC points to its receiver (10 s): the receive, plugin
   delivery and export path.
Every function of the binary seen on a sampled stack (the running one and its callers) is
listed. Run it again after a change to what these paths run; names that no longer exist are
skipped by the linker, and a function missing from the list only costs the resident pages
around it.

Needs perf (Debian's linux-perf; ./dev hot-code installs it) and the release builds of sonde
and otlp-loadgen.

--check only counts how many of the listed names the release binary still has, and exits 1
below STALE_BELOW: a change that renames hot functions (a moved or reworked module gives them
new symbols) silently takes them out of the hot stretch, which showed as 1–2 MB more RSS.
`./dev bench` runs it first.
"""

import argparse
import collections
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

OUT = os.path.join(h.ROOT, "host/hot-code.txt")
# The share of listed names the binary must still have; a fresh list has 99 % (a few names are
# of functions the linker folded or a later build inlined).
STALE_BELOW = 0.95

HEADER = """\
# The sonde binary's functions a running host runs (bundled plugins): idle first, then those a
# reader of the API adds, then those OTLP ingest adds, each part hottest first. A release build's
# linker puts them first in .text (--symbol-ordering-file, see host/build.rs), so the code run
# every tick shares a few pages instead of keeping 64 KB resident around each function. Made by
# `./dev hot-code` (perf samples: {phases}); names no longer in the binary are skipped.
"""


def sonde_frames(perf_data, exe):
    """(symbol, samples seen in) for the functions of `exe` on the sampled stacks."""
    env = {k: v for k, v in os.environ.items() if k != "DEBUGINFOD_URLS"}
    # --no-inline: resolving inlined frames reads DWARF the release build does not have, slowly.
    out = subprocess.run(
        ["perf", "script", "-i", perf_data, "-F", "ip,sym,dso", "--no-demangle", "--no-inline"],
        capture_output=True, text=True, check=True, env=env,
    ).stdout
    seen = collections.Counter()
    stacks = 0
    in_stack = set()
    for line in out.splitlines() + [""]:
        fields = line.split()
        if not fields:
            # A blank line ends one sample's stack.
            if in_stack:
                stacks += 1
                seen.update(in_stack)
            in_stack = set()
            continue
        if len(fields) >= 3 and fields[-1] == f"({exe})" and fields[1] != "[unknown]":
            in_stack.add(fields[1])
    return seen, stacks


def record(pid, data, seconds, during=None):
    """perf samples of `pid` with call stacks for `seconds`, while `during()` runs (if given)."""
    perf = subprocess.Popen(["perf", "record", "-q", "-F", "40000", "-e", "cpu-clock", "--call-graph", "dwarf,8192",
                             "-p", str(pid), "-o", data, "--", "sleep", str(seconds)])
    if during:
        during()
    if perf.wait() != 0:
        sys.exit(f"hot-code: perf record exited with {perf.returncode}")


def read_the_api(api, seconds):
    """What a monitor and an open dashboard ask of the host."""
    stream = urllib.request.urlopen(f"http://{api}/api/stream?window_s=300&max_points=1000&interval_ms=1000",
                                    timeout=seconds + 5)
    def drain():
        try:
            while stream.read(4096):
                pass
        except (OSError, ValueError, AttributeError):
            pass  # closed below, mid-read

    threading.Thread(target=drain, daemon=True).start()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for path in ("/api/status", "/api/series", "/api/plugins"):
            h.get(api, path)
        time.sleep(0.5)
    stream.close()


def check(listing, exe):
    """Prints how many of the names in `listing` the binary `exe` defines; exits 1 when too few."""
    with open(listing) as f:
        names = {line.strip() for line in f if line.strip() and not line.startswith("#")}
    out = subprocess.run(["nm", "--defined-only", exe], capture_output=True, text=True, check=True).stdout
    defined = {line.rsplit(" ", 1)[-1] for line in out.splitlines()}
    share = len(names & defined) / max(1, len(names))
    rel = os.path.relpath(listing, h.ROOT)
    print(f"{rel}: {len(names & defined)} of {len(names)} listed functions are in {os.path.relpath(exe, h.ROOT)} "
          f"({share:.0%})")
    if share < STALE_BELOW:
        print(f"{rel} is stale (under {STALE_BELOW:.0%}): the hot code is spread over the binary again; "
              "regenerate it with ./dev hot-code")
        sys.exit(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=90.0, help="how long to sample the idle host")
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--check", action="store_true", help="only count the listed names the release binary has")
    a = ap.parse_args()
    if a.check:
        h.need_release_build(recipe="./dev build")
        return check(a.out, h.SONDE)
    if not shutil.which("perf"):
        sys.exit("hot-code: perf is not installed (Debian: apt-get install linux-perf)")
    if not os.path.exists(h.LOADGEN):
        sys.exit(f"hot-code: otlp-loadgen is missing at {h.LOADGEN}: run ./dev hot-code")
    work = tempfile.mkdtemp(prefix="sonde-hot-code-")
    sink_port, otlp_port = h.free_port(), h.free_port()
    sink = subprocess.Popen([h.LOADGEN, "--sink", f"127.0.0.1:{sink_port}"], stdout=subprocess.DEVNULL)
    phases = []
    try:
        cache = os.path.join(work, "cache-warm")
        h.cold_start(None, keep_cache=cache)
        run = os.path.join(work, "run")
        os.makedirs(run)
        api = f"127.0.0.1:{h.free_port()}"
        p = h.start_ready(run, api, f"http://127.0.0.1:{sink_port}", cache=cache,
                          settings=[f"ingest.otlp_grpc_listen=127.0.0.1:{otlp_port}"])
        exe = os.path.join(run, "sonde")
        try:
            time.sleep(15)  # past start-up and the host's second code page-out
            load = lambda: subprocess.run([h.LOADGEN, "--endpoint", f"http://127.0.0.1:{otlp_port}", "--seconds", "10",
                                           "--points", "1000", "--series", "100", "--concurrency", "2"],
                                          check=True, stdout=subprocess.DEVNULL)
            for name, seconds, during in (("idle", a.seconds, None), ("read", 15, lambda: read_the_api(api, 15)),
                                          ("ingest", 10, load)):
                data = os.path.join(work, f"{name}.data")
                record(p.pid, data, seconds, during)
                seen, stacks = sonde_frames(data, exe)
                phases.append((name, seconds, seen, stacks))
        finally:
            h.stop(p)
    finally:
        h.stop(sink)
        shutil.rmtree(work, ignore_errors=True)
    if not phases[0][2]:
        sys.exit("hot-code: no sample fell in the sonde binary (is perf allowed to sample? see perf_event_paranoid)")
    listed = set()
    with open(a.out, "w") as f:
        f.write(HEADER.format(phases=", ".join(f"{n} {s:.0f} s, {k} stacks" for n, s, _, k in phases)))
        for name, _, seen, _ in phases:
            new = sorted((kv for kv in seen.items() if kv[0] not in listed), key=lambda kv: (-kv[1], kv[0]))
            f.write(f"# {name}: {len(new)} functions\n")
            for sym, _ in new:
                f.write(sym + "\n")
                listed.add(sym)
    print(f"{a.out}: {len(listed)} functions ("
          + ", ".join(f"{n} {len(s)} seen in {k} stacks" for n, _, s, k in phases) + ")")


if __name__ == "__main__":
    main()
