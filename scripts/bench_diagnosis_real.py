#!/usr/bin/env python3
"""`./dev bench-diagnosis-real`: the diagnosis on real PyTorch jobs, on a
cluster made on this machine, one injected fault per run.

    sudo python3 scripts/bench_diagnosis_real.py [--steps N] [--runs healthy,loader,cpu,link,pipeline] [--rounds R]

The cluster:

    root namespace: bridge sdbr 10.77.0.1 ── master sonde (bottleneck plugin; API on 127.0.0.1)
        │
        ├── namespace sda (10.77.0.2): agent sonde "node-a", ranks 0 and 1
        └── namespace sdb (10.77.0.3): agent sonde "node-b", ranks 2 and 3

Each rank runs tests/py/torch_faults.py (gloo over the bridge) and reports
its operations to its namespace's agent over OTLP/HTTP; the agents forward
to the master, whose bottleneck plugin judges the job. The runs:

    healthy   DDP, 4 ranks, nothing injected                      -> no culprit
    loader    DDP, rank 2's dataloader waits 600 ms per batch      -> rank 2, input
    cpu       DDP, rank 1 in a cgroup (v1 cpu.cfs_quota_us) of 10 % of a core -> rank 1, compute
    link      DDP, node-b's link throttled (tc tbf, 50 Mbit/s) from a third
              of the steps on                                     -> a fail-slow from then
    pipeline  2 stages x 2 replicas, GPipe, stage 1 three times stage 0's blocks -> stage 1

Four ranks share two cores here, so every step's compute varies with the
scheduler; the faults are sized to stand out of that (a healthy run reads
about 1.2x its ideal). A link slow for the whole window is every
collective's typical duration, so the What-if replay alone cannot see it:
the link run throttles mid-run, and what counts is the fail-slow onset.

After each run the master's What-if finding (`GET /api/jobs/<job>`) is read
and compared with the truth; the table at the end says what each run got.
`--rounds R` runs the list R times on the same cluster, and ends with the
two rates issue 34 sets targets for: right culprits among injected runs,
and no culprit among healthy ones.
Needs root (namespaces, cgroups, tc), PyTorch (`./dev python-frameworks`)
and a built sonde (SONDE_BIN, else target/release/sonde, else target/debug/sonde).
Everything it creates (namespaces, bridge, cgroup) is removed at the end.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BRIDGE, SUBNET = "sdbr", "10.77.0"
NODES = {"node-a": ("sda", 2, (0, 1)), "node-b": ("sdb", 3, (2, 3))}
CGROUP = "/sys/fs/cgroup/cpu/sonde-bench"
GRPC_PORT, API_PORT, AGENT_API = 14317, 17878, 7878

# run -> (mode, torch_faults.py arguments, expected (about, id, cause word) or None)
RUNS = {
    "healthy": ("ddp", [], None),
    "loader": ("ddp", ["--slow-loader-rank", "2", "--loader-ms", "600"], ("rank", "2", "input")),
    "cpu": ("ddp", [], ("rank", "1", "compute")),
    "link": ("ddp", [], ("fail-slow", "", "")),
    "pipeline": ("pipeline", ["--blocks", "2,6", "--micro", "4"], ("stage", "1", "")),
}


def sh(*cmd, check=True):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")
    return r


def sonde_bin():
    for p in (os.environ.get("SONDE_BIN"), f"{ROOT}/target/release/sonde", f"{ROOT}/target/debug/sonde"):
        if p and os.path.exists(p):
            return p
    sys.exit("no sonde binary: build one (cargo build -p sonde) or set SONDE_BIN")


def cleanup():
    for ns, _, _ in NODES.values():
        sh("ip", "netns", "del", ns, check=False)
        sh("ip", "link", "del", f"{ns}-h", check=False)
    sh("ip", "link", "del", BRIDGE, check=False)
    if os.path.isdir(CGROUP):
        os.rmdir(CGROUP)


def network():
    sh("ip", "link", "add", BRIDGE, "type", "bridge")
    sh("ip", "addr", "add", f"{SUBNET}.1/24", "dev", BRIDGE)
    sh("ip", "link", "set", BRIDGE, "up")
    for ns, host, _ in NODES.values():
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", f"{ns}-h", "type", "veth", "peer", "name", f"{ns}-n")
        sh("ip", "link", "set", f"{ns}-n", "netns", ns)
        sh("ip", "link", "set", f"{ns}-h", "master", BRIDGE, "up")
        sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{SUBNET}.{host}/24", "dev", f"{ns}-n")
        sh("ip", "netns", "exec", ns, "ip", "link", "set", f"{ns}-n", "up")
        sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")


def get(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


def wait_ready(url, what, proc, seconds=60):
    end = time.time() + seconds
    while time.time() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            get(url + "/api/ready")
            return
        except Exception:  # noqa: BLE001 - not up yet
            time.sleep(0.2)
    raise RuntimeError(f"{what} not ready after {seconds} s")


def start_sondes(work, log):
    sonde = sonde_bin()
    procs = []
    # A shared token: the master's receiver listens on the bridge, not on loopback.
    common = ["--set", "sampler.period_ms=200", "--set", "export.interval_ms=500", "--set", "cluster.heartbeat_ms=500",
              "--set", "cluster.token=\"bench-diagnosis\""]
    master_dir = os.path.join(work, "master")
    os.makedirs(os.path.join(master_dir, "plugins"))
    shutil.copy(f"{ROOT}/target/plugins/bundled/bottleneck.wasm", os.path.join(master_dir, "plugins"))
    procs.append(subprocess.Popen(
        [sonde, "--role", "master", "--data-dir", f"{master_dir}/data", "--plugins-dir", f"{master_dir}/plugins",
         "--sinks-dir", work, "--listen", f"127.0.0.1:{API_PORT}", "--set", "host.name=\"master\"",
         "--set", f"ingest.otlp_grpc_listen=\"{SUBNET}.1:{GRPC_PORT}\"", "--set", "ingest.otlp_http_listen=off",
         "--set", "plugin.bottleneck.settings={lag_ms=500}", "--set", "api.token=\"bench-diagnosis\"", *common],
        stdout=log, stderr=log))
    wait_ready(f"http://127.0.0.1:{API_PORT}", "the master", procs[-1])
    for node, (ns, _, _) in NODES.items():
        d = os.path.join(work, node)
        os.makedirs(os.path.join(d, "plugins"))
        procs.append(subprocess.Popen(
            ["ip", "netns", "exec", ns, sonde, "--role", "agent", "--master", f"http://{SUBNET}.1:{GRPC_PORT}",
             "--data-dir", f"{d}/data", "--plugins-dir", f"{d}/plugins", "--sinks-dir", work,
             "--listen", f"127.0.0.1:{AGENT_API}", "--set", f"host.name=\"{node}\"", *common],
            stdout=log, stderr=log))
    for node, (ns, _, _) in NODES.items():
        end = time.time() + 60
        while sh("ip", "netns", "exec", ns, "curl", "-sf", f"http://127.0.0.1:{AGENT_API}/api/ready", check=False).returncode:
            if time.time() > end:
                raise RuntimeError(f"the agent {node} is not ready")
            time.sleep(0.3)
    return procs


def ranks(run, job, mode, args, steps, port, log):
    """Starts the job's four ranks in their namespaces; returns them."""
    procs = []
    for node, (ns, _, rank_ids) in NODES.items():
        for r in rank_ids:
            env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r % 2), WORLD_SIZE="4",
                       MASTER_ADDR=f"{SUBNET}.2", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME=f"{ns}-n",
                       PYTHONPATH=f"{ROOT}/clients/python/src", SONDE_CLIENT_JOB=job, SONDE_CLIENT_NODE=node,
                       SONDE_CLIENT_API=f"http://127.0.0.1:{AGENT_API}",
                       OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:4318", OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf")
            cmd = ["ip", "netns", "exec", ns, sys.executable, f"{ROOT}/tests/py/torch_faults.py", mode,
                   "--steps", str(steps), *args]
            if run == "cpu" and r == 1:
                # Into the throttled cgroup before it starts: its threads and children inherit it.
                cmd = ["sh", "-c", f'echo $$ > {CGROUP}/tasks && exec "$@"', "sh", *cmd]
            procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=log, text=True))
    return procs


