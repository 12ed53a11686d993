#!/usr/bin/env bash
# Packs the release tarball from a built release binary (`./dev dist` builds
# it first: the plugins, the dashboard, then `cargo build --release`):
#
#   target/dist/sonde-<version>-<arch>-linux.tar.gz          the tarball
#   target/dist/sonde-<version>-<arch>-linux.tar.gz.sha256   its SHA-256 (`sha256sum -c` reads it)
#
# DIST_SONDE_BIN packs another binary and DIST_OUT writes elsewhere
# (tests/tests/dist.rs packs the debug build into a temporary folder).
#
# The tarball holds one folder: `sonde` (the dashboard and the bundled plugins
# are inside it), LICENSE, README.md, docs/deploy.md, config/agent.toml and
# config/master.toml (examples for /etc/sonde/sonde.toml) and
# systemd/sonde-{agent,master}.service.
#
# Before packing it checks what it packs, so a tarball that would not work is
# never made: the binary carries every plugin of target/plugins/bundled/ and a
# built dashboard, both example configs pass `sonde --check-config`, and the
# units pass `systemd-analyze verify` (when systemd-analyze is installed;
# Debian's `systemd` package) with no warning at all.
# The archive is reproducible: sorted names, owner root, every mtime the last
# commit's time, gzip without a timestamp.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${DIST_SONDE_BIN:-$root/target/release/sonde}"
[ -x "$bin" ] || { echo "dist: $bin is missing: run \`cargo build --release -p sonde\` (./dev dist does)" >&2; exit 1; }

version="$("$bin" --version | awk '{ print $2 }')"
arch="$(uname -m)"
name="sonde-$version-$arch-linux"
out="${DIST_OUT:-$root/target/dist}"
stage="$out/$name"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

fail() { echo "dist: $*" >&2; exit 1; }

# --- what the binary carries
"$bin" plugins extract "$work/plugins" >/dev/null || fail "the binary carries no plugins (build it after ./dev plugins)"
for f in "$root"/target/plugins/bundled/*.wasm; do
    cmp -s "$f" "$work/plugins/$(basename "$f")" || fail "$(basename "$f") in the binary differs from $f: rebuild the binary"
done
carried=$(find "$work/plugins" -name '*.wasm' | wc -l)
built=$(find "$root/target/plugins/bundled" -name '*.wasm' | wc -l)
[ "$carried" = "$built" ] || fail "the binary carries $carried plugins, target/plugins/bundled/ holds $built"
# web/fallback.html's sentence: the page embedded when web/dist was not built
# (DIST_PLACEHOLDER_OK=1: a test's build on a machine without the dashboard).
[ "${DIST_PLACEHOLDER_OK:-}" = 1 ] || ! grep -qaF "This binary was built without the dashboard" "$bin" \
    || fail "the binary carries the placeholder page, not the dashboard (run ./dev web, then rebuild)"

# --- the example configs
for role in agent master; do
    SONDE_API__TOKEN=check SONDE_CLUSTER__TOKEN=check \
        "$bin" --config "$root/deploy/config/$role.toml" --role "$role" --data-dir "$work/data" --check-config >/dev/null \
        || fail "deploy/config/$role.toml does not pass --check-config"
done

# --- the systemd units, in a throwaway root holding the binary where they run it
if command -v systemd-analyze >/dev/null; then
    sysroot="$work/root"
    mkdir -p "$sysroot/usr/local/bin" "$sysroot/etc/systemd/system" "$sysroot/usr/lib/systemd"
    cp "$bin" "$sysroot/usr/local/bin/sonde"
    cp -r /usr/lib/systemd/system "$sysroot/usr/lib/systemd/"
    cp "$root"/deploy/systemd/*.service "$sysroot/etc/systemd/system/"
    # verify exits 0 on an unknown key or a bad value (it only warns): any output fails.
    report="$(systemd-analyze verify --root="$sysroot" sonde-agent.service sonde-master.service 2>&1)" \
        || fail "systemd-analyze verify: $report"
    [ -z "$report" ] || fail "systemd-analyze verify: $report"
    for unit in sonde-agent sonde-master; do
        systemd-analyze security --offline=yes --root="$sysroot" "$unit.service" 2>/dev/null \
            | sed -n "s/^→ Overall exposure level for \(.*\)/  systemd-analyze security: \1/p"
    done
else
    echo "  (systemd-analyze is not installed: the units were not verified)"
fi

# --- the tarball
rm -rf "$stage"
mkdir -p "$stage/config" "$stage/systemd" "$stage/docs"
install -m 0755 "$bin" "$stage/sonde"
install -m 0644 "$root/LICENSE" "$root/README.md" "$stage/"
install -m 0644 "$root/docs/deploy.md" "$stage/docs/"
install -m 0644 "$root"/deploy/config/*.toml "$stage/config/"
install -m 0644 "$root"/deploy/systemd/*.service "$stage/systemd/"
epoch="$(git -C "$root" log -1 --format=%ct 2>/dev/null || echo 0)"
tarball="$out/$name.tar.gz"
tar -C "$out" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" -cf - "$name" | gzip -n >"$tarball"
(cd "$out" && sha256sum "$name.tar.gz" >"$name.tar.gz.sha256")
rm -rf "$stage"

printf '%s  %s bytes (the binary %s bytes, %s plugins inside)\n' \
    "$tarball" "$(wc -c <"$tarball" | tr -d ' ')" "$(wc -c <"$bin" | tr -d ' ')" "$carried"
printf '%s\n' "$tarball.sha256"
