#!/usr/bin/env bash
# Builds the MPI probe and the MPI test programs with the installed MPI's
# compiler wrapper (mpicc), so the probe uses that MPI's own handle types:
#   target/probes/libsonde_mpi.so   the probe (LD_PRELOAD it into MPI ranks)
#   target/mpi/imbalance            the imbalanced job of tests/tests/mpi.rs
#   target/mpi/callcost             the per-call benchmark of scripts/bench-mpi.sh
# Each output is rebuilt only when its source is newer. Runnable from anywhere.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if ! command -v mpicc >/dev/null; then
    echo "error: mpicc not found: install Open MPI (apt-get install -y --no-install-recommends openmpi-bin libopenmpi-dev; \`just setup\` does it)" >&2
    exit 1
fi
mkdir -p "$root/target/probes" "$root/target/mpi"

build() { # <output> <source> <mpicc args...>
    local out="$1" src="$2"
    shift 2
    if [ "$out" -nt "$src" ]; then
        printf '  %-40s unchanged\n' "${out#"$root"/}"
        return
    fi
    mpicc "$@" -o "$out.tmp" "$src"
    mv -f "$out.tmp" "$out"
    printf '  %-40s built\n' "${out#"$root"/}"
}

echo "mpi probe:"
build "$root/target/probes/libsonde_mpi.so" "$root/probes/mpi/sonde_mpi_probe.c" \
    -O2 -g -Wall -Wextra -Werror -fPIC -shared -fvisibility=default -lrt -ldl -lpthread
build "$root/target/mpi/imbalance" "$root/tests/mpi/imbalance.c" -O2 -g -Wall
build "$root/target/mpi/callcost" "$root/tests/mpi/callcost.c" -O2 -g -Wall
