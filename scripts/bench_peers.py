#!/usr/bin/env python3
"""Peer benchmark, in one run: sonde and the samplers users run today, side by side.

All of them run at the same time on the same machine, each taking the same
readings (CPU, memory, network, disk) every 100 ms:

- sonde (release build, bundled plugins, OTLP export to a rotel collector
  whose exporter is a blackhole), samples counted by its own sampler;
- collectd (`Interval 0.1`; cpu, memory, interface, disk; values sent out
  with the network plugin over UDP to a local socket, as a collectd agent
  sends to its server), samples = elapsed time / interval;
- prometheus-node-exporter with its default collectors, scraped at 10 Hz by
  this script (the scraper's own CPU is not counted), samples = scrapes served;
- prometheus-node-exporter restricted to the same four collectors sonde reads;
- a Python psutil sampler doing the same reads (scripts/harness.py's PSUTIL_PEER).

For each it prints CPU per sample (user+sys of the whole process divided by
samples taken), RSS at the end, and the ratio sonde/peer. Medians of ROUNDS
rounds; the machine is shared and noisy, so read the ratios.

Usage: scripts/bench_peers.py [--seconds 30] [--rounds 3]
Needs: target/release/sonde and the bundled plugins (`./dev bench-peers` builds
them and installs collectd, prometheus-node-exporter and psutil first).
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import socket

from harness import (PSUTIL_PEER, cold_start, cpu_seconds, free_port, get, need_release_build, rss_mb, start_rotel,
                     start_sonde_timed, stop)

INTERVAL = 0.1

COLLECTD_CONF = """
Hostname "bench"
FQDNLookup false
BaseDir "{dir}"
PIDFile "{dir}/collectd.pid"
PluginDir "/usr/lib/collectd"
TypesDB "/usr/share/collectd/types.db"
Interval {interval}
LoadPlugin cpu
LoadPlugin memory
LoadPlugin interface
LoadPlugin disk
LoadPlugin network
<Plugin network>
  Server "127.0.0.1" "{port}"
