#!/usr/bin/env bash
# The MPI probe's overhead on real Open MPI jobs (`just bench-mpi`):
#  1. cost per wrapped MPI call: a tight loop of MPI_Comm_rank (a local call)
#     and of a one-double MPI_Allreduce, 2 ranks: without the probe, with it
#     loaded but not sampling (MPI_SONDE_DISABLE=1: the wrappers alone), and
#     sampling at 100 Hz and 1 kHz;
#  2. sampling cost: the imbalanced job of the end-to-end test (NP ranks,
#     default 2 = no oversubscription on a 2-core machine) in the same modes,
#     streaming to a running sonde with the mpi plugin;
#  3. real MPI programs, unmodified, as Debian ships them (stripped, no frame
#     pointers: the probe unwinds with libunwind): NetPIPE (NPopenmpi, 2 ranks,
#     sizes up to NETPIPE_MAX=65536 bytes, 2000 round trips each; its own
#     figures: mean latency of messages up to 64 bytes, and bandwidth at the
#     largest size) and HPCC (4 ranks, Debian's example input: HPL N=HPCC_N=1000
#     on a 2x2 grid, then the whole suite; mpirun wall time), without the probe
#     and sampling stacks at 100 Hz and 1 kHz, as ratios to no probe.
# Medians over RUNS runs (default 5). ONLY=programs runs part 3 alone. Needs the probe and programs
# (scripts/build-mpi-probe.sh) and a sonde binary (release if built, else debug)
# with the mpi plugin (scripts/build-plugins.sh).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
runs="${RUNS:-5}"
probe="$root/target/probes/libsonde_mpi.so"
sonde="$root/target/release/sonde"
[ -x "$sonde" ] || sonde="$root/target/debug/sonde"
for f in "$probe" "$root/target/mpi/callcost" "$root/target/mpi/imbalance" "$sonde" "$root/target/plugins/bundled/mpi.wasm"; do
    [ -e "$f" ] || { echo "missing $f: run scripts/build-mpi-probe.sh, scripts/build-plugins.sh and cargo build -p sonde" >&2; exit 1; }
done

work="$(mktemp -d)"
sonde_pid=""
cleanup() { [ -z "$sonde_pid" ] || kill "$sonde_pid" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
mkdir -p "$work/plugins" "$work/sinks" "$work/data"
cp "$root/target/plugins/bundled/mpi.wasm" "$work/plugins/"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
env -u SONDE_BIN "$sonde" --data-dir "$work/data" --plugins-dir "$work/plugins" --sinks-dir "$work/sinks" \
    --listen "127.0.0.1:$port" --set ingest.otlp_grpc_listen=off --set ingest.otlp_http_listen=off >"$work/sonde.log" 2>&1 &
sonde_pid=$!
for _ in $(seq 200); do curl -sf "http://127.0.0.1:$port/api/ready" >/dev/null && break; sleep 0.1; done

mpirun_() { mpirun --allow-run-as-root --oversubscribe --bind-to none -x IMBALANCE_WORK=fixed "$@"; }

echo "sonde MPI probe overhead: $(nproc) cores, $(mpirun --version | head -1), $runs runs each, medians"
echo "host: $(uname -srm); sonde: ${sonde#"$root"/}"
echo
# Modes run interleaved (one run of each, then again) so that load from other
# processes on the machine spreads over all of them instead of biasing one.
modes="none off 100 1000"
label() { case "$1" in none) echo "no probe";; off) echo "probe loaded, not sampling";; *) echo "probe, $1 Hz";; esac; }
probe_args() { # <mode> -> mpirun -x arguments
    case "$1" in
        none) ;;
        off) echo "-x LD_PRELOAD=$probe -x MPI_SONDE_DISABLE=1" ;;
        *) echo "-x LD_PRELOAD=$probe -x MPI_SONDE_ENDPOINT=127.0.0.1:$port -x MPI_SONDE_HZ=$1 -x MPI_SONDE_JOB=bench" ;;
    esac
}
med() { python3 -c 'import sys,statistics; v=[float(x) for x in open(sys.argv[1])]; print(f"{statistics.median(v):{sys.argv[2]}}")' "$@"; }

