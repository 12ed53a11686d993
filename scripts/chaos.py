#!/usr/bin/env python3
"""./dev chaos: a master and three agents in network namespaces, a job on every node, and
faults one at a time; then every acknowledged timing, row and point is checked against what
arrived at the master.

    topology (created here, removed on exit, Ctrl-C and errors included):

    root ns ── bridge scbr0 10.231.0.1 ─┬─ veth ── ns sc-master 10.231.0.10  sonde --role master
                                        │                                     (data dir on a tmpfs)
                                        ├─ veth ── ns sc-n1 10.231.0.11      agent n1 (its wall clock
                                        │                                     under libfaketime) + job rank 0
                                        ├─ veth ── ns sc-n2 10.231.0.12      agent n2 + job rank 1
                                        └─ veth ── ns sc-n3 10.231.0.13      agent n3 ─► rotel (127.0.0.1)
                                                                              ─► master; job rank 2

Each agent has sysmetrics and a 64 MiB spool; its job posts one training step (three timed
phases of 2, 8 and 15 ms, batch index b) and one `mpi_samples` row every 100 ms to its agent's
`POST /api/ingest`, each body numbered (`sonde-producer`, `sonde-seq`), and posts a body not
answered 202 again, unchanged, so that the agent takes it once. The master has the mpi plugin
(it declares the table). The faults, in turn, each followed by a quiet spell:

    link cut of n2 (its veth down) and restored;  a throttled link (tc tbf) on n1;
    packet loss (iptables statistic) of 5 % on n1, then 20 % on n2;
    kill -9 of agent n2;  kill -9 of the master;  kill -9 of the master and every agent together;
    the master's disk full (its tmpfs filled), then freed;
    n1's clock jumped +30 s, then -30 s, then back;  the collector (rotel) in front of n3 killed.

At the end (jobs stopped, spools drained) it prints one table, per node and kind: sent,
acknowledged (202 from the agent), arrived (at the master), duplicated, lost, refused
(answers other than 202) and retried (steps posted again); then the time to mark a node lost
and back, the master's recovery times, and the master's dedup and durability counters.
Timings are checked per (rank, batch): a phase there twice or three times is a duplicate.
Rows (no natural key) are counted per job. Points (system.cpu.utilization, one series a node)
are compared sample time by sample time between the agent's own history and the master's.

    sudo python3 scripts/chaos.py [--sonde target/debug/sonde] [--fault-s 15] [--keep]

Needs root, `ip`, `tc`, `iptables`, libfaketime (`./dev chaos` installs what is missing), the
built plugins and rotel (`./dev setup`). Python standard library only.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

BRIDGE = "scbr0"
NET = "10.231.0"
NODES = {"master": 10, "n1": 11, "n2": 12, "n3": 13}
API_PORT = 7070
GRPC_PORT = 4317
ROTEL_PORT = 14317
API_TOKEN = "chaos-api-token"
CLUSTER_TOKEN = "chaos-cluster-token"
JOB = "chaos-train"
ROWS_JOB = "chaos-rows"
PHASES = (("dataloader", 2), ("forward", 8), ("backward", 15))
FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
MS = 1_000_000


def run(*cmd, check=True, quiet=False):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip() or r.stdout.strip()}")
    if not quiet and r.returncode != 0:
        print(f"  ({' '.join(cmd)}: {r.stderr.strip()})")
    return r


def ns_name(node):
    return f"sc-{node}"


def ip_of(node):
    return f"{NET}.{NODES[node]}"


def api_of(node):
    return f"{ip_of(node)}:{API_PORT}"


def get(node, path, timeout=5):
    req = urllib.request.Request(f"http://{api_of(node)}{path}", headers={"Authorization": f"Bearer {API_TOKEN}"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def try_get(node, path, timeout=2):
    try:
        return get(node, path, timeout)
    except Exception:
        return None


# ---------------------------------------------------------------- the job (runs inside a namespace)

def job_main(args):
    """One rank of the job: a step (three timings) and an `mpi_samples` row every period, posted
    to its agent until SIGTERM, up to 50 steps a body; a body not answered 202 is posted again
    unchanged, with its number, before any new one. Every post and its answer as a JSON line in
    args.log."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    out = open(args.log, "a", buffering=1)
    url = f"http://127.0.0.1:{API_PORT}/api/ingest"
    hdr = {"Authorization": f"Bearer {API_TOKEN}", "Content-Type": "application/json"}
    t0 = time.time_ns() - 3_600_000 * MS  # an hour back: clear of the agents' own samples
    pending, b = [], 0
    # Each body has a number (sonde-seq) under this process's name (sonde-producer); a body
    # not answered 202 is posted again as it was, with its number, so the agent takes it once.
    producer, seq, inflight = f"chaos-job-{args.rank}-{os.getpid()}", 0, None
    next_t = time.monotonic()
    while not stop.is_set():
        pending.append(b)
        b += 1
        if inflight is None:
            batches = pending[:50]
            del pending[:len(batches)]
            timings, rows = [], []
            for n in batches:
                start = t0 + n * 30 * MS
                rows.append({"thread": 0, "time_ns": start, "state": "work", "function": "MPI_Send",
                             "callsite": "main", "count": 1, "period_ns": MS})
                for name, ms in PHASES:
                    timings.append({"name": name, "start_ns": start, "end_ns": start + ms * MS, "batch_idx": n})
                    start += ms * MS
            body = {"origin": {"job": JOB, "rank": args.rank, "local_rank": 0, "role": "worker"},
                    "timings": timings, "mpi_samples": rows}
            seq += 1
            inflight = (seq, json.dumps(body).encode(), batches)
        n_seq, data, batches = inflight
        req = urllib.request.Request(url, data=data, headers={**hdr, "sonde-producer": producer,
                                                              "sonde-seq": str(n_seq)}, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=2) as r:
                code = r.status
        except urllib.error.HTTPError as e:
            code = e.code
        except Exception:
            code = 0
        out.write(json.dumps({"t": time.time(), "batches": batches, "code": code}) + "\n")
        if code == 202:
            inflight = None
        next_t += args.period
        time.sleep(max(0.0, next_t - time.monotonic()))
    out.close()


