#!/usr/bin/env python3
"""Checks that the host's modules import each other without circles.

Reads host/src/**/*.rs, draws an edge for every `use crate::...`, `use super::...`
(and `crate::`/`super::` paths written inline in code) from the module a file
belongs to, to the module the path names, and looks for cycles.

The nodes:
  * a top-level module of the crate (`plugin`, `ingest`, `run`, ...);
  * inside `ingest/`, every file (`ingest`, `ingest::error`, `ingest::otlp::wire`,
    ...), since the receivers there must not lean on one another;
  * a component's settings file, `<module>/…/config.rs` (`plugin::config`): the
    section structs sit beside their component (Vector's habit) but are plain
    data that `crate::config` assembles, so they stand as nodes of their own.
    Anything they import that leads back to `config` is still a cycle.
  * `config::check`, the helper every settings file validates its keys with: a
    leaf of its own, so that they can use it while `config` assembles them.

Test modules (`#[cfg(test)] mod tests { ... }` and `#[cfg(test)] mod x;`) are left
out: a test may drive a file through the caller it is written against.

Usage: check_layers.py [SRC_DIR]  (default: host/src)

Prints the edges of every cycle and exits 1, or one summary line and exits 0.
Python 3 standard library only.
"""

import re
import sys
from pathlib import Path

ROOT = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "host" / "src"
FINE = {"ingest"}  # top-level modules whose files are nodes of their own
LEAVES = {("config", "check")}  # files that are nodes of their own


def module_path(f: Path) -> list[str]:
    """host/src/ingest/otlp/wire.rs -> ['ingest', 'otlp', 'wire']; mod.rs and lib.rs name their folder."""
    parts = list(f.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return parts


def strip_tests_and_comments(src: str) -> str:
    # Comments and string literals cannot hold imports.
    src = re.sub(r"//[^\n]*", "", src)
    src = re.sub(r"/\*.*?\*/", "", src, flags=re.S)
    src = re.sub(r'r#*"(?:.|\n)*?"#*', '""', src)
    src = re.sub(r'"(?:\\.|[^"\\])*"', '""', src)
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*([;{])", src):
        if m.start() < i:
            continue
        out.append(src[i : m.start()])
        if m.group(1) == ";":
            i = m.end()
            continue
        depth, j = 1, m.end()
        while j < len(src) and depth:
            depth += {"{": 1, "}": -1}.get(src[j], 0)
            j += 1
        i = j
    out.append(src[i:])
    return "".join(out)


def test_files() -> set[Path]:
    """Files that are whole test modules (`#[cfg(test)] mod tests;`)."""
    found = set()
    for f in ROOT.rglob("*.rs"):
        src = f.read_text()
        for m in re.finditer(r"#\[cfg\(test\)\]\s*mod\s+(\w+)\s*;", src):
            base = f.parent if f.name in ("mod.rs", "lib.rs", "main.rs") else f.with_suffix("")
            for cand in (base / f"{m.group(1)}.rs", base / m.group(1) / "mod.rs"):
                found.add(cand)
    return found


def node(parts: list[str], files: set[tuple[str, ...]]) -> str | None:
    """The node a module path belongs to (None for paths outside the crate's modules)."""
    if not parts:
        return None
    for leaf in LEAVES:
        if tuple(parts[: len(leaf)]) == leaf and leaf in files:
            return "::".join(leaf)
    if parts[0] in FINE:
        # The longest prefix that is a file.
        for n in range(len(parts), 0, -1):
            if tuple(parts[:n]) in files:
                return "::".join(parts[:n])
        return parts[0]
    # A settings file at any depth (`export::remote_write::config`).
    for n in range(2, len(parts) + 1):
        if parts[n - 1] == "config" and tuple(parts[:n]) in files:
            return "::".join(parts[:n])
    return parts[0] if (parts[0],) in files else None


def targets(src: str, here: list[str], is_dir_file: bool) -> list[list[str]]:
    """Module paths named by crate::/super::/self:: paths in `src`, resolved to absolute form."""
    # The module a `super::` counts from: a file's own module.
    found = []
    # Expand `use a::{b, c::{d}}` groups into single paths.
    for m in re.finditer(r"\buse\s+([^;]+);", src):
        for p in expand(m.group(1).strip()):
            found.append(p)
    # Inline paths in code: crate::x::y, super::x.
    for m in re.finditer(r"(?<![\w:])((?:crate|super|self)(?:::\w+)+)", src):
        found.append(m.group(1))
    out = []
    for p in found:
        segs = [s for s in p.split("::") if s]
        segs = [s.split(" as ")[0].strip() for s in segs]
        if not segs:
            continue
        if segs[0] == "crate":
            out.append(segs[1:])
        elif segs[0] in ("super", "self"):
            base = list(here)
            while segs and segs[0] in ("super", "self"):
                if segs[0] == "super":
                    base = base[:-1]
                segs = segs[1:]
            out.append(base + segs)
    return out


def expand(tree: str) -> list[str]:
    tree = re.sub(r"\s+", "", tree)
    m = re.match(r"^(.*?)::\{(.*)\}$", tree)
    if not m:
        return [tree]
    prefix, inner = m.group(1), m.group(2)
    items, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
            continue
        depth += {"{": 1, "}": -1}.get(ch, 0)
        cur += ch
    if cur:
        items.append(cur)
    out = []
    for it in items:
        for sub in expand(it):
            out.append(prefix if sub == "self" else f"{prefix}::{sub}")
    return out


def main() -> int:
    tests = test_files()
    sources = {f: module_path(f) for f in sorted(ROOT.rglob("*.rs")) if f not in tests and f.name != "main.rs"}
    files = {tuple(p) for p in sources.values() if p}
    edges: dict[str, set[str]] = {}
    for f, here in sources.items():
        src = strip_tests_and_comments(f.read_text())
        frm = node(here, files) if here else None
        if frm is None:
            continue
        edges.setdefault(frm, set())
        for t in targets(src, here, f.name == "mod.rs"):
            to = node(t, files)
            if to is None or to == frm:
                continue
            # A module naming its own children (`pub mod x; use self::x::...`) is
            # a parent using a child: an edge like any other.
            edges[frm].add(to)
            edges.setdefault(to, set())

    cycles = find_cycles(edges)
    if cycles:
        print(f"import cycles in host/src ({len(cycles)}):")
        for c in cycles:
            print("  " + " -> ".join(c + [c[0]]))
        return 1
    n_edges = sum(len(v) for v in edges.values())
    print(f"check_layers: {len(edges)} modules, {n_edges} import edges, no cycles")
    return 0


def find_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Cycles among the strongly connected components with more than one node (Tarjan)."""
    index, low, stack, on, sccs = {}, {}, [], set(), []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in sorted(edges):
        if v not in index:
            strong(v)
    cycles, seen = [], set()
    for comp in sccs:
        members = set(comp)
        # The shortest cycle through each node of the component (breadth-first),
        # each cycle once, so every edge that closes a circle is shown.
        for start in comp:
            prev = {start: None}
            queue = [start]
            found = None
            while queue and found is None:
                v = queue.pop(0)
                for w in sorted(edges[v]):
                    if w not in members:
                        continue
                    if w == start:
                        found = v
                        break
                    if w not in prev:
                        prev[w] = v
                        queue.append(w)
            path = []
            v = found
            while v is not None:
                path.append(v)
                v = prev[v]
            path.reverse()
            i = path.index(min(path))
            key = tuple(path[i:] + path[:i])
            if key not in seen:
                seen.add(key)
                cycles.append(list(key))
    return cycles


if __name__ == "__main__":
    sys.exit(main())
