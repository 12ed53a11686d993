/* Where a tick's time goes, for scripts/bench-mpi.sh (part 0): one stack walk
 * timed from inside a blocking Open MPI call, each way the probe could walk,
 * and the cost of the tick's signal itself.
 *
 *   walkcost [levels] [seconds] [walks]
 *
 * Two ranks. Rank 0 reaches MPI_Recv through `levels` (default 27) frames of
 * recursion and a frame like the probe's wrappers (`recv_in_mpi`: it notes
 * its frame record and call site, then calls PMPI_Recv), so the program's
 * stack from the MPI call to _start is 32 frames; it then waits in Open MPI's
 * progress loop while rank 1 sleeps `seconds` (default 2) before sending. A
 * 10 kHz per-thread wall-clock timer interrupts rank 0 meanwhile, and each
 * tick times one walk (CLOCK_MONOTONIC), the ways taking turns:
 *   - frame pointers from the wrapper's frame (stackwalk_fp: the probe's walk
 *     for programs that keep them; this program does);
 *   - libunwind from the wrapper's frame (stackwalk_libunwind: the probe's
 *     walk for programs without frame pointers);
 *   - libunwind from the signal handler (unw_backtrace through the signal
 *     frame and Open MPI's frames, cut at the call site: the probe's walk
 *     before it started at the wrapper),
 * once for each of libunwind's caching policies (per thread, the probe's;
 * global; none), one receive each. Every walk is cut at 32 frames as the
 * probe's default depth cuts it. Then the signal: a signal sent to itself
 * with tgkill (signal frame, empty handler, sigreturn), and a 1 kHz and a 10 kHz timer's
 * tick with an empty handler, from the thread CPU time a fixed loop of
 * arithmetic loses to it. With `walks`, only the per-thread cache's walks
 * run, for an instruction count under valgrind (scripts/bench-mpi.sh), where
 * the timings mean nothing.
 */
#define _GNU_SOURCE
#define UNW_LOCAL_ONLY
#include <mpi.h>

#include "stackwalk.h"

#include <libunwind.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define DEPTH 32 /* the probe's default MPI_SONDE_DEPTH */
#define HZ 10000
#define MAX_SAMPLES 65536

enum { FP, UNW_WRAPPER, UNW_HANDLER, NWAYS };
static const char *const way_names[NWAYS] = {"frame pointers, from the wrapper's frame",
                                             "libunwind, from the wrapper's frame",
                                             "libunwind, from the signal handler"};
enum { PER_THREAD, GLOBAL, NONE, NPOLICIES };
static const char *const policy_names[NPOLICIES] = {"per-thread cache", "global cache", "no cache"};
static const unw_caching_policy_t policies[NPOLICIES] = {UNW_CACHE_PER_THREAD, UNW_CACHE_GLOBAL,
                                                         UNW_CACHE_NONE};

static volatile uintptr_t wrap_frame; /* set while rank 0 is in PMPI_Recv */
static volatile uint64_t wrap_site;
static uintptr_t stack_lo, stack_hi;
static int policy;
static unsigned turn;
static volatile uint64_t deliveries; /* handler runs: ticks merged while one was pending cost one */

static struct samples {
    uint32_t ns[MAX_SAMPLES];
    int n;
    uint64_t frames;
} samples[NWAYS][NPOLICIES];

static uint64_t now_ns(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return (uint64_t)t.tv_sec * 1000000000ULL + (uint64_t)t.tv_nsec;
}

static void on_tick(int sig, siginfo_t *si, void *uc) {
    (void)sig, (void)uc;
    (void)si;
    deliveries++;
    if (!wrap_frame) return; /* outside the receive: the signal's own cost */
    int way = policy == PER_THREAD ? (int)(turn++ % NWAYS) : UNW_WRAPPER + (int)(turn++ % 2);
    uint64_t out[DEPTH];
    int truncated, n = 0;
    uint64_t t0 = now_ns(CLOCK_MONOTONIC);
    if (way == FP) {
        n = stackwalk_fp(wrap_frame, stack_lo, stack_hi, out, DEPTH - 1, &truncated);
    } else if (way == UNW_WRAPPER) {
        n = stackwalk_libunwind(wrap_frame, wrap_site, out, DEPTH - 1, &truncated);
    } else {
        void *buf[DEPTH + 64];
        int m = unw_backtrace(buf, DEPTH + 64);
        n = stackwalk_after_site(wrap_site, buf, m, DEPTH + 64, out, DEPTH - 1, &truncated);
    }
    uint64_t dt = now_ns(CLOCK_MONOTONIC) - t0;
    struct samples *s = &samples[way][policy];
    if (s->n < MAX_SAMPLES) s->ns[s->n++] = (uint32_t)(dt > UINT32_MAX ? UINT32_MAX : dt);
    s->frames += (uint64_t)(n > 0 ? n + 1 : 0); /* with the call site */
}