def view(job):
    try:
        return get(f"http://127.0.0.1:{API_PORT}/api/jobs/{job}")
    except Exception:  # noqa: BLE001 - not there yet
        return {}


def what_if(job):
    return next((f for f in view(job).get("findings", []) if f.get("kind") == "what-if"), None)


def onset(job):
    """The fail-slow finding's onset step and sentence, if any."""
    f = next((f for f in view(job).get("findings", []) if f.get("kind") == "fail-slow"), None)
    return (f["body"].get("onset step"), f["reason"]) if f else (None, "no fail-slow finding")


def throttle_at(pause_dir, ranks, seconds=300):
    """Throttles node-b's link while every rank waits before the pause step
    (torch_faults.py --pause-at), then lets them go: the fault begins at that
    step exactly. Watching the master's view instead, the throttle landed as
    many steps late as the agents' forwarding lagged (13 on a quiet run)."""
    end = time.time() + seconds
    while time.time() < end:
        if all(os.path.exists(os.path.join(pause_dir, f"at-{r}")) for r in ranks):
            sh("ip", "netns", "exec", "sdb", "tc", "qdisc", "add", "dev", "sdb-n", "root",
               "tbf", "rate", "50mbit", "burst", "64kb", "latency", "100ms")
            open(os.path.join(pause_dir, "go"), "w").close()
            return True
        time.sleep(0.02)
    return False


