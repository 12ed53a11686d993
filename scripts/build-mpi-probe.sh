#!/usr/bin/env bash
# Builds the MPI probe and the MPI test programs with the installed MPI's
# compiler wrapper (mpicc), so the probe uses that MPI's own handle types:
#   target/probes/libsonde_mpi.so   the probe (LD_PRELOAD it into MPI ranks)
#   target/mpi/imbalance            the imbalanced job of tests/tests/mpi.rs
#   target/mpi/callcost             the per-call benchmark of scripts/bench-mpi.sh (with frame pointers)
#   target/mpi/walkcost             one stack walk timed each way, and the tick's signal (scripts/bench-mpi.sh)
#   target/mpi/stacks               known call stacks (tests/tests/mpi.rs), with frame pointers;
#   target/mpi/stacks-nofp          the same without frame pointers (the probe uses libunwind)
#   target/mpi/stacks-stripped      that one stripped of its symbol table and debug info
# Each output is rebuilt only when its source is newer. Runnable from anywhere.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if ! command -v mpicc >/dev/null; then
    echo "error: mpicc not found: install Open MPI (apt-get install -y --no-install-recommends openmpi-bin libopenmpi-dev; \`just setup\` does it)" >&2
    exit 1
fi
if [ ! -e /usr/include/x86_64-linux-gnu/libunwind.h ] && [ ! -e /usr/include/libunwind.h ]; then
    echo "error: libunwind.h not found: install libunwind (apt-get install -y --no-install-recommends libunwind-dev; \`just setup\` does it)" >&2
    exit 1
fi
mkdir -p "$root/target/probes" "$root/target/mpi"

build() { # <output> "<inputs>" <mpicc args...>: the .c inputs are compiled, every input decides freshness
    local out="$1" inputs="$2" fresh=1 f
    shift 2
    for f in $inputs; do [ "$out" -nt "$f" ] || fresh=0; done
    if [ "$fresh" = 1 ]; then
        printf '  %-40s unchanged\n' "${out#"$root"/}"
        return
    fi
    # shellcheck disable=SC2046 # the list of sources splits on purpose
    mpicc -o "$out.tmp" $(printf '%s\n' $inputs | grep '\.c$') "$@" # libraries after the sources: Debian links --as-needed
    mv -f "$out.tmp" "$out"
    printf '  %-40s built\n' "${out#"$root"/}"
}

echo "mpi probe:"
walk="$root/probes/mpi/stackwalk.c $root/probes/mpi/stackwalk.h"
build "$root/target/probes/libsonde_mpi.so" "$root/probes/mpi/sonde_mpi_probe.c $walk" \
    -O2 -g -Wall -Wextra -Werror -fPIC -shared -fvisibility=default -fno-omit-frame-pointer -fno-optimize-sibling-calls \
    -lunwind -lrt -ldl -lpthread
build "$root/target/mpi/imbalance" "$root/tests/mpi/imbalance.c" -O2 -g -Wall
# with frame pointers: the benchmark's tight loops measure the frame-pointer walk (libunwind when forced)
build "$root/target/mpi/callcost" "$root/tests/mpi/callcost.c" -O2 -g -Wall -fno-omit-frame-pointer
build "$root/target/mpi/walkcost" "$root/tests/mpi/walkcost.c $walk" -O2 -g -Wall -Wextra -Werror \
    -fno-omit-frame-pointer -fno-optimize-sibling-calls -I"$root/probes/mpi" -lunwind -lrt -lpthread
build "$root/target/mpi/stacks" "$root/tests/mpi/stacks.c" -O1 -g -Wall -fno-omit-frame-pointer
# no sibling calls: solve and refine end in a call of exchange, which -O2 would turn into a jump (their frames gone)
build "$root/target/mpi/stacks-nofp" "$root/tests/mpi/stacks.c" -O2 -g -Wall -fomit-frame-pointer -fno-optimize-sibling-calls
if [ ! "$root/target/mpi/stacks-stripped" -nt "$root/target/mpi/stacks-nofp" ]; then
    strip -o "$root/target/mpi/stacks-stripped" "$root/target/mpi/stacks-nofp"
    printf '  %-40s built\n' "target/mpi/stacks-stripped"
fi
