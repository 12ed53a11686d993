"""./dev bench-diagnosis-load: a cluster master diagnosing a 1 024-rank job.

Issue 34's load target: a master sonde stays within one core and bounded
memory while a job of 1 024 ranks reports a step a second of about 40
operations per rank (the `ops` table, docs/ingest.md), and no plugin hook call
takes over 25 ms. The What-if analysis (the bottleneck plugin) replays a window
of those operations inside its timer hook, so this is where that holds or not.

One release `sonde --role master` with the bundled plugins, export off, takes
`otlp-loadgen --ops-ranks 1024` (tools/otlp-loadgen/src/ops.rs: dp 32 × pp 4 ×
tp 8, GPipe over 4 micro-batches, each operation a span with `sonde.table =
"ops"` as the Python client's `sonde.ops` sends it, 8 ranks to a node, each
node's ranks in one request a second) for `--seconds` (default 120). Halfway
through, one rank's forward and backward become 2× longer (`--slow-rank`).

Reported, as a table and one JSON line:
- the master's CPU seconds over the wall time of the measured window (from a
  quarter of the run, after the warm-up, to its end): its share of one core;
- its RSS at 25, 50, 75 and 100 % of the run, and every `--rss-every`
  seconds: its range in each half after the warm-up and its slope over the
  second half (bounded: flat);
- the plugins' state writes (`GET /api/status` `plugin_state`): group
  commits, the longest, and what still waits for the disk;
- per plugin, from `GET /api/plugins`: calls, the longest hook call on the
  wall and in CPU time of the plugin's thread (what the call deadline counts;
  on a busy machine the wall also counts waiting for a core), p99 (its
  histogram bucket's upper bound, at most the longest), timeouts, traps,
  peak memory;
- the operations the generator sent and the master's OTLP receiver took
  (`GET /api/ingest`), and those the receiver skipped;
- the What-if finding of `GET /api/jobs/{job}` at the end: does it name the
  slow rank?

    python3 scripts/bench_diagnosis_load.py [--seconds 120] [--ranks 1024] [--slow-rank 77]

The host's CPU-time clock is the process's own, so a busy machine slows the
run but does not inflate the figure; the load average is printed beside it.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

JOB = "load-1024"
CORE_TARGET = 1.0
CALL_TARGET_US = 25_000


def plugin_stats(api):
    """{plugin: its self-metrics} from GET /api/plugins."""
    out = {}
    for p in h.get(api, "/api/plugins")["plugins"]:
        m = p.get("metrics") or {}
        out[p["name"]] = {
            "state": p.get("state"),
            "calls": m.get("calls", 0),
            "call_us_max": m.get("call_us_max", 0.0),
            "call_cpu_us_max": m.get("call_cpu_us_max", 0.0),
            "call_us_p99": m.get("call_us_p99", 0.0),
            "call_us_mean": m.get("call_us_mean", 0.0),
            "timeouts": m.get("timeouts", 0),
            "traps": m.get("traps", 0),
            "errors": m.get("errors", 0),
            "dropped": m.get("dropped", 0),
            "memory_peak_bytes": m.get("memory_peak_bytes", 0),
            "longest_call": m.get("longest_call"),
        }
    return out


def whatif(api, job):
    """The job's latest What-if finding (a decision board entry), or None."""
    found = [f for f in h.get(api, f"/api/jobs/{job}")["findings"] if f.get("kind") == "what-if"]
    return max(found, key=lambda f: f["time_ns"]) if found else None


