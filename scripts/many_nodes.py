#!/usr/bin/env python3
"""Many nodes: 8 sonde agents on loopback, directly to rotel and through one sonde gateway.

Every agent runs the bundled plugins (sysmetrics, determined) at 100 ms and
exports over OTLP/gRPC. rotel, with `--debug-log metrics` at detailed
verbosity, logs every data point it receives; this script counts them, so
every point is counted end to end:

1. direct: the agents export to rotel for SECONDS; then they stop (a clean
   stop flushes). Points the agents counted as exported must equal the points
   rotel received.
2. gateway: the agents export to a sonde gateway (`ingest.forward = true`),
   which forwards every request unchanged to rotel. After SECONDS of steady
   state the gateway is killed (SIGKILL) for OUTAGE seconds and started again
   on the same ports. During the outage the agents must keep sampling, and
   their memory must stay bounded (their export queues are bounded); every
   point they could not deliver is counted by them as dropped or failed.
   After RECOVER seconds everything stops and the books must balance:
     agents exported = gateway accepted (before + after the outage), and
     gateway forwarded = rotel received; the points the killed gateway had
     accepted but not yet forwarded are the difference, reported exactly.
3. spool: the same with the disk spool on in the agents and the gateway
   (`export.spool_max_bytes`, SPOOL_MB). The gateway answers an agent only
   once the request is on disk, and sends from the spool; the agents hold
   what the dead gateway cannot take in theirs. After the gateway's restart
   (it sends what it had spooled first) and once every spool is empty, the
   books must balance with nothing lost: agents exported = distinct points
   rotel received (= all it received unless a request answered just as its
   sender was killed was sent again: reported), and no agent or gateway
   counted a point dropped or failed.

Usage: scripts/many_nodes.py [--agents 8] [--seconds 20] [--outage 60] [--recover 20]
                             [--spool-mb 256] [--phases direct,gateway,spool]
Needs the release sonde and bundled plugins (`./dev many-nodes` builds them).
Prints a table; exits 1 if a book does not balance.
"""

import argparse
import os
import re
import shutil
import signal
import sys
import tempfile
import time

from harness import SONDE, free_port, get, plugin_dirs, rss_mb, start_rotel, start_sonde, wait_ready

# rotel's detailed debug log prints every data point under a "<Kind>DataPoints #n" line.
RECEIVED = re.compile(r"^\w*DataPoints #\d+", re.M)
ANSI = re.compile(r"\x1b\[[0-9;]*m")


class Rotel:
    def __init__(self, workdir):
        self.log = os.path.join(workdir, "rotel.log")
        self.p, self.port = start_rotel(extra=["--debug-log", "metrics", "--debug-log-verbosity", "detailed"],
                                        stdout=open(self.log, "w"))

    def received(self):
        with open(self.log, errors="replace") as f:
            return len(RECEIVED.findall(f.read()))

    def unique(self):
        """Distinct data points received: a request sent twice (at-least-once
        delivery, e.g. answered by rotel just as its sender was killed) counts once.
        A point is its resource (host.name, service.instance.id ...), its metric
        and everything rotel printed about it (attributes, timestamp, value)."""
        seen = set()
        ctx = {"ResourceMetrics": "", "ScopeMetrics": "", "Metric": ""}
        section, point = "ResourceMetrics", None
        with open(self.log, errors="replace") as f:
            for line in f:
                t = ANSI.sub("", line).strip()
                head = t.split(" #")[0]
                if RECEIVED.match(t) or (head in ctx and " #" in t):
                    if point is not None:
                        seen.add(hash((*ctx.values(), point)))
                    point = head if RECEIVED.match(t) else None
                    if head in ctx:
                        section = head
                        # A new section starts its own context and those below it.
                        keys = list(ctx)
                        for k in keys[keys.index(head):]:
                            ctx[k] = ""
                elif not t or t[0].isdigit() or " INFO " in t or " WARN " in t:
                    continue  # rotel's own log lines, with their times
                elif point is not None:
                    point += "\n" + t
                else:
                    ctx[section] += "\n" + t
        if point is not None:
            seen.add(hash((*ctx.values(), point)))
        return len(seen)

    def stop(self):
        self.p.kill()
        self.p.wait()


