#!/usr/bin/env python3
"""Cold start of the plugins a sonde binary carries: the time from exec to
`GET /api/ready` answering 200 (ready means every plugin in the plugins
directory is loaded), for a sonde given no plugins directory.

  first start   an empty data directory: the binary writes its plugins into
                <data>/plugins and compiles every one (nothing cached)
  again         the same data directory started again: the plugins are
                current and their compiled forms come from the cache

Also prints the binary's size, and the RSS --rss-after seconds after ready
(default 30) of a sonde run both ways on the same warm data directory, in
turns, once each a round: given no plugins directory (it reads what it
carries to compare with the files), and given `--plugins-dir <data>/plugins`
(nothing carried is touched). Usage:

  python3 scripts/bench_cold_start.py [--sonde target/release/sonde] [--rounds 3] [--rss-after 30]

Python 3 standard library only. Export and the OTLP receivers are off, so
nothing but the API listens.
"""

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.request


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def start_until_ready(sonde: str, data: str, limit_s: float = 300, extra=(), rss_after: float = 0):
    """ms to ready; with rss_after, (ms, RSS in kB that many seconds after ready)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SONDE_", "OTEL_"))}
    t0 = time.monotonic()
    p = subprocess.Popen(
        [sonde, "--data-dir", data, "--sinks-dir", data, "--listen", f"127.0.0.1:{port}",
         "--set", 'ingest.otlp_grpc_listen="off"', "--set", 'ingest.otlp_http_listen="off"', *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        while time.monotonic() - t0 < limit_s:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/ready", timeout=1) as r:
                    if r.status == 200:
                        ms = (time.monotonic() - t0) * 1000
                        if not rss_after:
                            return ms
                        time.sleep(rss_after)
                        return ms, rss_kb(p.pid)
            except OSError:
                pass
            time.sleep(0.005)
        raise SystemExit(f"{sonde} was not ready within {limit_s} s")
    finally:
        p.terminate()
        p.wait()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sonde", default="target/release/sonde")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rss-after", type=float, default=30)
    a = ap.parse_args()
    first, again, rss_none, rss_given = [], [], [], []
    for _ in range(a.rounds):
        data = tempfile.mkdtemp(prefix="sonde-cold-")
        try:
            first.append(start_until_ready(a.sonde, data))
            plugins = len([f for f in os.listdir(os.path.join(data, "plugins")) if f.endswith(".wasm")])
            again.append(start_until_ready(a.sonde, data))
            # Both ways in every round, in turns, so that the machine's drift falls on both.
            given = ["--plugins-dir", os.path.join(data, "plugins")]
            ways = [([], rss_none), (given, rss_given)]
            for extra, into in ways if len(rss_none) % 2 == 0 else ways[::-1]:
                into.append(start_until_ready(a.sonde, data, extra=extra, rss_after=a.rss_after)[1])
        finally:
            shutil.rmtree(data, ignore_errors=True)
    print(f"binary: {os.path.getsize(a.sonde)} bytes ({a.sonde}), {plugins} plugins carried")
    print(f"first start (write + compile {plugins} plugins) to ready: median {statistics.median(first):.0f} ms "
          f"(rounds {', '.join(f'{x:.0f}' for x in first)})")
    print(f"again (compiled forms cached) to ready: median {statistics.median(again):.0f} ms "
          f"(rounds {', '.join(f'{x:.0f}' for x in again)})")
    mb = lambda v: f"median {statistics.median(v) / 1024:.1f} MB (rounds {', '.join(f'{x / 1024:.1f}' for x in v)})"
    print(f"RSS {a.rss_after:.0f} s after ready, given no plugins directory: {mb(rss_none)}")
    print(f"RSS {a.rss_after:.0f} s after ready, given --plugins-dir (the same files): {mb(rss_given)}")


if __name__ == "__main__":
    main()
