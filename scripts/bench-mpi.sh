#!/usr/bin/env bash
# The MPI probe's overhead on real Open MPI jobs (`just bench-mpi`):
#  0. where a tick's time goes: tests/mpi/walkcost.c times one stack walk from
#     inside a blocking MPI_Recv each way (frame pointers, libunwind from the
#     wrapper's frame, libunwind from the signal handler; libunwind's caching
#     policies) and the tick's signal itself;
#  1. cost per wrapped MPI call: a tight loop of MPI_Comm_rank (a local call)
#     and of a one-double MPI_Allreduce, 2 ranks (callcost is built with frame
#     pointers: its stacks take the frame-pointer walk);
#  2. sampling cost: the imbalanced job of the end-to-end test (NP ranks,
#     default 2 = no oversubscription on a 2-core machine; no frame pointers);
#  3. real MPI programs, unmodified, as Debian ships them (stripped, no frame
#     pointers: the probe unwinds with libunwind): NetPIPE (NPopenmpi, 2 ranks,
#     sizes up to NETPIPE_MAX=65536 bytes, 2000 round trips each; its own
#     figures: mean latency of messages up to 64 bytes, and bandwidth at the
#     largest size) and HPCC (4 ranks, Debian's example input: HPL N=HPCC_N=1000
#     on a 2x2 grid, then the whole suite; mpirun wall time).
# Modes: without the probe; loaded but not sampling (MPI_SONDE_DISABLE=1: the
# wrappers alone; parts 1-2); stacks at 100 Hz; the call site alone at 1 kHz
# (MPI_SONDE_DEPTH=1: no walk, what the probe cost before call stacks, the
# budget); stacks at 1 kHz (default depth 32), whose runs also report the
# probe's own count of walks and their mean time (MPI_SONDE_VERBOSE=1). The
# probe streams to a running sonde with the mpi plugin. Modes run interleaved,
# medians over RUNS runs (default 5), ratios to no probe, and each figure's
# spread over its runs ((max - min) / median): the spread without the probe is
# this machine's noise. ONLY=walk runs part 0 alone, ONLY=programs part 3 alone.
# Needs the probe and programs (scripts/build-mpi-probe.sh) and a sonde binary
# (release if built, else debug) with the mpi plugin (scripts/build-plugins.sh).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
runs="${RUNS:-5}"
probe="$root/target/probes/libsonde_mpi.so"
sonde="$root/target/release/sonde"
[ -x "$sonde" ] || sonde="$root/target/debug/sonde"
for f in "$probe" "$root/target/mpi/callcost" "$root/target/mpi/imbalance" "$root/target/mpi/walkcost" "$sonde" "$root/target/plugins/bundled/mpi.wasm"; do
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

load() { cut -d' ' -f1-3 /proc/loadavg; }
# Figures: stats.py row <label> <values file> <no-probe values file> <format> [diff]
#          stats.py walks <label> <ranks> <wall times file> <stderr files of MPI_SONDE_VERBOSE=1 runs...>
#          stats.py callgrind < callgrind_annotate --inclusive=yes --tree=caller --threshold=100 output
cat >"$work/stats.py" <<'PY'
import re, statistics, sys

def values(path):
    return [float(x) for x in open(path) if x.strip()]

if sys.argv[1] == "row":
    label, path, base, fmt = sys.argv[2:6]
    v, b = values(path), statistics.median(values(base))
    m = statistics.median(v)
    diff = f"  ({m - b:+.1f})" if sys.argv[6:] == ["diff"] else ""
    print(f"   {label:<46} {m:>11{fmt}}{diff}  ratio {m / b:.3f}  spread {(max(v) - min(v)) / m * 100:4.1f} %")
elif sys.argv[1] == "callgrind":
    # Blocks of "<cost> < caller (Nx)" lines, then "<cost> * callee": the
    # instructions each caller spent in the callee, and how many calls.
    calls, callers = {}, []
    for line in sys.stdin:
        c = re.match(r"\s*([\d,]+) .*< (\S+) \(([\d,]+)x\)", line)
        e = re.match(r"\s*([\d,]+) .*\*  (\S+)", line)
        if c:
            callers.append((c[2].split(":")[-1], int(c[1].replace(",", "")), int(c[3].replace(",", ""))))
        elif e:
            for caller, ir, n in callers:
                calls[(caller, e[2].split(":")[-1])] = (ir, n)
            callers = []
    for callee, way in [("stackwalk_fp", "frame pointers, from the wrapper's frame"),
                        ("stackwalk_libunwind", "libunwind, from the wrapper's frame"),
                        ("backtrace", "libunwind, from the signal handler")]:
        ir, n = next((v for (caller, e), v in calls.items() if e == callee and caller.startswith("on_tick")), (0, 0))
        print(f"   {way:<42} {ir / max(n, 1):8.0f} instructions per walk (callgrind, {n} walks)")