class Sonde:
    """One sonde process; `name` also becomes its host.name."""

    def __init__(self, workdir, name, endpoint, extra=(), api_port=None, grpc_port=None, plugins=True):
        self.dir = os.path.join(workdir, name)
        self.name, self.endpoint, self.extra = name, endpoint, list(extra)
        self.api = f"127.0.0.1:{api_port or free_port()}"
        self.grpc_port = grpc_port
        plugin_dirs(self.dir, bundled=plugins)
        self.start()

    def start(self):
        grpc = f"127.0.0.1:{self.grpc_port}" if self.grpc_port else "off"
        self.p = start_sonde(self.dir, self.api, self.endpoint, data_dir=os.path.join(self.dir, "data"),
                             settings=[f"host.name={self.name}", f"ingest.otlp_grpc_listen={grpc}",
                                       "ingest.otlp_http_listen=off", "export.interval_ms=1000"],
                             extra=self.extra, stdout=open(os.path.join(self.dir, "out.log"), "a"))
        wait_ready(self.api, self.p, f"{self.name} did not become ready; see {self.dir}/out.log")

    def status(self):
        return get(self.api, "/api/status")

    def export(self):
        return self.status()["export"]["stats"]

    def ticks(self):
        return self.status()["sampler"]["period"]["ticks"]

    def rss(self):
        return rss_mb(self.p.pid)

    def stop(self):
        """A clean stop: the last export is flushed; returns the final export counters."""
        stats = None
        self.p.send_signal(signal.SIGTERM)
        self.p.wait(30)
        # The counters of a stopped process come from its shutdown log line.
        with open(os.path.join(self.dir, "out.log"), errors="replace") as f:
            text = ANSI.sub("", f.read())
        for m in re.finditer(r"export pipeline stopped.*?exported=(\d+).*?dropped=(\d+).*?failed=(\d+)", text):
            stats = {"points_exported": int(m.group(1)), "points_dropped": int(m.group(2)),
                     "points_failed": int(m.group(3))}
        return stats

    def kill(self):
        self.p.kill()
        self.p.wait()

    def spool_read_back(self):
        """Points its last start found in its spool (from its "export spool on" line)."""
        with open(os.path.join(self.dir, "out.log"), errors="replace") as f:
            found = re.findall(r"export spool on.*?points=(\d+)", ANSI.sub("", f.read()))
        return int(found[-1]) if found else None


def totals(stats, key):
    return sum(s[key] for s in stats)


def outage(gateway, agents, seconds):
    """SIGKILLs the gateway for `seconds` and starts it again, watching the agents.
    Returns the agents' RSS before and at its peak, seconds of samples taken, and
    their export stats at the outage's end."""
    rss0 = [s.rss() for s in agents]
    ticks0 = [s.ticks() for s in agents]
    gateway.kill()
    t_kill = time.monotonic()
    peak = list(rss0)
    while time.monotonic() - t_kill < seconds:
        time.sleep(min(5.0, seconds))
        peak = [max(p, s.rss()) for p, s in zip(peak, agents)]
    ticks1 = [s.ticks() for s in agents]
    stats = [s.export() for s in agents]
    gateway.start()
    sampled = [(t1 - t0) * 0.1 for t0, t1 in zip(ticks0, ticks1)]
    return rss0, peak, sampled, stats


