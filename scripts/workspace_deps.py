#!/usr/bin/env python3
"""Prints `-p name@version` for every package the workspace's members depend on
directly (normal dependencies, not the members themselves), for
`cargo build --lib $(python3 scripts/workspace_deps.py)`.

Why: `./dev test` compiles these while the plugins and the dashboard build
beside them. The host's build script embeds both, so nothing of the host
itself can compile before they exist, but its ~440 dependency units can, and
the plugins' build leaves a core idle much of the time. Cargo resolves the
features of a package named with `-p` as the whole workspace does, so these
are the very units `cargo test --workspace` uses afterwards
(scripts/check_features.py checks that none differs). Dev-dependencies are
left out: a `cargo build` cannot name them.

Python 3 standard library only.
"""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def direct_dependencies() -> list[str]:
    meta = json.loads(
        subprocess.run(
            ["cargo", "metadata", "--format-version", "1"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    members = set(meta["workspace_members"])
    packages = {p["id"]: p for p in meta["packages"]}
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    found = set()
    for member in members:
        for dep in nodes[member]["deps"]:
            if dep["pkg"] in members:
                continue
            # kind None is a normal dependency ("dev" and "build" are the others)
            if any(k["kind"] is None for k in dep["dep_kinds"]):
                p = packages[dep["pkg"]]
                found.add(f"{p['name']}@{p['version']}")
    return sorted(found)


if __name__ == "__main__":
    deps = direct_dependencies()
    if not deps:
        sys.exit("no dependencies found in `cargo metadata`")
    print(" ".join(f"-p {d}" for d in deps))
