#!/usr/bin/env python3
"""The same plugin in Rust, Python and JavaScript, side by side in one sonde.

Writes the `sonde plugin new` template in each language (they do the same work: count the CPU
samples and progress events they receive, answer GET /hello), builds each with the command its
README states, and loads the three together in one sonde with an empty compile cache, then
again from the cache. Prints per language: the component's size, the load time (compile +
start) cold and from the cache, the instance's linear memory, and the mean and p99 wall time of
an `on-samples` call as the host measures it, with the ratio to Rust.

Usage: bench_guests.py [--sonde PATH] [--seconds N]   (default: target/release/sonde, 20 s)
Needs the toolchains `./dev guest-toolchains` installs. Standard library only.
"""

import argparse
import os
import shutil
import subprocess
import tempfile
import time

import harness

LANGS = ("rust", "python", "js")


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


def run(work, sonde, data, seconds):
    """One sonde with the three plugins; returns {lang: its /api/plugins entry} after `seconds`."""
    api = f"127.0.0.1:{harness.free_port()}"
    args = [sonde, "--data-dir", data, "--plugins-dir", os.path.join(work, "plugins"), "--sinks-dir",
            os.path.join(work, "sinks"), "--listen", api, "--set", 'ingest.otlp_grpc_listen="off"',
            "--set", 'ingest.otlp_http_listen="off"']
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        harness.wait_ready(api, p, seconds=900)
        time.sleep(seconds)
        return {e["name"][: -len("demo")]: e for e in harness.get(api, "/api/plugins")["plugins"]}
    finally:
        harness.stop(p)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sonde", default=harness.SONDE)
    ap.add_argument("--seconds", type=float, default=20)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="sonde-guests-")
    try:
        wasm = {lang: build(work, a.sonde, lang) for lang in LANGS}
        harness.plugin_dirs(work, bundled=False, extra={f"{lang}demo": wasm[lang] for lang in LANGS})
        data = os.path.join(work, "data")
        os.makedirs(data)
        cold = run(work, a.sonde, data, a.seconds)
        warm = run(work, a.sonde, data, a.seconds)
        base = warm["rust"]["metrics"]["call_us_mean"]
        print(f"sonde: {a.sonde}; on-samples once a second, {a.seconds:.0f} s per run")
        print("| language | component | load, cold | load, cached | linear memory | on-samples mean | p99 | ratio to Rust |")
        print("|---|---|---|---|---|---|---|---|")
        for lang in LANGS:
            m = warm[lang]["metrics"]
            print(f"| {lang} | {os.path.getsize(wasm[lang]) / 1e6:.2f} MB | {cold[lang]['load_ms'] / 1000:.1f} s"
                  f" | {warm[lang]['load_ms']:.0f} ms | {m['memory_bytes'] / 2**20:.1f} MiB"
                  f" | {m['call_us_mean']:.0f} µs | {m['call_us_p99']:.0f} µs | {m['call_us_mean'] / base:.1f}× |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