def run(a):
    work = tempfile.mkdtemp(prefix="sonde-bench-diagnosis-load-")
    log = open(os.path.join(work, "sonde.log"), "w")
    try:
        h.plugin_dirs(work)
        grpc, api = h.free_port(), f"127.0.0.1:{h.free_port()}"
        master = h.start_sonde(work, api, extra=["--role", "master"], stdout=log, settings=[
            f"ingest.otlp_grpc_listen=127.0.0.1:{grpc}", "ingest.otlp_http_listen=off"])
        h.wait_ready(api, master)
        if "bottleneck" not in plugin_stats(api):
            sys.exit("the bottleneck plugin is not loaded: build the bundled plugins with ./dev plugins")
        gen = subprocess.Popen(
            [h.LOADGEN, "--endpoint", f"http://127.0.0.1:{grpc}", "--ops-ranks", str(a.ranks),
             "--job", JOB, "--seconds", str(a.seconds), "--slow-rank", str(a.slow_rank),
             "--slow-after-s", str(a.seconds / 2), "--slow-factor", "2"],
            stdout=subprocess.PIPE, text=True)
        t0 = time.monotonic()
        rss, cpu_at, loads = {}, {}, []
        # RSS every --rss-every seconds: bounded means flat, not just four points.
        series, done = [], threading.Event()

        def sample_rss():
            while not done.wait(a.rss_every):
                series.append((time.monotonic() - t0, h.rss_mb(master.pid)))

        sampler = threading.Thread(target=sample_rss, daemon=True)
        sampler.start()

        def at(frac):
            time.sleep(max(0.0, t0 + a.seconds * frac - time.monotonic()))

        healthy = None
        for frac in (0.25, 0.5, 0.75):
            at(frac)
            rss[frac] = h.rss_mb(master.pid)
            cpu_at[frac] = (time.monotonic(), h.cpu_seconds(master.pid))
            loads.append(os.getloadavg()[0])
            if frac == 0.5:
                # The slow rank's first step starts now: what the healthy steps were diagnosed as.
                healthy = whatif(api, JOB)
            print(f"  {frac:.0%}: RSS {rss[frac]:.0f} MB, load {loads[-1]:.1f}", flush=True)
        out, _ = gen.communicate()
        done.set()
        sent = json.loads(out.strip().splitlines()[-1])
        t_end, cpu_end = time.monotonic(), h.cpu_seconds(master.pid)
        rss[1.0] = h.rss_mb(master.pid)
        loads.append(os.getloadavg()[0])
        # The last steps are judged lag_ms (3 s) after they end, then the next timer replays them.
        time.sleep(6)
        plugins = plugin_stats(api)
        ingest = h.get(api, "/api/ingest")
        plugin_state = h.get(api, "/api/status").get("plugin_state")
        finding = whatif(api, JOB)
        hwm = h.rss_mb(master.pid, "VmHWM")
        h.stop(master)
    finally:
        log.close()
        if a.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    w0, c0 = cpu_at[0.25]
    otlp = ingest.get("otlp", ingest)
    about = (finding or {}).get("finding") or {}
    named = about.get("about") == "rank" and about.get("id") == str(a.slow_rank)
    return {
        "ranks": a.ranks,
        "seconds": a.seconds,
        "ops_per_rank_step": sent["ops_sent"] / max(sent["steps"] * a.ranks, 1),
        "ops_sent": sent["ops_sent"],
        "ops_ok": sent["ops_ok"],
        "requests_failed": sent["requests_failed"],
        "requests_refused": sent["requests_refused"],
        "receiver_rows": otlp.get("rows"),
        "receiver_skipped_rows": otlp.get("skipped_rows"),
        "receiver_refused_rows": otlp.get("refused_rows"),
        "master_core_share": (cpu_end - c0) / (t_end - w0),
        "master_rss_mb": {f"{int(k * 100)}%": round(v, 1) for k, v in sorted(rss.items())},
        "master_rss_peak_mb": round(hwm, 1),
        "master_rss_series": [[round(t), round(v, 1)] for t, v in series],
        "master_rss_halves": halves(series, a.seconds),
        "plugin_state": plugin_state,
        "load_average": [round(x, 1) for x in loads],
        "plugins": plugins,
        "slow_rank": a.slow_rank,
        "slow_from_step": sent["slow_from_step"],
        "whatif_healthy": (healthy or {}).get("reason"),
        "whatif": (finding or {}).get("reason"),
        "whatif_about": f"{about.get('about')} {about.get('id')}" if about else None,
        "whatif_evidence": (finding or {}).get("body"),
        "whatif_names_slow_rank": named,
    }