else:
    label, ranks, walls, files = sys.argv[2], int(sys.argv[3]), values(sys.argv[4]), sys.argv[5:]
    walks = ns = reused = 0
    by, medians = set(), []
    for path in files:
        for line in open(path):
            w = re.search(r"stacks: (\d+) walks by (.+?), (\d+) ns each on average, median (\d+)-\d+ ns.*; (\d+) ticks", line)
            if w and int(w[1]):
                walks += int(w[1]); by.add(w[2]); ns += int(w[1]) * int(w[3]); medians.append(int(w[4])); reused += int(w[5])
    runs = len(files)
    print(f"   {label}: {walks / runs:.0f} walks per run by {', '.join(sorted(by)) or '?'}, "
          f"mean {ns / max(walks, 1):.0f} ns, median of the ranks' medians {statistics.median(medians or [0]):.0f} ns "
          f"({ns / runs / 1e6:.1f} ms of walking per run, all ranks: "
          f"{ns / runs / 1e9 / (statistics.median(walls) * ranks) * 100:.2f} % of the ranks' time); "
          f"{reused / runs:.0f} more ticks per run took the stack of their call's walk")
PY
row() { python3 "$work/stats.py" row "$@"; }

echo "sonde MPI probe overhead: $(nproc) cores, $(mpirun --version | head -1), $runs runs each, medians"
echo "host: $(uname -srm); sonde: ${sonde#"$root"/}; load average at start $(load)"
echo
# Modes run interleaved (one run of each, then again) so that load from other
# processes on the machine spreads over all of them instead of biasing one.
modes="none off 100 site1000 1000"
label() {
    case "$1" in
        none) echo "no probe" ;;
        off) echo "probe loaded, not sampling" ;;
        site1000) echo "probe, 1000 Hz, call site only" ;;
        *) echo "probe, $1 Hz, stacks" ;;
    esac
}
probe_args() { # <mode> -> mpirun -x arguments
    local sampling="-x LD_PRELOAD=$probe -x MPI_SONDE_ENDPOINT=127.0.0.1:$port -x MPI_SONDE_JOB=bench"
    case "$1" in
        none) ;;
        off) echo "-x LD_PRELOAD=$probe -x MPI_SONDE_DISABLE=1" ;;
        site1000) echo "$sampling -x MPI_SONDE_HZ=1000 -x MPI_SONDE_DEPTH=1" ;;
        1000) echo "$sampling -x MPI_SONDE_HZ=1000 -x MPI_SONDE_VERBOSE=1" ;;
        *) echo "$sampling -x MPI_SONDE_HZ=$1" ;;
    esac
}

only="${ONLY:-all}"
if [ "$only" = all ] || [ "$only" = walk ]; then
    echo "0. where a tick's time goes (load average $(load))"
    mpirun_ -np 2 "$root/target/mpi/walkcost"
    if command -v valgrind >/dev/null; then
        # The same walks counted in instructions, which load does not change
        # (per-thread cache; rank 0 under callgrind, rank 1 as it is).
        mpirun_ -np 1 valgrind --tool=callgrind --callgrind-out-file="$work/walk.callgrind" \
            "$root/target/mpi/walkcost" 27 3 walks : -np 1 "$root/target/mpi/walkcost" 27 3 walks >/dev/null 2>&1
        callgrind_annotate --inclusive=yes --tree=caller --threshold=100 "$work/walk.callgrind" | python3 "$work/stats.py" callgrind
    fi
    echo
fi

if [ "$only" = all ]; then
echo "1. cost per wrapped call: 2 ranks, tight loop, ns per call on rank 0 (load average $(load))"
for what in comm_rank allreduce; do
    n=2000000; [ "$what" = allreduce ] && n=200000
    for m in $modes; do : >"$work/call.$what.$m"; : >"$work/wall.call.$what.$m"; done
    for i in $(seq "$runs"); do
        for m in $modes; do
            t0=$(date +%s.%N)
            # shellcheck disable=SC2046
            mpirun_ -np 2 $(probe_args "$m") "$root/target/mpi/callcost" "$what" "$n" 2>"$work/err.call.$what.$m.$i" |
                awk '{print $(NF-1)}' >>"$work/call.$what.$m"
            t1=$(date +%s.%N)
            python3 -c "print($t1-$t0)" >>"$work/wall.call.$what.$m"
        done
    done
    for m in $modes; do row "MPI_$what, $(label "$m")" "$work/call.$what.$m" "$work/call.$what.none" .1f diff; done
    python3 "$work/stats.py" walks "MPI_$what at 1 kHz" 2 "$work/wall.call.$what.1000" "$work"/err.call."$what".1000.*