only="${ONLY:-all}"
[ "$only" = programs ] || {
echo "1. cost per wrapped call: 2 ranks, tight loop, ns per call on rank 0"
for what in comm_rank allreduce; do
    n=2000000; [ "$what" = allreduce ] && n=200000
    for m in $modes; do : >"$work/call.$what.$m"; done
    for _ in $(seq "$runs"); do
        for m in $modes; do
            # shellcheck disable=SC2046
            mpirun_ -np 2 $(probe_args "$m") "$root/target/mpi/callcost" "$what" "$n" | awk '{print $(NF-1)}' >>"$work/call.$what.$m"
        done
    done
    base=$(med "$work/call.$what.none" .1f)
    for m in $modes; do
        v=$(med "$work/call.$what.$m" .1f)
        printf '   MPI_%-10s %-28s %9s ns/call  (%+.1f ns)\n' "$what" "$(label "$m")" "$v" "$(python3 -c "print($v-$base)")"
    done
done
echo
np="${NP:-2}"
echo "2. sampling cost: the imbalanced job, $np ranks, 20 steps, rank r computes (r+1) x ~20 ms of fixed arithmetic per step"
for m in $modes; do : >"$work/loop.$m"; : >"$work/wall.$m"; done
for _ in $(seq "$runs"); do
    for m in $modes; do
        t0=$(date +%s.%N)
        # shellcheck disable=SC2046
        mpirun_ -np "$np" $(probe_args "$m") "$root/target/mpi/imbalance" 20 20 | awk '{print $(NF-1)}' >>"$work/loop.$m"
        t1=$(date +%s.%N)
        python3 -c "print($t1-$t0)" >>"$work/wall.$m"
    done
done
base=$(med "$work/loop.none" .4f)
printf '   %-28s %12s %10s %12s\n' "" "job (Wtime)" "vs none" "mpirun wall"
for m in $modes; do
    v=$(med "$work/loop.$m" .4f)
    printf '   %-28s %10s s %+9.1f%% %10s s\n' "$(label "$m")" "$v" "$(python3 -c "print(($v/$base-1)*100)")" "$(med "$work/wall.$m" .3f)"
done
 }

echo
echo "3. real MPI programs (Debian's binaries, unmodified), medians and ratios to no probe"
for p in NPopenmpi hpcc; do command -v "$p" >/dev/null || { echo "missing $p: apt-get install netpipe-openmpi hpcc (\`just bench-mpi\` does it)" >&2; exit 1; }; done
sed -e "s/^1000 *Ns/${HPCC_N:-1000}         Ns/" /usr/share/doc/hpcc/examples/_hpccinf.txt >"$work/hpccinf.txt"
program_modes="none 100 1000"
for prog in netpipe hpcc nplat npbw; do for m in $program_modes; do : >"$work/$prog.$m"; done; done
for _ in $(seq "$runs"); do
    for m in $program_modes; do
        for prog in netpipe hpcc; do
            t0=$(date +%s.%N)
            # shellcheck disable=SC2046
            case $prog in
                netpipe) mpirun_ -np 2 $(probe_args "$m") NPopenmpi -n 2000 -p 0 -u "${NETPIPE_MAX:-65536}" -o "$work/np.out" >/dev/null 2>&1
                    # np.out: bytes, Mbps, seconds per one-way transfer
                    awk '$1 <= 64 { s += $3; n++ } END { printf "%.4f\n", s / n * 1e6 }' "$work/np.out" >>"$work/nplat.$m"
                    tail -1 "$work/np.out" | awk '{ print $2 }' >>"$work/npbw.$m" ;;
                hpcc) (cd "$work" && mpirun_ -np 4 $(probe_args "$m") hpcc >/dev/null && grep -q "End of HPC Challenge" hpccoutf.txt && rm -f hpccoutf.txt) ;;
            esac
            t1=$(date +%s.%N)
            python3 -c "print($t1-$t0)" >>"$work/$prog.$m"
        done
    done
done
for what in "nplat NetPIPE latency, us (<= 64 B)" "npbw NetPIPE bandwidth, Mbps (64 KiB)" "hpcc HPCC wall time, s (4 ranks)"; do
    prog=${what%% *}
    base=$(med "$work/$prog.none" .4f)
    for m in $program_modes; do
        v=$(med "$work/$prog.$m" .4f)
        printf '   %-38s %-22s %12s  ratio %.3f\n' "${what#* }" "$(label "$m")" "$v" "$(python3 -c "print($v/$base)")"
    done
done
rows=$(curl -s "http://127.0.0.1:$port/api/ingest" | python3 -c 'import json,sys; d=json.load(sys.stdin)["json"]; print(d["requests"], "posts,", d["rows"], "rows")')
echo
echo "sonde took $rows from the probe during the benchmark"
