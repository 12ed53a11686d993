#!/usr/bin/env bash
# Builds the fake NVML library (tests/fake-nvml/) that the GPU tests and the
# NVML benchmark load in place of NVIDIA's libnvidia-ml.so.1:
#   target/fake-nvml/libnvidia-ml.so.1          every entry point sonde uses
#   target/fake-nvml/minimal/libnvidia-ml.so.1  utilisation and memory only (a
#                                               driver missing symbols sonde asks for)
# Rebuilt only when the source is newer. Runnable from anywhere; needs cc.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="$root/tests/fake-nvml/fake_nvml.c"
mkdir -p "$root/target/fake-nvml/minimal"

build() { # <output> <cc args...>
    local out="$1"
    shift
    if [ "$out" -nt "$src" ]; then
        printf '  %-45s unchanged\n' "${out#"$root"/}"
        return
    fi
    cc -O2 -g -Wall -Wextra -Werror -fPIC -shared -fvisibility=hidden -Wl,-soname,libnvidia-ml.so.1 \
        "$@" -o "$out.tmp" "$src" -lpthread -ldl
    mv -f "$out.tmp" "$out"
    printf '  %-45s built\n' "${out#"$root"/}"
}

echo "fake NVML:"
build "$root/target/fake-nvml/libnvidia-ml.so.1"
build "$root/target/fake-nvml/minimal/libnvidia-ml.so.1" -DFAKE_NVML_MINIMAL