done
echo
np="${NP:-2}"
echo "2. sampling cost: the imbalanced job, $np ranks, 20 steps, rank r computes (r+1) x ~20 ms of fixed arithmetic per step (load average $(load))"
for m in $modes; do : >"$work/loop.$m"; : >"$work/wall.$m"; done
for i in $(seq "$runs"); do
    for m in $modes; do
        t0=$(date +%s.%N)
        # shellcheck disable=SC2046
        mpirun_ -np "$np" $(probe_args "$m") "$root/target/mpi/imbalance" 20 20 2>"$work/err.loop.$m.$i" |
            awk '{print $(NF-1)}' >>"$work/loop.$m"
        t1=$(date +%s.%N)
        python3 -c "print($t1-$t0)" >>"$work/wall.$m"
    done
done
for m in $modes; do row "job time (MPI_Wtime), $(label "$m")" "$work/loop.$m" "$work/loop.none" .4f; done
for m in $modes; do row "mpirun wall time, $(label "$m")" "$work/wall.$m" "$work/wall.none" .3f; done
python3 "$work/stats.py" walks "imbalanced job at 1 kHz" "$np" "$work/wall.1000" "$work"/err.loop.1000.*
echo
fi

if [ "$only" = all ] || [ "$only" = programs ]; then
echo "3. real MPI programs (Debian's binaries, unmodified), medians and ratios to no probe (load average $(load))"
for p in NPopenmpi hpcc; do command -v "$p" >/dev/null || { echo "missing $p: apt-get install netpipe-openmpi hpcc (\`just bench-mpi\` does it)" >&2; exit 1; }; done
sed -e "s/^1000 *Ns/${HPCC_N:-1000}         Ns/" /usr/share/doc/hpcc/examples/_hpccinf.txt >"$work/hpccinf.txt"
program_modes="none 100 site1000 1000"
for prog in netpipe hpcc nplat npbw; do for m in $program_modes; do : >"$work/$prog.$m"; done; done
for i in $(seq "$runs"); do
    for m in $program_modes; do
        for prog in netpipe hpcc; do
            t0=$(date +%s.%N)
            # shellcheck disable=SC2046
            case $prog in
                netpipe) mpirun_ -np 2 $(probe_args "$m") NPopenmpi -n 2000 -p 0 -u "${NETPIPE_MAX:-65536}" -o "$work/np.out" >/dev/null 2>"$work/err.netpipe.$m.$i"
                    # np.out: bytes, Mbps, seconds per one-way transfer
                    awk '$1 <= 64 { s += $3; n++ } END { printf "%.4f\n", s / n * 1e6 }' "$work/np.out" >>"$work/nplat.$m"
                    tail -1 "$work/np.out" | awk '{ print $2 }' >>"$work/npbw.$m" ;;
                hpcc) (cd "$work" && mpirun_ -np 4 $(probe_args "$m") hpcc >/dev/null 2>"$work/err.hpcc.$m.$i" && grep -q "End of HPC Challenge" hpccoutf.txt && rm -f hpccoutf.txt) ;;
            esac
            t1=$(date +%s.%N)
            python3 -c "print($t1-$t0)" >>"$work/$prog.$m"
        done
    done
done
for what in "nplat NetPIPE latency, us (<= 64 B)" "npbw NetPIPE bandwidth, Mbps (64 KiB)" "netpipe NetPIPE wall time, s (2 ranks)" \
    "hpcc HPCC wall time, s (4 ranks)"; do
    prog=${what%% *}
    for m in $program_modes; do row "${what#* }, $(label "$m")" "$work/$prog.$m" "$work/$prog.none" .4f; done
done
python3 "$work/stats.py" walks "NetPIPE at 1 kHz" 2 "$work/netpipe.1000" "$work"/err.netpipe.1000.*
python3 "$work/stats.py" walks "HPCC at 1 kHz" 4 "$work/hpcc.1000" "$work"/err.hpcc.1000.*
rows=$(curl -s "http://127.0.0.1:$port/api/ingest" | python3 -c 'import json,sys; d=json.load(sys.stdin)["json"]; print(d["requests"], "posts,", d["rows"], "rows")')
echo
echo "sonde took $rows from the probe during the benchmark"
fi
echo "load average at the end $(load)"
