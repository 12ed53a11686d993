#!/usr/bin/env python3
"""Writes host/hot-code.txt: the functions of the sonde binary that an idle host runs, hottest
first, which a release build's linker places together at the start of the code (host/build.rs).

How: the release sonde runs with the bundled plugins (export off, nothing posting to it, no
dashboard open), and `perf record` samples it with call stacks (DWARF unwinding) for --seconds.
Every function of the sonde binary seen on a sampled stack (the running one and its callers) is
listed, ordered by how many samples it was seen in. Run it again after a change to what the
idle host does; names that no longer exist are skipped by the linker, and a function missing
from the list only costs the resident pages around it.

Needs perf (Debian's linux-perf; ./dev hot-code installs it) and the release build.
"""

import argparse
import collections
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

OUT = os.path.join(h.ROOT, "host/hot-code.txt")

HEADER = """\
# The sonde binary's functions an idle host runs (bundled plugins, export off), hottest first:
# a release build's linker puts them first in .text (--symbol-ordering-file, see host/build.rs),
# so the code run every tick shares a few pages instead of keeping 64 KB resident around each
# function. Made by `./dev hot-code` ({seconds:.0f} s of perf samples, {samples} stacks); names
# no longer in the binary are skipped.
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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=90.0, help="how long to sample the idle host")
    ap.add_argument("--out", default=OUT)
    a = ap.parse_args()
    if not shutil.which("perf"):
        sys.exit("hot-code: perf is not installed (Debian: apt-get install linux-perf)")
    work = tempfile.mkdtemp(prefix="sonde-hot-code-")
    try:
        cache = os.path.join(work, "cache-warm")
        h.cold_start(None, keep_cache=cache)
        run = os.path.join(work, "run")
        os.makedirs(run)
        p = h.start_ready(run, f"127.0.0.1:{h.free_port()}", cache=cache)
        try:
            time.sleep(5)  # past start-up
            data = os.path.join(work, "perf.data")
            subprocess.run(
                ["perf", "record", "-q", "-F", "40000", "-e", "cpu-clock", "--call-graph", "dwarf,8192",
                 "-p", str(p.pid), "-o", data, "--", "sleep", str(a.seconds)],
                check=True,
            )
        finally:
            h.stop(p)
        seen, stacks = sonde_frames(data, os.path.join(run, "sonde"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if not seen:
        sys.exit("hot-code: no sample fell in the sonde binary (is perf allowed to sample? see perf_event_paranoid)")
    with open(a.out, "w") as f:
        f.write(HEADER.format(seconds=a.seconds, samples=stacks))
        for sym, _ in sorted(seen.items(), key=lambda kv: (-kv[1], kv[0])):
            f.write(sym + "\n")
    print(f"{a.out}: {len(seen)} functions from {stacks} sampled stacks")


if __name__ == "__main__":
    main()
