#!/usr/bin/env python3
"""Checks that every cargo command the recipes run builds sonde with the same
dependency features, so that none of them compiles the host a second time.

Cargo resolves features per command: `cargo test --workspace` turns on what
every member's dev-dependencies ask for, `cargo build -p sonde` only what the
host's own dependencies do, `cargo test -p sonde-e2e` what the e2e tests' do.
Where a crate the host depends on gets other features in one of them, the
host is compiled again (minutes, and a second copy in target/). The fix is to
ask for the feature in host/Cargo.toml's [dependencies] too.

Compares the features of every package in sonde's normal dependency tree as
`cargo tree` resolves them for each command; prints each difference and
exits 1, or one summary line and exits 0.

Also checks `./dev test`'s early build of the workspace's dependencies
(scripts/workspace_deps.py): every unit it compiles must be one that
`cargo test --workspace` uses, with the same features and profile, or the
early build is work done twice. Compared with cargo's unit graph
(`--unit-graph`, unstable, allowed here by RUSTC_BOOTSTRAP).

Python 3 standard library only.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import workspace_deps

ROOT = Path(__file__).resolve().parent.parent

# (what a recipe runs, the cargo tree arguments that resolve it the same way)
COMMANDS = [
    ("cargo build -p sonde", ["-p", "sonde", "-e", "normal,build"]),
    ("cargo test --workspace", ["--workspace", "-e", "normal,build,dev"]),
    ("cargo test -p sonde-e2e", ["-p", "sonde-e2e", "-e", "normal,build,dev"]),
    ("cargo test -p sonde", ["-p", "sonde", "-e", "normal,build,dev"]),
]


def features(args: list[str]) -> dict[str, set[str]]:
    """package id -> its sets of enabled features, as one resolution of `cargo tree`
    has them (a package built for build scripts and for the binary may have two)."""
    out = subprocess.run(
        ["cargo", "tree", "--prefix", "none", "-f", "{p}|{f}", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = {}
    for line in out.splitlines():
        line = line.removesuffix(" (*)")
        if "|" in line:
            package, feats = line.split("|", 1)
            found.setdefault(package, set()).add(f"[{feats}]")
    return found


def units(cargo_args: list[str]) -> set[tuple]:
    """The units a cargo command would compile: (package, target, mode,
    features, profile settings), the profile's name left out (cargo's
    `test` and `dev` profiles share their artifacts where the settings match)."""
    out = subprocess.run(
        ["cargo", *cargo_args, "--unit-graph", "-Z", "unstable-options"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "RUSTC_BOOTSTRAP": "1"},
    ).stdout
    found = set()
    for u in json.loads(out)["units"]:
        profile = {k: v for k, v in u["profile"].items() if k != "name"}
        found.add(
            (
                u["pkg_id"].rsplit("#", 1)[-1],
                u["target"]["name"],
                u["mode"],
                tuple(sorted(u["features"])),
                json.dumps(profile, sort_keys=True),
                u.get("platform"),
            )
        )
    return found


def early_build_is_reused() -> int:
    deps = [a for d in workspace_deps.direct_dependencies() for a in ("-p", d)]
    early = units(["build", "--lib", *deps])
    later = units(["test", "--workspace", "--no-run"])
    extra = sorted(early - later)
    for u in extra:
        print(f"{u[0]} {u[1]} ({u[2]}, features {', '.join(u[3]) or 'none'}): built early, not used by the tests")
    if extra:
        print(f"check_features: {len(extra)} unit(s) of the early dependency build are not the tests' own")
        return 1
    print(f"check_features: the early dependency build's {len(early)} units are all the tests' own")
    return 0


def main() -> int:
    (base_name, base_args), *others = COMMANDS
    base = features(base_args)
    bad = 0
    for name, args in others:
        other = features(args)
        for package, feats in sorted(base.items()):
            if package in other and other[package] != feats:
                bad += 1
                print(
                    f"{package}: `{base_name}` builds it with {' '.join(sorted(feats))}, "
                    f"`{name}` with {' '.join(sorted(other[package]))}"
                )
    if bad:
        print(
            f"check_features: {bad} difference(s): sonde would be compiled once per command; "
            "ask for the missing features in host/Cargo.toml's [dependencies]"
        )
        return 1
    print(f"check_features: {len(base)} packages under sonde, the same features for {len(COMMANDS)} commands")
    return 0


if __name__ == "__main__":
    sys.exit(max(main(), early_build_is_reused()))
