/* A small MPI program with known call stacks for the probe's stack tests
 * (tests/tests/mpi.rs): two paths reach the same MPI call,
 *
 *   main -> solve  -> exchange -> MPI_Sendrecv   (2 of 3 units of work per step)
 *   main -> refine -> exchange -> MPI_Sendrecv   (1 of 3)
 *
 * and the ranks are imbalanced (rank r computes (r+1) units before each
 * exchange), so every rank but the last stalls in MPI_Sendrecv with its
 * partner. With `deep`, main reaches solve through 200 levels of recursion
 * (`descend`), deeper than the probe's default depth of 32.
 *
 * Rank 0 prints, on stderr at the end, its own account of the time it spent in
 * MPI_Sendrecv from each path (`waited in MPI_Sendrecv: solve N us, refine N
 * us`): about 2 : 1 on a quiet machine, and whatever the scheduler made of it
 * beside other work. The tests compare the probe's stacks with it.
 *
 *   stacks [steps] [unit_ms] [deep]
 *
 * Built three ways by scripts/build-mpi-probe.sh: with frame pointers
 * (target/mpi/stacks), without (stacks-nofp) and without and stripped
 * (stacks-stripped).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static volatile double sink;

/* Wall time spent in MPI_Sendrecv, by the path that called exchange (0 solve, 1 refine). */
static int path;
static double waited[2];

static double wall_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

__attribute__((noinline)) static void compute(double seconds) {
    double x = 1.0, end = wall_s() + seconds;
    while (wall_s() < end)
        for (int i = 0; i < 2000; i++) x = x * 1.0000001 + 1e-9;
    sink = x;
}

__attribute__((noinline)) void exchange(int rank, int size) {
    double out = rank, in = 0;
    int peer = rank ^ 1;
    if (peer >= size) return;
    double t = wall_s();
    MPI_Sendrecv(&out, 1, MPI_DOUBLE, peer, 7, &in, 1, MPI_DOUBLE, peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    waited[path] += wall_s() - t;
    sink += in;
}

__attribute__((noinline)) void solve(int rank, int size, double unit) {
    compute(2 * (rank + 1) * unit);
    path = 0;
    exchange(rank, size);
}

__attribute__((noinline)) void refine(int rank, int size, double unit) {
    compute((rank + 1) * unit);
    path = 1;
    exchange(rank, size);
}

__attribute__((noinline)) void descend(int levels, int rank, int size, double unit) {
    if (levels > 0)
        descend(levels - 1, rank, size, unit);
    else
        solve(rank, size, unit);
    sink += levels; /* not a tail call: each level keeps its frame */
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long steps = argc > 1 ? atol(argv[1]) : 10;
    double unit = (argc > 2 ? atof(argv[2]) : 20) / 1000.0;
    int deep = argc > 3 && !strcmp(argv[3], "deep");
    double t0 = MPI_Wtime();
    for (long s = 0; s < steps; s++) {
        if (deep)
            descend(200, rank, size, unit);
        else
            solve(rank, size, unit);
        refine(rank, size, unit);
    }
    if (rank == 0) {
        printf("stacks: %d ranks, %ld steps, %.3f s\n", size, steps, MPI_Wtime() - t0);
        fprintf(stderr, "stacks: rank 0 waited in MPI_Sendrecv: solve %.0f us, refine %.0f us\n", waited[0] * 1e6,
                waited[1] * 1e6);
    }
    MPI_Finalize();
    return 0;
}
