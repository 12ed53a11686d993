#!/usr/bin/env python3
"""The same plugin in Rust, Python and JavaScript, side by side in one sonde.

Two parts, each loading its plugins together in one sonde with an empty compile cache, then
again from the cache:

- templates: the `sonde plugin new` template in each language (they do the same work: count
  the CPU samples and progress events they receive, answer GET /hello), built with the command
  its README states. Per language: the component's size, the load time (compile + start) cold
  and from the cache, the instance's linear memory, and the mean and p99 wall time of an
  `on-samples` call as the host measures it, with the ratio to Rust.
- examples: the guests of plugins/examples/ next to their Rust twins, doing real work on the
  same input: step-outliers in Python and Rust on 80 training steps a second (8 ranks),
  serving-limiter in JavaScript and Rust on 200 serving requests a second (4 models, 1 s
  windows; the bundled clockwork plugin runs beside them, as it declares the `requests` table
  they read), posted to /api/ingest every 100 ms. Per plugin: size, load cold and cached, the
  linear memory's peak, the mean and p99 of a hook call, the cost per event row (call time /
  rows), the ratio to its Rust twin, and whether the twins decided the same.

Usage: bench_guests.py [--sonde PATH] [--seconds N] [--only templates|examples]
       (default: target/release/sonde, 20 s, both parts)
Needs the toolchains `./dev guest-toolchains` installs. Standard library only.
"""

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request

import harness

LANGS = ("rust", "python", "js")
EXAMPLES = os.path.join(harness.ROOT, "plugins/examples")
COMPONENTIZE_JS = os.path.join(harness.ROOT, "tests/guest-js/node_modules/.bin/componentize-js")
# plugin name -> (example, language); each guest's twin follows it.
EXAMPLE_PLUGINS = {
    "outliers-py": ("step-outliers", "python"),
    "outliers-rs": ("step-outliers", "rust"),
    "limiter-js": ("serving-limiter", "js"),
    "limiter-rs": ("serving-limiter", "rust"),
}
LIMITER_SETTINGS = "{window_ms=1000, lag_ms=500}"


def build(work, sonde, lang):
    """Writes and builds the template for `lang` as plugin `<lang>demo`; returns its .wasm."""
    name = f"{lang}demo"
    folder = os.path.join(work, "src", name)
    subprocess.run([sonde, "plugin", "new", name, "--lang", lang, "--dir", folder], check=True,
                   stdout=subprocess.DEVNULL)
    if lang == "rust":
        target = os.path.join(harness.ROOT, "plugins/target")
        subprocess.run(["cargo", "build", "--quiet", "--release", "--target", "wasm32-wasip2"], cwd=folder,
                       check=True, env={**os.environ, "CARGO_TARGET_DIR": target})
        return os.path.join(target, f"wasm32-wasip2/release/{name}.wasm")
    if lang == "python":
        subprocess.run(["componentize-py", "-d", "wit", "-w", "plugin", "componentize", "app", "-o",
                        f"{name}.wasm"], cwd=folder, check=True, stdout=subprocess.DEVNULL)
    else:
        os.symlink(os.path.join(harness.ROOT, "tests/guest-js/node_modules"), os.path.join(folder, "node_modules"))
        subprocess.run(["npm", "run", "build", "--silent"], cwd=folder, check=True, stdout=subprocess.DEVNULL)
    return os.path.join(folder, f"{name}.wasm")


def run(work, sonde, data, seconds, settings=(), during=None):
    """One sonde with work/plugins; returns ({name: its /api/plugins entry}, what `during(api)`
    returned) after `seconds` (`during` runs meanwhile and may take longer)."""
    api = f"127.0.0.1:{harness.free_port()}"
    args = [sonde, "--data-dir", data, "--plugins-dir", os.path.join(work, "plugins"), "--sinks-dir",
            os.path.join(work, "sinks"), "--listen", api, "--set", 'ingest.otlp_grpc_listen="off"',
            "--set", 'ingest.otlp_http_listen="off"']
    for kv in settings:
        args += ["--set", kv]
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        harness.wait_ready(api, p, seconds=900)
        got = during(api) if during else time.sleep(seconds)
        return {e["name"]: e for e in harness.get(api, "/api/plugins")["plugins"]}, got
    finally:
        harness.stop(p)


