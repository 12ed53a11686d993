#!/usr/bin/env python3
"""One idle release sonde (bundled plugins, export off, nothing reading its API) over --minutes:
its RSS and where it lives, read from /proc once a minute, and the live store's size at the end.

Why a long run: the dashboard's live store fills for an hour, and the host drops its unused code
pages every 5 minutes (host/src/footprint.rs), so a figure taken 30 s after start says neither
what the store costs once full nor what the code settles at. The API is read only once, at the
end, so that its code is not faulted in along the way.

Usage: scripts/rss_over_time.py [--minutes 65]
Needs the release build and the plugins (`./dev rss-over-time` builds them).
"""

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=int, default=65)
    a = ap.parse_args()
    h.need_release_build(recipe="./dev rss-over-time")
    work = tempfile.mkdtemp(prefix="sonde-rss-over-time-")
    cache = os.path.join(work, "cache-warm")
    h.cold_start(None, keep_cache=cache)
    run = os.path.join(work, "run")
    os.makedirs(run)
    api = f"127.0.0.1:{h.free_port()}"
    p = h.start_ready(run, api, cache=cache)
    t0, c0 = time.monotonic(), h.cpu_seconds(p.pid)
    seen = []
    try:
        for m in range(a.minutes + 1):
            while time.monotonic() - t0 < m * 60 + 30:
                time.sleep(1)
            rss = h.rss_mb(p.pid)
            seen.append((m, rss))
            top = ", ".join(f"{k} {v:.1f}" for k, v in list(h.memory_parts(p.pid).items())[:5])
            print(f"{m * 60 + 30:5d} s  RSS {rss:5.1f} MB  ({top})", flush=True)
        store = h.get(api, "/api/series")["store"]
        cpu = h.cpu_seconds(p.pid) - c0
    finally:
        h.stop(p)
        shutil.rmtree(work, ignore_errors=True)
    late = [r for m, r in seen if m >= a.minutes - 15]
    print(f"\n{time.strftime('%Y-%m-%d %H:%M')}: RSS {seen[0][1]:.1f} MB 30 s after start; "
          f"{min(late):.1f}-{max(late):.1f} MB over the last 15 minutes; at most {max(r for _, r in seen):.1f} MB")
    print(f"live store at the end: {store['series']} series, {store['points']} raw points, "
          f"{store['buckets']} buckets, {store['bytes'] / 1e6:.1f} MB; CPU {cpu * 1000 / (time.monotonic() - t0):.1f} ms a second")


if __name__ == "__main__":
    main()
