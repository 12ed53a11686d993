#!/usr/bin/env bash
# Builds the plugins workspace (plugins/) for wasm32-wasip2 and copies the
# components where the host looks for them:
#   target/plugins/bundled/   plugins `sonde` runs by default (sysmetrics, determined, paramserver, clockwork, dlrover, mpi, bottleneck)
#   target/plugins/testing/   components for the host's tests (testbed, wrongworld, legacy01)
#   target/plugins/examples/  the SDK's example plugins (plugins/sdk/examples/), each a component, and the
#                             Rust halves of plugins/examples/ (step_outliers, serving_limiter; their Python
#                             and JavaScript twins are built by the tests and ./dev bench-guests)
# Runnable from any directory. Files are replaced only when their content
# changed, so a host watching these folders does not see spurious reloads.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target=wasm32-wasip2
out="$root/plugins/target/$target/release"

# Idempotent; prints nothing useful when the target is already installed.
rustup target add "$target" >/dev/null 2>&1 || rustup target add "$target"

cargo build --manifest-path "$root/plugins/Cargo.toml" --workspace --release --target "$target"
# The SDK's examples are whole plugins too: built the same way, so one that no
# longer builds as a component fails here.
cargo build --manifest-path "$root/plugins/Cargo.toml" -p sonde-plugin-sdk --examples --release --target "$target"
# Every file there is one (each needs an [[example]] with crate-type cdylib in plugins/sdk/Cargo.toml).
examples=()
for f in "$root"/plugins/sdk/examples/*.rs; do
    examples+=("$(basename "$f" .rs)")
done

# A component starts with "\0asm" and layer 1 (0d 00 01 00); a core module
# would have version 1 (01 00 00 00) and the host would refuse it.
is_component() {
    [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = "0061736d0d000100" ]
}

install_component() { # <crate> <folder under target/plugins> [<folder under the cargo output>]
    local src="$out/${3:+$3/}$1.wasm" dir="$root/target/plugins/$2"
    local dst="$dir/$1.wasm"
    if ! is_component "$src"; then
        echo "error: $src is not a wasm component" >&2
        exit 1
    fi
    mkdir -p "$dir"
    local note="unchanged"
    if ! cmp -s "$src" "$dst"; then
        # Copy then rename, so a watcher never sees a half-written file.
        cp "$src" "$dir/.$1.wasm.tmp"
        mv -f "$dir/.$1.wasm.tmp" "$dst"
        note="updated"
    fi
    printf '  %-48s %8s bytes  %s\n' "target/plugins/$2/$1.wasm" "$(wc -c <"$dst" | tr -d ' ')" "$note"
}

echo "plugins:"
install_component sysmetrics bundled
install_component determined bundled
install_component paramserver bundled
install_component clockwork bundled
install_component dlrover bundled
install_component mpi bundled
install_component bottleneck bundled
install_component testbed testing
install_component wrongworld testing
install_component legacy01 testing
for example in "${examples[@]}"; do
    install_component "$example" examples examples
done
install_component step_outliers examples
install_component serving_limiter examples