def templates(sonde, seconds):
    work = tempfile.mkdtemp(prefix="sonde-guests-")
    try:
        wasm = {lang: build(work, sonde, lang) for lang in LANGS}
        harness.plugin_dirs(work, bundled=False, extra={f"{lang}demo": wasm[lang] for lang in LANGS})
        data = os.path.join(work, "data")
        os.makedirs(data)
        cold, _ = run(work, sonde, data, seconds)
        warm, _ = run(work, sonde, data, seconds)
        base = warm["rustdemo"]["metrics"]["call_us_mean"]
        print(f"templates: sonde {sonde}; on-samples once a second, {seconds:.0f} s per run")
        print("| language | component | load, cold | load, cached | linear memory | on-samples mean | p99 | ratio to Rust |")
        print("|---|---|---|---|---|---|---|---|")
        for lang in LANGS:
            c, w = cold[f"{lang}demo"], warm[f"{lang}demo"]
            m = w["metrics"]
            print(f"| {lang} | {os.path.getsize(wasm[lang]) / 1e6:.2f} MB | {c['load_ms'] / 1000:.1f} s"
                  f" | {w['load_ms']:.0f} ms | {m['memory_bytes'] / 2**20:.1f} MiB"
                  f" | {m['call_us_mean']:.0f} µs | {m['call_us_p99']:.0f} µs | {m['call_us_mean'] / base:.1f}× |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def build_examples(work):
    """Builds each guest with its README's command and the Rust twins; returns {plugin: .wasm}."""
    out = {name: os.path.join(work, f"{name}.wasm") for name in EXAMPLE_PLUGINS}
    subprocess.run(["componentize-py", "-d", "../../../../wit", "-w", "plugin", "componentize", "app", "-o",
                    out["outliers-py"]], cwd=os.path.join(EXAMPLES, "step-outliers/python"), check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run([COMPONENTIZE_JS, "--wit", "../../../../wit", "--world-name", "plugin", "-d", "stdio", "-d",
                    "random", "-d", "clocks", "-d", "http", "-d", "fetch-event", "-o", out["limiter-js"], "app.js"],
                   cwd=os.path.join(EXAMPLES, "serving-limiter/js"), check=True, stdout=subprocess.DEVNULL)
    plugins = os.path.join(harness.ROOT, "plugins")
    subprocess.run(["cargo", "build", "--quiet", "--release", "--target", "wasm32-wasip2", "-p",
                    "sonde-example-step-outliers", "-p", "sonde-example-serving-limiter"], cwd=plugins, check=True)
    for name, crate in (("outliers-rs", "step_outliers"), ("limiter-rs", "serving_limiter")):
        shutil.copy(os.path.join(plugins, f"target/wasm32-wasip2/release/{crate}.wasm"), out[name])
    return out


def post(api, body):
    req = urllib.request.Request(f"http://{api}/api/ingest", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as r:
        r.read()


def feed(api, seconds):
    """Every 100 ms: one step of each of 8 ranks (every 50th step of a rank 3x its usual 100 ms)
    and 20 finished requests over 4 models (every 10th late). Returns the rows posted."""
    rows, n, t_end = 0, 0, time.monotonic() + seconds
    while time.monotonic() < t_end:
        now = time.time_ns()
        for rank in range(8):
            d = 300_000_000 if (n + rank) % 50 == 49 else 100_000_000 + (n * 7 + rank * 3) % 11 * 1_000_000
            post(api, {"origin": {"job": "bench", "node": "n1", "rank": rank},
                       "timings": [{"name": "step", "start_ns": now - d, "end_ns": now, "batch_idx": n}]})
        reqs = []
        for i in range(20):
            dep = now - (20 - i) * 1_000_000
            late = (n * 20 + i) % 10 == 0
            reqs.append({"request_id": n * 20 + i, "model_id": i % 4, "arrival_ns": dep - 20_000_000,
                         "departure_ns": dep, "deadline_ns": dep - 1 if late else dep + 30_000_000, "result": 0})
        post(api, {"origin": {"job": "serving", "node": "n1", "role": "controller"}, "requests": reqs})
        rows += 8 + 20
        n += 1
        time.sleep(max(0.0, 0.1 - (time.time_ns() - now) / 1e9))
    # The limiter's windows close after the lag; the outliers decide at once.
    time.sleep(2.0)
    views = {name: harness.get(api, f"/api/plugins/{name}/{'slow' if 'outliers' in name else 'windows'}")
             for name in EXAMPLE_PLUGINS}
    return rows, views


def examples(sonde, seconds):
    work = tempfile.mkdtemp(prefix="sonde-examples-")
    try:
        wasm = build_examples(work)
        # The limiters read the `requests` event table, which the bundled clockwork plugin declares.
        clockwork = os.path.join(harness.BUNDLED, "clockwork.wasm")
        harness.plugin_dirs(work, bundled=False, extra={**wasm, "clockwork": clockwork})
        data = os.path.join(work, "data")
        os.makedirs(data)
        settings = [f"plugin.{n}.settings={LIMITER_SETTINGS}" for n in ("limiter-js", "limiter-rs")]
        cold, _ = run(work, sonde, data, seconds, settings, during=lambda api: feed(api, seconds))
        warm, (rows, views) = run(work, sonde, data, seconds, settings, during=lambda api: feed(api, seconds))
        print(f"examples: sonde {sonde}; {seconds:.0f} s per run, 80 steps/s and 200 requests/s posted "
              f"every 100 ms ({rows} rows in the measured run)")
        print("| plugin | language | component | load, cold | load, cached | linear memory, peak | call mean | p99 "
              "| per event row | ratio to Rust | same decisions as Rust |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        twin = {"outliers-py": "outliers-rs", "limiter-js": "limiter-rs"}
        per_row = {}
        for name, (ex, lang) in EXAMPLE_PLUGINS.items():
            m = warm[name]["metrics"]
            per_row[name] = m["call_us_mean"] * m["calls"] / max(m["items"], 1)
        for name, (ex, lang) in EXAMPLE_PLUGINS.items():
            c, w = cold[name], warm[name]
            m = w["metrics"]
            rust = twin.get(name, name)
            same = "(itself)" if rust == name else ("yes" if views[name] == views[rust] else "NO")
            print(f"| {ex} | {lang} | {os.path.getsize(wasm[name]) / 1e6:.2f} MB | {c['load_ms'] / 1000:.1f} s"
                  f" | {w['load_ms']:.0f} ms | {m['memory_peak_bytes'] / 2**20:.1f} MiB"
                  f" | {m['call_us_mean']:.0f} µs | {m['call_us_p99']:.0f} µs | {per_row[name]:.1f} µs"
                  f" | {per_row[name] / per_row[rust]:.1f}× | {same} |")
        for name, v in views.items():
            decided = len(v["slow"]) if "slow" in v else len(v["decisions"])
            m = warm[name]["metrics"]
            print(f"{name}: {decided} decisions in its route's view, {m['errors']} hook errors, {m['traps']} traps")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sonde", default=harness.SONDE)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--only", choices=("templates", "examples"))
    a = ap.parse_args()
    if a.only != "examples":
        templates(a.sonde, a.seconds)
    if a.only != "templates":
        examples(a.sonde, a.seconds)


if __name__ == "__main__":
    main()