__attribute__((noinline)) static int recv_in_mpi(double *x) {
    wrap_site = STACKWALK_CALL_SITE();
    wrap_frame = STACKWALK_FRAME();
    int rc = PMPI_Recv(x, 1, MPI_DOUBLE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    wrap_frame = 0;
    return rc;
}

static volatile int sink;

__attribute__((noinline)) static int descend(int levels, double *x) {
    int rc = levels > 0 ? descend(levels - 1, x) : recv_in_mpi(x);
    sink += levels; /* not a tail call: each level keeps its frame */
    return rc;
}

static int by_value(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static void report(int way, int pol) {
    struct samples *s = &samples[way][pol];
    if (!s->n) return;
    uint64_t sum = 0;
    for (int i = 0; i < s->n; i++) sum += s->ns[i];
    qsort(s->ns, (size_t)s->n, sizeof s->ns[0], by_value);
    printf("   %-42s %-17s %5.1f frames  mean %7.0f ns  median %7u ns  p99 %8u ns  (%d walks)\n",
           way_names[way], way == FP ? "" : policy_names[pol], (double)s->frames / s->n,
           (double)sum / s->n, s->ns[s->n / 2], s->ns[s->n * 99 / 100], s->n);
}

static volatile double work_sink;

/* Thread CPU seconds of a fixed amount of arithmetic. */
static double busy_cpu_s(long n) {
    uint64_t t0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
    double x = 1;
    for (long i = 0; i < n; i++) x = x * 1.0000001 + 1e-9;
    work_sink = x;
    return (double)(now_ns(CLOCK_THREAD_CPUTIME_ID) - t0) / 1e9;
}

static int by_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void signal_costs(int sig, timer_t timer) {
    pid_t pid = getpid(), tid = (pid_t)syscall(SYS_gettid);
    double best = 1e9;
    for (int batch = 0; batch < 50; batch++) {
        uint64_t t0 = now_ns(CLOCK_MONOTONIC);
        for (int i = 0; i < 1000; i++) syscall(SYS_tgkill, pid, tid, sig);
        double each = (double)(now_ns(CLOCK_MONOTONIC) - t0) / 1000;
        if (each < best) best = each;
    }
    printf("   signal sent to itself (tgkill), empty handler: %.0f ns per signal (best of 50 batches)\n", best);
    /* The timer's tick: alternately without and with the timer, medians. */
    enum { ROUNDS = 7 };
    const int rates[] = {1000, HZ};
    for (int ri = 0; ri < 2; ri++) {
        long n = 3000000000L / rates[ri] * 100; /* ~0.5 s at 1 kHz, ~0.05 s at 10 kHz of arithmetic */
        double without[ROUNDS], with[ROUNDS], ticks[ROUNDS];
        long ns = 1000000000L / rates[ri];
        struct itimerspec on = {{0, ns}, {0, ns}}, off = {{0, 0}, {0, 0}};
        for (int r = 0; r < ROUNDS; r++) {
            without[r] = busy_cpu_s(n);
            uint64_t d0 = deliveries;
            timer_settime(timer, 0, &on, NULL);
            with[r] = busy_cpu_s(n);
            timer_settime(timer, 0, &off, NULL);
            ticks[r] = (double)(deliveries - d0);
        }
        qsort(without, ROUNDS, sizeof(double), by_double);
        qsort(with, ROUNDS, sizeof(double), by_double);
        qsort(ticks, ROUNDS, sizeof(double), by_double);
        double w0 = without[ROUNDS / 2], w1 = with[ROUNDS / 2], k = ticks[ROUNDS / 2];
        printf("   timer tick at %5d Hz, empty handler: %5.1f us of the thread's CPU time per signal delivered "
               "(a fixed loop: %.3f s without, %.3f s with %.0f signals; medians of %d)\n",
               rates[ri], (w1 - w0) / k * 1e6, w0, w1, k, ROUNDS);
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int levels = argc > 1 ? atoi(argv[1]) : 27;
    double seconds = argc > 2 ? atof(argv[2]) : 2;
    int policies_run = argc > 3 && !strcmp(argv[3], "walks") ? 1 : NPOLICIES;
    if (size != 2) {
        if (rank == 0) fprintf(stderr, "walkcost: run it with 2 ranks\n");
        MPI_Finalize();
        return 1;
    }
    double x = 1;
    if (rank == 1) {
        for (int p = 0; p < policies_run; p++) {
            MPI_Barrier(MPI_COMM_WORLD);
            usleep((useconds_t)(seconds * 1e6));
            MPI_Send(&x, 1, MPI_DOUBLE, 0, 0, MPI_COMM_WORLD);
        }
        /* Wait for rank 0's signal measurements without spinning on a core. */
        MPI_Request req;
        int done = 0;
        MPI_Irecv(&x, 1, MPI_DOUBLE, 0, 1, MPI_COMM_WORLD, &req);
        while (!done) {
            MPI_Test(&req, &done, MPI_STATUS_IGNORE);
            if (!done) usleep(10000);
        }
        MPI_Finalize();
        return 0;
    }
    pthread_attr_t attr;
    void *lo;
    size_t len;
    pthread_getattr_np(pthread_self(), &attr);
    pthread_attr_getstack(&attr, &lo, &len);
    stack_lo = (uintptr_t)lo;
    stack_hi = stack_lo + len;
    stackwalk_init();
    stackwalk_thread_start();
    int sig = SIGRTMIN + 5;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_tick;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigaction(sig, &sa, NULL);
    struct sigevent sev;
    memset(&sev, 0, sizeof sev);
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = sig;
    sev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
    timer_t timer;
    timer_create(CLOCK_MONOTONIC, &sev, &timer);
    long ns = 1000000000L / HZ;
    struct itimerspec on = {{0, ns}, {0, ns}}, off = {{0, 0}, {0, 0}};
    for (policy = 0; policy < policies_run; policy++) {
        unw_set_caching_policy(unw_local_addr_space, policies[policy]);
        MPI_Barrier(MPI_COMM_WORLD);
        timer_settime(timer, 0, &on, NULL);
        descend(levels, &x);
        timer_settime(timer, 0, &off, NULL);
    }
    printf("walkcost: one walk from inside MPI_Recv (Open MPI waiting for its message), %d-frame cut, "
           "ticks at %d Hz, %.1f s per caching policy\n",
           DEPTH, HZ, seconds);
    for (int w = 0; w < NWAYS; w++)
        for (int p = 0; p < NPOLICIES; p++) report(w, p);
    if (policies_run == NPOLICIES) signal_costs(sig, timer);
    MPI_Send(&x, 1, MPI_DOUBLE, 1, 1, MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