def halves(series, seconds):
    """The RSS's range in each half of the run after the first quarter (the
    warm-up), and its slope over the second half in MB a minute."""
    first = [v for t, v in series if seconds / 4 <= t < seconds * 5 / 8]
    second = [(t, v) for t, v in series if t >= seconds * 5 / 8]
    if len(first) < 2 or len(second) < 2:
        return None
    ts, vs = [t for t, _ in second], [v for _, v in second]
    mt, mv = sum(ts) / len(ts), sum(vs) / len(vs)
    slope = sum((t - mt) * (v - mv) for t, v in second) / max(sum((t - mt) ** 2 for t in ts), 1e-9)
    return {"first_mb": [min(first), max(first)], "second_mb": [min(vs), max(vs)],
            "second_slope_mb_per_min": round(slope * 60, 3)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--slow-rank", type=int, default=77)
    ap.add_argument("--rss-every", type=float, default=10, help="seconds between RSS readings")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory (sonde.log)")
    a = ap.parse_args()
    h.need_release_build(h.LOADGEN, recipe="./dev bench-diagnosis-load")
    r = run(a)
    print(f"\n{r['ranks']} ranks × 1 step/s × {r['ops_per_rank_step']:.1f} ops, {r['seconds']:.0f} s, "
          f"load average {'/'.join(map(str, r['load_average']))}")
    print(f"master: {r['master_core_share']:.3f} of a core (target ≤ {CORE_TARGET}); RSS "
          + ", ".join(f"{k} {v:.0f} MB" for k, v in r["master_rss_mb"].items()) + f"; peak {r['master_rss_peak_mb']:.0f} MB")
    if hv := r["master_rss_halves"]:
        print(f"master RSS after the warm-up: {hv['first_mb'][0]:.0f}–{hv['first_mb'][1]:.0f} MB in the first half, "
              f"{hv['second_mb'][0]:.0f}–{hv['second_mb'][1]:.0f} MB in the second, "
              f"slope over the second {hv['second_slope_mb_per_min']:+.2f} MB a minute ({len(r['master_rss_series'])} readings)")
    if ps := r["plugin_state"]:
        print(f"plugins' state writes: {ps['commits']} group commits, longest {ps['longest_commit_ms']:.1f} ms; "
              f"{ps['changes']} changes waiting at the end")
    print(f"ops: {r['ops_sent']} sent, {r['ops_ok']} taken by the receiver ({r['receiver_skipped_rows']} rows skipped, "
          f"{r['receiver_refused_rows']} refused; {r['requests_failed']} requests failed or dropped)")
    print(f"\n{'plugin':12} {'calls':>7} {'max ms':>8} {'CPU max ms':>10} {'p99 ≤ ms':>9} {'mean ms':>8} {'timeouts':>8} {'traps':>6} {'mem peak MB':>12}")
    for name, p in sorted(r["plugins"].items()):
        flag = "  over 25 ms" if max(p["call_us_max"], p["call_cpu_us_max"]) > CALL_TARGET_US else ""
        print(f"{name:12} {p['calls']:>7} {p['call_us_max'] / 1e3:>8.1f} {p['call_cpu_us_max'] / 1e3:>10.1f} "
              f"{min(p['call_us_p99'], p['call_us_max']) / 1e3:>9.1f} "
              f"{p['call_us_mean'] / 1e3:>8.2f} {p['timeouts']:>8} {p['traps']:>6} {p['memory_peak_bytes'] / 2**20:>12.1f}{flag}")
    for name, p in sorted(r["plugins"].items()):
        if (lc := p.get("longest_call")) and lc["wall_us"] > CALL_TARGET_US:
            queued = lc.get("queued_us")
            waits = f", {queued / 1e3:.1f} ms waiting for a core" if queued is not None else ""
            print(f"{name}: its longest call was {lc['hook']}: {lc['wall_us'] / 1e3:.1f} ms on the wall, "
                  f"{lc['cpu_us'] / 1e3:.1f} ms of CPU, {lc['host_io_us'] / 1e3:.1f} ms in the host's state store and sinks"
                  f"{waits}")
    print(f"\nWhat-if before the slow rank: {r['whatif_healthy']!r}")
    print(f"What-if at the end: {r['whatif']!r} (about {r['whatif_about']}); names the slow rank {r['slow_rank']}: "
          f"{'yes' if r['whatif_names_slow_rank'] else 'NO'}")
    print(json.dumps(r))


if __name__ == "__main__":
    main()
