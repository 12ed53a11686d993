/* A deliberately imbalanced MPI job for the mpi plugin's end-to-end test:
 * in each step rank r burns (r+1) units of its own CPU time, then all ranks
 * meet in MPI_Allreduce and MPI_Barrier. Rank 0 finishes its work first and
 * waits longest, so its MPI stall share must be the largest, then rank 1, ...
 *
 *   imbalance [steps] [unit_ms] [pause_after]
 *
 * steps defaults to 20 (0 = forever), unit_ms to 20; with pause_after, the
 * program calls MPI_Pcontrol(0) after that many steps (a profiler pauses).
 *
 * A unit is busy computation for unit_ms of wall-clock time. (Not CPU time:
 * with more ranks than cores (mpirun --oversubscribe), ranks waiting in MPI
 * poll and take CPU from the ones computing, so a CPU-time unit would last
 * longer on some ranks than others, depending on the scheduler.)
 * With IMBALANCE_WORK=fixed a unit is instead a fixed amount of arithmetic
 * (1e5 dependent multiply-adds per unit_ms): the job's time then includes
 * any overhead, which is what scripts/bench-mpi.sh measures.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double wall_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static volatile double sink;

static int fixed_work;

static void work(double seconds) {
    double x = 1.0;
    if (fixed_work) {
        for (long i = (long)(seconds * 1e8); i > 0; i--) x = x * 1.0000001 + 1e-9;
    } else {
        double end = wall_s() + seconds;
        while (wall_s() < end)
            for (int i = 0; i < 2000; i++) x = x * 1.0000001 + 1e-9;
    }
    sink = x;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long steps = argc > 1 ? atol(argv[1]) : 20;
    double unit = (argc > 2 ? atof(argv[2]) : 20) / 1000.0;
    long pause_after = argc > 3 ? atol(argv[3]) : -1;
    fixed_work = getenv("IMBALANCE_WORK") && !strcmp(getenv("IMBALANCE_WORK"), "fixed");
    double t0 = MPI_Wtime();
    for (long s = 0; steps == 0 || s < steps; s++) {
        if (s == pause_after) MPI_Pcontrol(0);
        work((rank + 1) * unit);
        double v = rank, sum = 0;
        MPI_Allreduce(&v, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
    }
    if (rank == 0) printf("imbalance: %d ranks, %ld steps, %.3f s\n", size, steps, MPI_Wtime() - t0);
    MPI_Finalize();
    return 0;
}