def job_account(path):
    """(sent, acknowledged, refused, retried, unanswered): the batches posted at least once,
    those answered 202, the posts answered otherwise (or not at all), the batches posted
    again, and the batches of a post that got no answer at all (the agent died or the
    connection broke after it may have taken them: posting them again can count them twice,
    the job-to-agent hop having no request identity)."""
    sent, acked, posted, unanswered = set(), set(), set(), set()
    refused = retried = 0
    for line in open(path):
        r = json.loads(line)
        for n in r["batches"]:
            if n in posted:
                retried += 1
            posted.add(n)
        sent.update(r["batches"])
        if r["code"] == 202:
            acked.update(r["batches"])
        else:
            refused += 1
            if r["code"] == 0:
                unanswered.update(r["batches"])
    return sent, acked, refused, retried, unanswered


# ---------------------------------------------------------------- the network

def teardown(work=None):
    for node in NODES:
        pids = run("ip", "netns", "pids", ns_name(node), check=False, quiet=True).stdout.split()
        for p in pids:
            try:
                os.kill(int(p), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        run("ip", "netns", "del", ns_name(node), check=False, quiet=True)
        run("ip", "link", "del", f"scv-{node}", check=False, quiet=True)
    run("ip", "link", "del", BRIDGE, check=False, quiet=True)
    if work:
        run("umount", os.path.join(work, "master-data"), check=False, quiet=True)


def setup_network():
    run("ip", "link", "add", BRIDGE, "type", "bridge")
    run("ip", "addr", "add", f"{NET}.1/24", "dev", BRIDGE)
    run("ip", "link", "set", BRIDGE, "up")
    for node in NODES:
        ns = ns_name(node)
        run("ip", "netns", "add", ns)
        run("ip", "link", "add", f"scv-{node}", "type", "veth", "peer", "name", f"scp-{node}")
        run("ip", "link", "set", f"scv-{node}", "master", BRIDGE)
        run("ip", "link", "set", f"scv-{node}", "up")
        run("ip", "link", "set", f"scp-{node}", "netns", ns)
        nx = ("ip", "netns", "exec", ns)
        run(*nx, "ip", "link", "set", f"scp-{node}", "name", "eth0")
        run(*nx, "ip", "addr", "add", f"{ip_of(node)}/24", "dev", "eth0")
        run(*nx, "ip", "link", "set", "eth0", "up")
        run(*nx, "ip", "link", "set", "lo", "up")
    # Bridged traffic must not meet the host's firewall (br_netfilter, if loaded).
    for k in ("net.bridge.bridge-nf-call-iptables", "net.bridge.bridge-nf-call-ip6tables"):
        run("sysctl", "-qw", f"{k}=0", check=False, quiet=True)


# ---------------------------------------------------------------- processes

class Cluster:
    def __init__(self, work, sonde, bundled, master_settings=()):
        self.work, self.sonde, self.bundled = work, sonde, bundled
        self.master_settings = list(master_settings)
        self.procs = {}
        self.faketime_file = os.path.join(work, "n1.faketime")
        with open(self.faketime_file, "w") as f:
            f.write("+0\n")

    def popen(self, node, name, args, env=None):
        log = open(os.path.join(self.work, f"{name}.log"), "a")
        full_env = dict(os.environ, **(env or {}))
        p = subprocess.Popen(["ip", "netns", "exec", ns_name(node), *args], stdout=log, stderr=subprocess.STDOUT,
                             env=full_env)
        self.procs[name] = p
        return p

    def sonde_args(self, node, plugins):
        d = os.path.join(self.work, node)
        data = os.path.join(self.work, "master-data") if node == "master" else os.path.join(d, "data")
        for sub in ("plugins", "sinks"):
            os.makedirs(os.path.join(d, sub), exist_ok=True)
        os.makedirs(data, exist_ok=True)
        # Compiled plugins are shared between runs (a debug build compiles slowly), as in the tests.
        cache = os.path.join(h.ROOT, "target/test-plugin-cache")
        os.makedirs(cache, exist_ok=True)
        if not os.path.lexists(os.path.join(data, "cache")):
            os.symlink(cache, os.path.join(data, "cache"))
        for p in plugins:
            shutil.copy(os.path.join(self.bundled, f"{p}.wasm"), os.path.join(d, "plugins"))
        return [self.sonde, "--data-dir", data, "--plugins-dir", os.path.join(d, "plugins"),
                "--sinks-dir", os.path.join(d, "sinks"), "--listen", f"0.0.0.0:{API_PORT}",
                "--set", f'api.token="{API_TOKEN}"', "--set", f'cluster.token="{CLUSTER_TOKEN}"',
                "--set", f'host.name="{node}"', "--set", "export.self_metrics_interval_ms=0"]

    def start_master(self):
        args = self.sonde_args("master", ["mpi"]) + [
            "--role", "master",
            "--set", f'ingest.otlp_grpc_listen="0.0.0.0:{GRPC_PORT}"',
            "--set", 'ingest.otlp_http_listen="off"',
            "--set", "cluster.node_timeout_ms=3000",
        ] + [a for kv in self.master_settings for a in ("--set", kv)]
        t0 = time.monotonic()
        self.popen("master", "master", args)
        self.wait_ready("master")
        return time.monotonic() - t0

    def start_agent(self, node):
        master = f"http://127.0.0.1:{ROTEL_PORT}" if node == "n3" else f"http://{ip_of('master')}:{GRPC_PORT}"
        args = self.sonde_args(node, ["sysmetrics"]) + [
            "--role", "agent", "--master", master,
            "--set", 'ingest.otlp_grpc_listen="off"', "--set", 'ingest.otlp_http_listen="off"',
            "--set", "export.interval_ms=500", "--set", "cluster.heartbeat_ms=500",
            "--set", "export.spool_max_bytes=67108864", "--set", "export.timeout_ms=3000",
            "--set", "export.retry_max_ms=1000", "--set", "sampler.period_ms=100",
            "--set", "storage.embedded=true",
        ]
        env = None
        if node == "n1":
            env = {"LD_PRELOAD": FAKETIME_LIB, "FAKETIME_TIMESTAMP_FILE": self.faketime_file,
                   "FAKETIME_CACHE_DURATION": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
        self.popen(node, node, args, env)
        self.wait_ready(node)

    def start_rotel(self):
        self.popen("n3", "rotel", [h.rotel_agent(), "start", "--exporter", "otlp",
                                   "--otlp-exporter-endpoint", f"http://{ip_of('master')}:{GRPC_PORT}",
                                   "--otlp-exporter-protocol", "grpc",
                                   "--otlp-exporter-custom-headers", f"authorization=Bearer {CLUSTER_TOKEN}",
                                   "--otlp-grpc-endpoint", f"127.0.0.1:{ROTEL_PORT}",
                                   "--otlp-http-endpoint", "127.0.0.1:14318"])

    def start_job(self, node, rank):
        self.popen(node, f"job-{node}", [sys.executable, os.path.abspath(__file__), "--job",
                                         "--rank", str(rank), "--log", os.path.join(self.work, f"job-{node}.jsonl")])

    def wait_ready(self, node, seconds=120):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if try_get(node, "/api/ready") is not None:
                return
            if self.procs[node].poll() is not None:
                raise RuntimeError(f"{node} exited: see {self.work}/{node}.log")
            time.sleep(0.05)
        raise RuntimeError(f"{node} not ready in {seconds} s: see {self.work}/{node}.log")

    def kill9(self, name):
        p = self.procs.get(name)
        if p and p.poll() is None:
            # `ip netns exec` execs the program: the pid is sonde's (or rotel's) own.
            os.kill(p.pid, signal.SIGKILL)
            p.wait()

    def stop(self, name):
        p = self.procs.get(name)
        if p and p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def nodes_state():
    n = try_get("master", "/api/cluster/nodes") or {}
    return {x["node"]: x["state"] for x in n.get("nodes", [])}


def wait_state(node, states, seconds):
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        if nodes_state().get(node) in states:
            return time.monotonic() - t0
        time.sleep(0.1)
    return None


def all_up(seconds=60):
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        s = nodes_state()
        if all(s.get(n) in ("up", "back") for n in ("n1", "n2", "n3")):
            return time.monotonic() - t0
        time.sleep(0.1)
    return None


# ---------------------------------------------------------------- faults

def faults(c, fault_s, timeline, log):
    quiet = fault_s * 2 // 3
    nx = lambda node: ("ip", "netns", "exec", ns_name(node))  # noqa: E731

    def window(name, on, off, secs=fault_s):
        log(f"fault: {name}")
        t = time.time()
        got = on()
        extra = got if isinstance(got, dict) else {}
        time.sleep(secs)
        got = off()
        more = got if isinstance(got, dict) else {}
        timeline.append({"fault": name, "from": t, "to": time.time(), **extra, **more})
        time.sleep(quiet)

    # Link cut: lost after node_timeout_ms, back at its next report.
    def cut():
        run("ip", "link", "set", "scv-n2", "down")
        return {"lost_after_s": wait_state("n2", ("lost",), fault_s)}

    def uncut():
        run("ip", "link", "set", "scv-n2", "up")
        return {"back_after_s": wait_state("n2", ("up", "back"), 30)}
    window("link cut n2", cut, uncut)

    window("throttle n1 (tbf 256 kbit/s)",
           lambda: run(*nx("n1"), "tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "256kbit",
                       "burst", "16kb", "latency", "400ms"),
           lambda: run(*nx("n1"), "tc", "qdisc", "del", "dev", "eth0", "root"))

    for node, pct in (("n1", 5), ("n2", 20)):
        rule = ("-m", "statistic", "--mode", "random", "--probability", str(pct / 100), "-j", "DROP")
        window(f"packet loss {pct} % {node}",
               lambda: [run(*nx(node), "iptables", "-A", ch, *rule) for ch in ("INPUT", "OUTPUT")],
               lambda: [run(*nx(node), "iptables", "-D", ch, *rule) for ch in ("INPUT", "OUTPUT")])

    window("kill -9 agent n2", lambda: c.kill9("n2"), lambda: c.start_agent("n2"), secs=5)

    def master_down():
        c.kill9("master")

    def master_up():
        ready = c.start_master()
        return {"ready_s": round(ready, 2), "all_up_s": all_up()}
    window("kill -9 master", master_down, master_up, secs=10)

    def all_down():
        for n in ("master", "n1", "n2", "n3"):
            c.kill9(n)

    def all_back():
        ready = c.start_master()
        for n in ("n1", "n2", "n3"):
            c.start_agent(n)
        return {"ready_s": round(ready, 2), "all_up_s": all_up()}
    window("kill -9 master and agents together", all_down, all_back, secs=5)

    filler = os.path.join(c.work, "master-data", "filler")

    def fill():
        # Every free block of the master's tmpfs.
        run("dd", "if=/dev/zero", f"of={filler}", "bs=1M", check=False, quiet=True)

    def free():
        os.remove(filler)
    window("master disk full", fill, free)

    def jump(offset):
        def f():
            with open(c.faketime_file, "w") as fh:
                fh.write(f"{offset}\n")
        return f
    window("clock n1 +30 s", jump("+30s"), jump("+0"))
    window("clock n1 -30 s", jump("-30s"), jump("+0"))

    window("kill -9 collector (rotel) before n3", lambda: c.kill9("rotel"), c.start_rotel, secs=10)


# ---------------------------------------------------------------- accounting

def timing_counts(view):
    """(rank, batch) -> how many times each phase was taken (1 = once)."""
    out = {}
    for b in view.get("steps", []):
        for r in b["ranks"]:
            f = r["phases"].get("forward", 0.0)
            out[(r["rank"], b["batch"])] = round(f / 0.008)
    return out


# Sample times are compared at full resolution, which both sides keep for the history's raw
# window (15 min): a longer run (a soak) compares its last RAW_CHECK_MS only.
RAW_CHECK_MS = 14 * 60_000
# A query returns at most 10 000 buckets: 50 ms buckets in slices of 8 minutes.
SLICE_MS = 8 * 60_000


def series_times(node, on_master, frm, to):
    api = "master" if on_master else node
    flt = f"&node={node}" if on_master else ""
    lst = get(api, f"/api/series?name=system.cpu.utilization{flt}", timeout=30)
    s = lst.get("series") or []
    if not s:
        return set()
    sid = s[0]["id"]
    out = set()
    for a in range(frm, to, SLICE_MS):
        b = min(to, a + SLICE_MS - 1)
        d = get(api, f"/api/series/data?ids={sid}&from={a}&to={b}&max_points={max(1, (b - a) // 50)}",
                timeout=60)
        if d.get("data"):
            out.update(d["data"][0]["t"])
    return out


def account(c, t_start, t_end):
    """The table's rows: (what, sent, acknowledged, arrived, duplicated, lost, refused, retried)."""
    view = get("master", f"/api/jobs/{JOB}?batches=50000", timeout=120)
    got = timing_counts(view)
    summary = next((j for j in get("master", "/api/jobs")["jobs"] if j["job"] == JOB), {})
    table = []
    rows_acked = 0
    evicted_total = 0
    for rank, node in enumerate(("n1", "n2", "n3")):
        sent, acked, refused, retried, unanswered = job_account(os.path.join(c.work, f"job-{node}.jsonl"))
        # The registry keeps `cluster.max_steps_per_rank` batches per rank and counts the
        # older ones it drops (`steps_dropped`): those are checked by count only.
        kept = [b for (r, b) in got if r == rank]
        oldest = min(kept) if kept else 0
        evicted = next((r.get("steps_dropped", 0) for r in view.get("ranks", []) if r.get("rank") == rank), 0)
        evicted_total += evicted
        old_acked = [b for b in acked if b < oldest]
        lost_old = max(0, len(old_acked) - evicted)
        if old_acked:
            print(f"  {node}: {len(old_acked)} acknowledged batches older than the registry's bound; "
                  f"it dropped {evicted} (checked by count only: {lost_old} missing)")
        new_acked = [b for b in acked if b >= oldest]
        arrived = len(old_acked) - lost_old + sum(1 for b in new_acked if got.get((rank, b), 0) >= 1)
        dup = sum(got.get((rank, b), 0) - 1 for b in sent if got.get((rank, b), 0) > 1)
        missing = sorted(b for b in new_acked if got.get((rank, b), 0) == 0)
        lost = lost_old + len(missing)
        if missing:
            print(f"  {node}: acknowledged batches missing at the master (first 20): {missing[:20]}")
        twice = sorted(b for b in sent if got.get((rank, b), 0) > 1)
        if twice:
            after = sum(1 for b in twice if b in unanswered)
            print(f"  {node}: batches there more than once: {twice[:20]}; {after} of them re-posted by the job "
                  f"after a post that got no answer (job to agent: no request identity)")
        path = "through rotel" if node == "n3" else "direct"
        table.append((f"{node} timings ({path})", 3 * len(sent), 3 * len(acked), 3 * arrived, 3 * dup, 3 * lost,
                      refused, 3 * retried))
        rows_acked += len(acked)
    # The job's rows at the master: its timings (each time taken, the dropped batches' once)
    # and its table rows.
    taken_timings = 3 * (sum(got.values()) + evicted_total)
    rows_in = summary.get("rows", 0) - taken_timings
    table.append(("mpi_samples rows, all ranks", None, rows_acked, min(rows_in, rows_acked),
                  max(0, rows_in - rows_acked), max(0, rows_acked - rows_in), None, None))
    frm, to = int(t_start * 1000) + 5000, int(t_end * 1000) - 5000
    if to - frm > RAW_CHECK_MS:
        frm = to - RAW_CHECK_MS
        print(f"  cpu samples compared over the last {RAW_CHECK_MS // 60_000} minutes only (the raw window)")
    for node in ("n1", "n2", "n3"):
        sent = series_times(node, False, frm, to)
        arr = series_times(node, True, frm, to)
        gone = sorted(sent - arr)
        runs = []
        for t in gone:
            if runs and t - runs[-1][1] <= 1000:
                runs[-1][1], runs[-1][2] = t, runs[-1][2] + 1
            else:
                runs.append([t, t, 1])
        if runs:
            shown = ", ".join(f"{(a / 1000 - t_start):.0f}-{(b / 1000 - t_start):.0f} s: {n}" for a, b, n in runs[:12])
            print(f"  {node}: cpu samples missing at the master, by stretch (s after the job started): {shown}")
        st = get(node, "/api/status")["export"]["stats"]
        table.append((f"{node} cpu points", len(sent), None, len(sent & arr), None, len(sent - arr),
                      st.get("forward_refused"), st.get("retries")))
    return table


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--job", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--log", help=argparse.SUPPRESS)
    ap.add_argument("--period", type=float, default=0.1, help=argparse.SUPPRESS)
    ap.add_argument("--sonde", default=os.environ.get("SONDE_BIN") or os.path.join(h.ROOT, "target/debug/sonde"))
    ap.add_argument("--fault-s", type=int, default=15, help="seconds each fault lasts (default 15)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run the faults this many times (a soak: RSS and open files of every sonde after each)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--master-set", action="append", default=[], metavar="KEY=VALUE",
                    help="a setting for the master (repeatable), e.g. cluster.max_steps_per_rank=6000 "
                         "so that a soak fills the job registry's bound within its first ten minutes")
    ap.add_argument("--json", help="write the results here as JSON too (and each round's RSS and files to FILE.rounds)")
    args = ap.parse_args()
    if args.job:
        return job_main(args)
    if os.geteuid() != 0:
        sys.exit("chaos: needs root (network namespaces, tc, iptables, a tmpfs)")
    for tool in ("ip", "tc", "iptables", "dd", "mount"):
        if not shutil.which(tool):
            sys.exit(f"chaos: `{tool}` is missing (./dev chaos installs it)")
    if not os.path.exists(FAKETIME_LIB):
        sys.exit(f"chaos: {FAKETIME_LIB} is missing (apt-get install faketime)")
    for p in (args.sonde, os.path.join(h.BUNDLED, "sysmetrics.wasm"), os.path.join(h.BUNDLED, "mpi.wasm")):
        if not os.path.exists(p):
            sys.exit(f"chaos: {p} is missing: ./dev plugins and cargo build -p sonde")
    work = tempfile.mkdtemp(prefix="sonde-chaos-")
    t_log0 = time.monotonic()

    def log(msg):
        print(f"[{time.monotonic() - t_log0:6.1f} s] {msg}", flush=True)

    teardown(work)
    c = None

    def cleanup(*_):
        if c:
            for name in list(c.procs):
                c.kill9(name)
        teardown(work)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"work directory kept: {work}")

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        setup_network()
        os.makedirs(os.path.join(work, "master-data"))
        run("mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", os.path.join(work, "master-data"))
        c = Cluster(work, os.path.abspath(args.sonde), h.BUNDLED, args.master_set)
        log("starting the master, rotel and three agents")
        c.start_master()
        c.start_rotel()
        for n in ("n1", "n2", "n3"):
            c.start_agent(n)
        if all_up(120) is None:
            raise RuntimeError(f"not every agent reached the master: {nodes_state()}")
        for rank, n in enumerate(("n1", "n2", "n3")):
            c.start_job(n, rank)
        t_start = time.time()
        time.sleep(args.fault_s)
        timeline, soak = [], []
        for rnd in range(args.rounds):
            faults(c, args.fault_s, timeline, log)
            sample = {"round": rnd + 1, "t_s": round(time.time() - t_start)}
            for n in ("master", "n1", "n2", "n3"):
                p = c.procs[n]
                try:
                    fds, threads = h.proc_counts(p.pid)
                    sample[n] = (round(h.rss_mb(p.pid)), fds, threads)
                except OSError:
                    sample[n] = None
            soak.append(sample)
            log(f"round {rnd + 1}: RSS MB, open files, threads: {sample}")
            if args.json:
                # Written after every round: a soak stopped early keeps its figures.
                with open(args.json + ".rounds", "w") as f:
                    json.dump({"soak": soak, "timeline": timeline}, f, indent=1)
        log("faults done: stopping the jobs, draining the spools")
        for n in ("n1", "n2", "n3"):
            c.stop(f"job-{n}")
        t_end = time.time()
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            sts = [try_get(n, "/api/status") for n in ("n1", "n2", "n3")]
            if all(s and s["export"]["stats"]["spooled_requests"] == 0 for s in sts):
                break
            time.sleep(1)
        time.sleep(3)  # the master's hub hands the last requests to the job registry
        table = account(c, t_start, t_end)
        ingest = get("master", "/api/ingest")
        storage = get("master", "/api/status").get("storage") or {}
        history = storage.get("history")
        if history is not None:
            history = dict(history, batches_lagged=storage.get("batches_lagged"))
        report(table, timeline, ingest, args, history, soak)
        if args.rounds > 1:
            print()
            print("| round | at (s) | master RSS MB / fds / threads | n1 | n2 | n3 |")
            print("|---|---|---|---|---|---|")
            for x in soak:
                cell = lambda v: "—" if v is None else f"{v[0]} / {v[1]} / {v[2]}"  # noqa: E731
                print(f"| {x['round']} | {x['t_s']} | {cell(x['master'])} | {cell(x['n1'])} | {cell(x['n2'])} | "
                      f"{cell(x['n3'])} |")
    finally:
        cleanup()


