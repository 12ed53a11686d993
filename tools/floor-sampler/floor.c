/*
 * floor-sampler: the least a 100 ms sampler of this machine can cost.
 *
 * It does what sonde's sampling thread does and nothing else: every PERIOD_MS
 * it reads the files given on the command line (the procfs and sysfs files
 * sonde reads: /proc/stat, /proc/meminfo, /proc/net/dev and the disks' stat
 * files) with one pread at offset 0 on descriptors opened once, parses every
 * decimal number in them, and sleeps to the next absolute deadline
 * (clock_nanosleep with TIMER_ABSTIME, so the period does not drift). No
 * allocation after start, no threads, no output until the end.
 *
 *   [FLOOR_GRID_OFFSET_MS=N] floor-sampler SECONDS PERIOD_MS FILE...
 *
 * Runs for SECONDS (or until SIGTERM / SIGINT), then prints one line:
 * "samples N checksum C" (the checksum keeps the parse from being optimised
 * away, and is otherwise meaningless). `scripts/bench_process.py` runs it
 * beside sonde in the same window and divides CPU time by samples taken on
 * both sides: sonde's cost per sample as a multiple of this floor.
 *
 * Built by `./dev floor-sampler` (cc -O2) into target/floor-sampler.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_FILES 64
/* Larger than any of the files read here on a normal machine; a longer file
 * is read in further preads, as sonde does. */
#define BUF_SIZE 65536

static volatile sig_atomic_t stop;

static void on_signal(int sig) {
    (void)sig;
    stop = 1;
}

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Every run of digits in buf[0..len) as an unsigned number, summed. */
static uint64_t parse_numbers(const char *buf, ssize_t len) {
    uint64_t sum = 0, v = 0;
    int in_number = 0;
    for (ssize_t i = 0; i < len; i++) {
        unsigned d = (unsigned char)buf[i] - '0';
        if (d < 10) {
            v = v * 10 + d;
            in_number = 1;
        } else if (in_number) {
            sum += v;
            v = 0;
            in_number = 0;
        }
    }
    return sum + v;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s SECONDS PERIOD_MS FILE...\n", argv[0]);
        return 2;
    }
    double seconds = atof(argv[1]);
    long period_ms = atol(argv[2]);
    int n = argc - 3;
    if (seconds <= 0 || period_ms <= 0 || n > MAX_FILES) {
        fprintf(stderr, "floor-sampler: SECONDS and PERIOD_MS must be positive, at most %d files\n", MAX_FILES);
        return 2;
    }
    int fds[MAX_FILES];
    for (int i = 0; i < n; i++) {
        fds[i] = open(argv[3 + i], O_RDONLY | O_CLOEXEC);
        if (fds[i] < 0) {
            fprintf(stderr, "floor-sampler: cannot open %s: %s\n", argv[3 + i], strerror(errno));
            return 1;
        }
    }
    static char buf[BUF_SIZE];
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    const uint64_t period = (uint64_t)period_ms * 1000000u;
    const uint64_t end = mono_ns() + (uint64_t)(seconds * 1e9);
    uint64_t deadline = mono_ns(), samples = 0, checksum = 0;
    /* FLOOR_GRID_OFFSET_MS: put the deadlines on multiples of the period on
     * CLOCK_MONOTONIC plus this offset, the grid sonde's sampler wakes on
     * (offset 0), so two samplers can be run in step or out of it. */
    const char *offset = getenv("FLOOR_GRID_OFFSET_MS");
    if (offset) {
        deadline = (deadline / period + 1) * period + (uint64_t)atol(offset) % (uint64_t)period_ms * 1000000u;
    }
    while (!stop && deadline < end) {
        for (int i = 0; i < n; i++) {
            off_t off = 0;
            for (;;) {
                ssize_t got = pread(fds[i], buf, sizeof buf, off);
                if (got <= 0) {
                    break;
                }
                checksum += parse_numbers(buf, got);
                off += got;
                if ((size_t)got < sizeof buf) {
                    break;
                }
            }
        }
        samples++;
        deadline += period;
        struct timespec ts = {.tv_sec = (time_t)(deadline / 1000000000u), .tv_nsec = (long)(deadline % 1000000000u)};
        while (!stop && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
        }
    }
    printf("samples %llu checksum %llu\n", (unsigned long long)samples, (unsigned long long)checksum);
    return 0;
}