def wait_drained(nodes, limit):
    """Waits until no node has anything spooled; returns the seconds it took (None: it did not)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        if all(n.export().get("spooled_requests", 0) == 0 for n in nodes):
            return time.monotonic() - t0
        time.sleep(0.5)
    return None


def spool_run(work, a):
    """Phase 3: agents and gateway with the disk spool on; the gateway SIGKILLed for OUTAGE s."""
    spool = ["--set", f"export.spool_max_bytes={a.spool_mb << 20}"]
    rotel = Rotel(work)
    gw_grpc, gw_api = free_port(), free_port()
    gateway = Sonde(work, "spool-gateway", f"http://127.0.0.1:{rotel.port}", plugins=False,
                    extra=["--set", "ingest.forward=true", "--set", "export.self_metrics_interval_ms=0", *spool],
                    api_port=gw_api, grpc_port=gw_grpc)
    agents = [Sonde(work, f"spool-agent-{i}", f"http://127.0.0.1:{gw_grpc}", extra=spool) for i in range(a.agents)]
    time.sleep(a.seconds)
    gw_before = gateway.export()
    rss0, peak, sampled, held = outage(gateway, agents, a.outage)
    gw_replayed = gateway.spool_read_back()
    time.sleep(a.recover)
    # Everything the agents hold reaches the gateway, then everything it holds reaches rotel.
    drain_agents = wait_drained(agents, 120)
    final = [s.stop() for s in agents]
    drain_gw = wait_drained([gateway], 120)
    gw_final = gateway.stop()
    time.sleep(1)
    rx, distinct = rotel.received(), rotel.unique()
    rotel.stop()
    if any(f is None for f in final) or gw_final is None:
        sys.exit(f"a shutdown line with export counters is missing; see {work}")
    a_exp, a_drop, a_fail = (totals(final, k) for k in ("points_exported", "points_dropped", "points_failed"))
    print(f"spool:   {a.agents} agents exported {a_exp} points (dropped {a_drop}, failed {a_fail}); rotel received {rx} "
          f"({distinct} distinct: {rx - distinct} received twice); lost {a_exp - distinct}")
    print(f"         during the {a.outage:.0f} s outage the agents spooled {totals(held, 'queued_points')} points "
          f"({sum(h.get('spooled_bytes', 0) for h in held) / 1e6:.1f} MB on disk, "
          f"max {max(h.get('spooled_bytes', 0) for h in held) / 1e6:.2f} MB per agent)")
    print(f"         the gateway had forwarded {gw_before['points_exported']} before the kill and "
          f"{gw_before['queued_points']} waited in its spool; its restart read back {gw_replayed} points and it "
          f"forwarded {gw_final['points_exported']} after it (dropped {gw_final['points_dropped']}, failed {gw_final['points_failed']})")
    print(f"         spools drained {drain_agents and round(drain_agents, 1)} s (agents) and "
          f"{drain_gw and round(drain_gw, 1)} s (gateway) after the {a.recover:.0f} s recovery")
    print(f"         agents kept sampling through the outage: {min(sampled):.1f}-{max(sampled):.1f} s of samples in {a.outage:.0f} s")
    print(f"         agent RSS before the outage {min(rss0):.1f}-{max(rss0):.1f} MB, peak during it {min(peak):.1f}-{max(peak):.1f} MB")
    # At-least-once: a request answered just as its sender was killed is sent again.
    ok = a_exp == distinct and a_drop == 0 and a_fail == 0
    ok &= gw_final["points_dropped"] == 0 and gw_final["points_failed"] == 0
    ok &= drain_agents is not None and drain_gw is not None
    ok &= min(sampled) >= a.outage * 0.9
    ok &= max(p - r for p, r in zip(peak, rss0)) < 64
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--agents", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--outage", type=float, default=60)
    ap.add_argument("--recover", type=float, default=20)
    ap.add_argument("--spool-mb", type=int, default=256, help="export.spool_max_bytes of each node in phase 3")
    ap.add_argument("--phases", default="direct,gateway,spool")
    a = ap.parse_args()
    phases = set(a.phases.split(","))
    if not os.path.exists(SONDE):
        sys.exit("build first: ./dev many-nodes")
    work = tempfile.mkdtemp(prefix="sonde-many-")
    ok = True
    try:
        # 1. direct
        if "direct" in phases:
            rotel = Rotel(work)
            agents = [Sonde(work, f"direct-{i}", f"http://127.0.0.1:{rotel.port}") for i in range(a.agents)]
            time.sleep(a.seconds)
            final = [s.stop() for s in agents]
            time.sleep(1)
            direct_rx, direct_distinct = rotel.received(), rotel.unique()
            rotel.stop()
            if any(f is None for f in final):
                sys.exit(f"an agent's shutdown line with its export counters is missing; see {work}")
            d_exp, d_drop, d_fail = (totals(final, k) for k in ("points_exported", "points_dropped", "points_failed"))
            print(f"direct:  {a.agents} agents exported {d_exp} points (dropped {d_drop}, failed {d_fail}); rotel received {direct_rx} ({direct_distinct} distinct)")
            ok &= d_exp == direct_rx == direct_distinct and d_drop == 0 and d_fail == 0

        # 2. through a gateway, with an outage
        if "gateway" in phases:
            rotel = Rotel(work)
            gw_grpc, gw_api = free_port(), free_port()
            # No plugins and no self-metrics: everything rotel receives came through it.
            gateway = Sonde(work, "gateway", f"http://127.0.0.1:{rotel.port}", plugins=False,
                            extra=["--set", "ingest.forward=true", "--set", "export.self_metrics_interval_ms=0"],
                            api_port=gw_api, grpc_port=gw_grpc)
            agents = [Sonde(work, f"agent-{i}", f"http://127.0.0.1:{gw_grpc}") for i in range(a.agents)]
            time.sleep(a.seconds)
            gw_before = gateway.status()
            rss0, peak, sampled, outage_stats = outage(gateway, agents, a.outage)
            time.sleep(a.recover)
            final = [s.stop() for s in agents]
            time.sleep(2)
            gw_final_status = gateway.status()
            gw_final = gateway.stop()
            time.sleep(1)
            gw_rx = rotel.received()
            rotel.stop()
            a_exp, a_drop, a_fail = (totals(final, k) for k in ("points_exported", "points_dropped", "points_failed"))
            undeliverable = totals(outage_stats, "points_failed") + totals(outage_stats, "points_dropped")
            lost_in_gateway = a_exp - gw_rx
            print(f"gateway: {a.agents} agents delivered {a_exp} points to the gateway and counted {a_drop} dropped, "
                  f"{a_fail} failed ({undeliverable} of them already during the {a.outage:.0f} s outage)")
            print(f"         rotel received {gw_rx} through the gateway; the gateway forwarded "
                  f"{gw_before['export']['stats']['points_exported']} before the kill (last status) and "
                  f"{gw_final['points_exported'] if gw_final else '?'} after its restart (and counted "
                  f"{gw_final['points_dropped'] if gw_final else '?'} dropped, "
                  f"{gw_final['points_failed'] if gw_final else '?'} failed after it)")
            gw_dropped = gw_final["points_dropped"] if gw_final else 0
            print(f"         acknowledged by the gateway but not delivered: {lost_in_gateway} = {gw_dropped} dropped by the "
                  f"restarted gateway (its in-memory queue full when the agents' backlogs arrived) + "
                  f"{lost_in_gateway - gw_dropped} lost when it was killed "
                  f"(its queue held {gw_before['export']['stats'].get('buffered_points', '?')} points at its last status)")
            print(f"         agents kept sampling through the outage: {min(sampled):.1f}-{max(sampled):.1f} s of samples in {a.outage:.0f} s")
            print(f"         agent RSS before the outage {min(rss0):.1f}-{max(rss0):.1f} MB, peak during it {min(peak):.1f}-{max(peak):.1f} MB")
            ok &= lost_in_gateway >= 0
            ok &= min(sampled) >= a.outage * 0.9
            ok &= max(p - r for p, r in zip(peak, rss0)) < 64
            ok &= gw_final_status is not None
        # 3. the same with the disk spool on
        if "spool" in phases:
            ok &= spool_run(work, a)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("books balance" if ok else "A BOOK DOES NOT BALANCE")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