def report(table, timeline, ingest, args, history=None, soak=()):
    cols = ("", "sent", "acknowledged", "arrived", "duplicated", "lost", "refused", "retried")
    fmt = lambda v: "—" if v is None else str(v)  # noqa: E731
    print()
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for row in table:
        print("| " + " | ".join(fmt(v) for v in row) + " |")
    print()
    print("| fault | from (s) | lasted (s) | measured |")
    print("|---|---|---|---|")
    t0 = timeline[0]["from"] if timeline else 0
    for f in timeline:
        extra = ", ".join(f"{k} {v}" for k, v in f.items() if k not in ("fault", "from", "to"))
        print(f"| {f['fault']} | {f['from'] - t0:.0f} | {f['to'] - f['from']:.1f} | {extra or '—'} |")
    print()
    if history:
        print(f"master history: points appended {history.get('points_appended')}, out of order (dropped) "
              f"{history.get('out_of_order')}, lost to I/O {history.get('points_lost_to_io')}, I/O errors "
              f"{history.get('io_errors')}; batches the history's tap lost for lagging "
              f"{history.get('batches_lagged')}")
    d, du = ingest.get("dedup", {}), ingest.get("durable", {})
    print(f"master: repeats dropped {d.get('repeats')}, busy {d.get('busy')}, beyond window "
          f"{d.get('beyond_window')}, taken {d.get('taken')}; state-store flushes {du.get('flushes')}, "
          f"failed {du.get('flush_errors')}, requests refused for it {du.get('refused')}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"table": table, "timeline": timeline, "ingest": ingest, "history": history,
                       "soak": list(soak)}, f, indent=1)


if __name__ == "__main__":
    main()