</Plugin>
"""


class Scraper(threading.Thread):
    """Scrapes a node exporter at 10 Hz; counts the scrapes it served."""

    def __init__(self, url):
        super().__init__(daemon=True)
        self.url, self.done, self.stop_flag = url, 0, threading.Event()

    def run(self):
        next_t = time.monotonic()
        while not self.stop_flag.is_set():
            try:
                with urllib.request.urlopen(self.url, timeout=2) as r:
                    r.read()
                self.done += 1
            except OSError:
                pass
            next_t += INTERVAL
            time.sleep(max(0.0, next_t - time.monotonic()))


def wait_http(url, seconds=10):
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        try:
            urllib.request.urlopen(url, timeout=1).read()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"{url} did not answer")


def start_node_exporter(port, only_four):
    args = ["prometheus-node-exporter", f"--web.listen-address=127.0.0.1:{port}"]
    if only_four:
        args += ["--collector.disable-defaults", "--collector.cpu", "--collector.meminfo",
                 "--collector.netdev", "--collector.diskstats"]
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_http(f"http://127.0.0.1:{port}/metrics")
    return p


def one_round(seconds, endpoint, cache):
    data = tempfile.mkdtemp(prefix="sonde-peers-")
    procs = []
    try:
        shutil.copytree(cache, os.path.join(data, "cache"))
        api = f"127.0.0.1:{free_port()}"
        sonde, _ = start_sonde_timed(data, api, endpoint)
        procs.append(sonde)
        # collectd sends its values to this socket, as an agent sends to its server.
        sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sink.bind(("127.0.0.1", 0))
        cdir = os.path.join(data, "collectd")
        os.makedirs(cdir)
        with open(os.path.join(cdir, "collectd.conf"), "w") as f:
            f.write(COLLECTD_CONF.format(dir=cdir, interval=INTERVAL, port=sink.getsockname()[1]))
        collectd = subprocess.Popen(["collectd", "-f", "-C", os.path.join(cdir, "collectd.conf")],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(collectd)
        nx_all_port, nx_four_port = free_port(), free_port()
        nx_all = start_node_exporter(nx_all_port, False)
        nx_four = start_node_exporter(nx_four_port, True)
        procs += [nx_all, nx_four]
        time.sleep(2)  # warm-up: plugins loaded, first export done, collectd's first reads
        if collectd.poll() is not None:
            sys.exit(f"collectd exited with {collectd.returncode}; run it by hand: collectd -f -C {cdir}/collectd.conf")
        scrapers = [Scraper(f"http://127.0.0.1:{p}/metrics") for p in (nx_all_port, nx_four_port)]
        psutil_peer = subprocess.Popen([sys.executable, "-c", PSUTIL_PEER, str(seconds)],
                                       stdout=subprocess.PIPE, text=True)
        procs.append(psutil_peer)
        watched = {"sonde": sonde, "collectd": collectd, "node-exporter (defaults)": nx_all,
                   "node-exporter (cpu/meminfo/netdev/diskstats)": nx_four, "psutil sampler": psutil_peer}
        c0 = {k: cpu_seconds(p.pid) for k, p in watched.items()}
        ticks0 = get(api, "/api/status")["sampler"]["period"]["ticks"]
        for s in scrapers:
            s.start()
        t0 = time.monotonic()
        time.sleep(seconds)
        elapsed = time.monotonic() - t0
        for s in scrapers:
            s.stop_flag.set()
        ticks1 = get(api, "/api/status")["sampler"]["period"]["ticks"]
        c1 = {k: cpu_seconds(p.pid) for k, p in watched.items()}
        rss = {k: rss_mb(p.pid) for k, p in watched.items()}
        samples = {
            "sonde": ticks1 - ticks0,
            "collectd": elapsed / INTERVAL,
            "node-exporter (defaults)": scrapers[0].done,
            "node-exporter (cpu/meminfo/netdev/diskstats)": scrapers[1].done,
            "psutil sampler": int(psutil_peer.communicate()[0].strip() or 1),
        }
        sink.close()
        return {k: ((c1[k] - c0[k]) * 1000 / max(1, samples[k]), rss[k], samples[k]) for k in watched}
    finally:
        for p in procs:
            if p.poll() is None:
                stop(p)
        shutil.rmtree(data, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    need_release_build(recipe="./dev bench-peers")
    for tool in ("collectd", "prometheus-node-exporter"):
        if not shutil.which(tool):
            sys.exit(f"{tool} is missing: ./dev bench-peers installs it (apt-get install collectd-core prometheus-node-exporter)")
    col, grpc = start_rotel(settle=0)
    endpoint = f"http://127.0.0.1:{grpc}"
    try:
        time.sleep(1)
        cache = os.path.join(tempfile.mkdtemp(prefix="sonde-cache-"), "cache")
        cold_start(endpoint, keep_cache=cache)  # compile the plugins once; the rounds start warm
        rounds = []
        for i in range(a.rounds):
            rounds.append(one_round(a.seconds, endpoint, cache))
            print(f"round {i + 1}/{a.rounds}: " + ", ".join(f"{k} {v[0]:.3f} ms" for k, v in rounds[-1].items()),
                  flush=True)
    finally:
        col.kill()
    names = list(rounds[0])
    cpu = {k: statistics.median(r[k][0] for r in rounds) for k in names}
    rss = {k: statistics.median(r[k][1] for r in rounds) for k in names}
    machine = f"{os.cpu_count()} cores, {os.uname().machine}, {os.uname().release}"
    print(f"\nall side by side, {a.rounds} rounds of {a.seconds:.0f} s, medians ({time.strftime('%Y-%m-%d')}, {machine})\n")
    print("| sampler (every 100 ms) | CPU per sample | RSS | sonde/peer CPU | sonde/peer RSS |")
    print("|---|---|---|---|---|")
    for k in names:
        ratio = "" if k == "sonde" else f"{cpu['sonde'] / cpu[k]:.2f} | {rss['sonde'] / rss[k]:.2f}"
        print(f"| {k} | {cpu[k]:.3f} ms | {rss[k]:.1f} MB | {ratio or '— | —'} |")


if __name__ == "__main__":
    main()
