/* Cost per wrapped MPI call, for scripts/bench-mpi.sh: times N calls of a
 * cheap MPI function in a tight loop and prints ns per call (rank 0).
 *
 *   callcost comm_rank|allreduce|barrier [calls]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const char *what = argc > 1 ? argv[1] : "comm_rank";
    long n = argc > 2 ? atol(argv[2]) : 1000000;
    int r = 0;
    double in = 1, out = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (long i = 0; i < n; i++) {
        if (!strcmp(what, "comm_rank")) MPI_Comm_rank(MPI_COMM_WORLD, &r);
        else if (!strcmp(what, "allreduce")) MPI_Allreduce(&in, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        else MPI_Barrier(MPI_COMM_WORLD);
    }
    double dt = MPI_Wtime() - t0;
    if (rank == 0) printf("%s %ld calls %.1f ns/call\n", what, n, dt / n * 1e9);
    MPI_Finalize();
    return 0;
}