def verdict(f):
    """(about, id, sentence) of a What-if finding; no culprit for an ended one or none."""
    if f is None or f["finding"].get("ended") or f["finding"].get("about") in (None, "job"):
        return (None, None, f["reason"] if f else "no finding")
    return (f["finding"]["about"], str(f["finding"]["id"]), f["reason"])


# A cause as the diagnosis names it: compute is a rank's forward or backward
# (as `./dev bench-diagnosis` counts a slow worker).
CAUSE_WORDS = {"compute": ("its forward is slow", "its backward is slow")}


def right(expected, got):
    if expected is None:
        return got[0] is None
    about, ident, cause = expected
    words = CAUSE_WORDS.get(cause, (cause,))
    return got[0] == about and got[1] == ident and any(w in got[2] for w in words)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--runs", default=",".join(RUNS))
    ap.add_argument("--rounds", type=int, default=1, help="run the list this many times")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root: network namespaces, a cgroup and tc")
    runs = a.runs.split(",") * max(1, a.rounds)
    unknown = [r for r in runs if r not in RUNS]
    if unknown:
        sys.exit(f"unknown runs {unknown}; known: {list(RUNS)}")
    work = tempfile.mkdtemp(prefix="sonde-diag-real-")
    log = open(os.path.join(work, "log"), "w")
    cleanup()
    results = []
    procs = []
    try:
        network()
        os.makedirs(CGROUP, exist_ok=True)
        with open(f"{CGROUP}/cpu.cfs_period_us", "w") as f:
            f.write("100000")
        with open(f"{CGROUP}/cpu.cfs_quota_us", "w") as f:
            f.write("10000")
        procs = start_sondes(work, log)
        for i, run in enumerate(runs):
            mode, args, expected = RUNS[run]
            job = f"real-{run}" if a.rounds <= 1 else f"real-{run}-{i // (len(runs) // a.rounds)}"
            t0 = time.time()
            pause_dir = os.path.join(work, f"pause-{i}")
            if run == "link":
                os.makedirs(pause_dir)
                args = [*args, "--pause-at", str(a.steps // 3), "--pause-dir", pause_dir]
            rs = ranks(run, job, mode, args, a.steps, 29500 + i, log)
            all_ranks = [r for _, _, ids in NODES.values() for r in ids]
            throttled_at = a.steps // 3 if run == "link" and throttle_at(pause_dir, all_ranks) else None
            outs = [p.communicate(timeout=600)[0] for p in rs]
            took = time.time() - t0
            if run == "link":
                sh("ip", "netns", "exec", "sdb", "tc", "qdisc", "del", "dev", "sdb-n", "root", check=False)
            failed = [p.returncode for p in rs if p.returncode]
            if failed:
                results.append((run, expected, (None, None, f"ranks failed: {failed} (see {work}/log)"), took, False))
                continue
            recorded = sum(json.loads(o.strip().splitlines()[-1])["ops"] for o in outs)
            # The finding settles once the last steps are judged: wait for it to stop changing.
            got, stable_since, end = None, time.time(), time.time() + 30
            while time.time() < end:
                now = verdict(what_if(job))
                if now != got:
                    got, stable_since = now, time.time()
                elif got is not None and time.time() - stable_since > 3:
                    break
                time.sleep(0.5)
            if run == "link":
                step, sentence = onset(job)
                ok = throttled_at is not None and step is not None and 0 <= step - throttled_at <= 5
                got = ("fail-slow", str(step), f"{sentence} (throttled from step {throttled_at})")
            else:
                ok = right(expected, got)
            results.append((run, expected, got, took, ok))
            print(f"{run}: {took:.0f} s, {recorded} operations; {'RIGHT' if ok else 'WRONG'}: {got[2]}", flush=True)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        cleanup()
        log.close()
    print()
    print("| run | injected | expected | the master's diagnosis | right |")
    print("|---|---|---|---|---|")
    for run, expected, got, took, ok in results:
        exp = "no culprit" if expected is None else f"{expected[0]} {expected[1]}".strip() + (f" ({expected[2]})" if expected[2] else "")
        print(f"| {run} | {' '.join(RUNS[run][1]) or '-'} | {exp} | {got[2]} | {'yes' if ok else '**no**'} |")
    n = sum(ok for *_, ok in results)
    injected = [ok for _, expected, _, _, ok in results if expected is not None]
    healthy = [ok for _, expected, _, _, ok in results if expected is None]
    print(f"\n{n} of {len(results)} runs right (log: {work}/log)")
    print(f"injected runs with the right answer: {sum(injected)} of {len(injected)}; "
          f"healthy runs with no culprit: {sum(healthy)} of {len(healthy)}")
    return 0 if n == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
