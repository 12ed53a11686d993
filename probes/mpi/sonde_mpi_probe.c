/*
 * sonde MPI state probe: PMPI wrappers, preloaded into unmodified MPI programs
 * (LD_PRELOAD), that keep a per-thread MPI state word (not in MPI, MPI work,
 * MPI stall), sample it on a per-thread wall-clock timer together with the MPI
 * function and the call stack that led to it, and stream the counts to sonde's
 * POST /api/ingest in batches. README.md next to this file is the manual
 * (environment, the Work/Stall method and its limits).
 *
 * Three kinds of code live here, with different rules:
 *  - wrappers (the application's threads): set the state word, call PMPI_*;
 *    a few loads and stores around each call, no locks, no allocation;
 *  - the tick handler (signal context): reads the calling thread's state,
 *    walks its stack from the wrapper's frame (stackwalk.c: frame pointers or
 *    libunwind) once per MPI call, interns the stack in that thread's own
 *    table and adds to its bin table; async-signal-safe only;
 *  - the flusher thread: takes the bins' counts, sends new stacks and the
 *    module map (path, build-id, load address: sonde symbolizes), writes JSON
 *    and POSTs it; everything slow is here.
 */
#define _GNU_SOURCE
#include <mpi.h>

#include "stackwalk.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* MPI functions the probe knows, by id (the id travels in the bin key).     */

#define FUNCS(X)                                                                \
    X(MPI_Init) X(MPI_Init_thread) X(MPI_Finalize) X(MPI_Pcontrol)              \
    X(MPI_Comm_rank) X(MPI_Comm_size) X(MPI_Comm_dup) X(MPI_Comm_split)         \
    X(MPI_Comm_free) X(MPI_Send) X(MPI_Ssend) X(MPI_Bsend) X(MPI_Rsend)         \
    X(MPI_Isend) X(MPI_Issend) X(MPI_Irecv) X(MPI_Recv) X(MPI_Probe)            \
    X(MPI_Iprobe) X(MPI_Sendrecv) X(MPI_Sendrecv_replace) X(MPI_Wait)           \
    X(MPI_Waitall) X(MPI_Waitany) X(MPI_Waitsome) X(MPI_Test) X(MPI_Testall)    \
    X(MPI_Testany) X(MPI_Testsome) X(MPI_Barrier) X(MPI_Bcast) X(MPI_Reduce)    \
    X(MPI_Allreduce) X(MPI_Gather) X(MPI_Gatherv) X(MPI_Scatter)                \
    X(MPI_Scatterv) X(MPI_Allgather) X(MPI_Allgatherv) X(MPI_Alltoall)          \
    X(MPI_Alltoallv) X(MPI_Reduce_scatter) X(MPI_Scan) X(MPI_Exscan)            \
    X(MPI_Ibarrier) X(MPI_Ibcast) X(MPI_Iallreduce)

enum {
    F_NONE = 0,
#define X(n) F_##n,
    FUNCS(X)
#undef X
    F_COUNT
};

static const char *const func_names[F_COUNT] = {
    "",
#define X(n) #n,
    FUNCS(X)
#undef X
};

enum { ST_OUT = 0, ST_WORK = 1, ST_STALL = 2 };

/* ------------------------------------------------------------------------ */
/* Per-thread state and bins. Static storage only: the handler never allocates. */

#define MAX_THREADS 128
#define NBINS 1024 /* power of two */
#define PROBE_LIMIT 32
#define MAX_DEPTH STACKWALK_MAX /* MPI_SONDE_DEPTH is capped here */
#define NSTACKS 2048      /* distinct stacks per thread; power of two */
#define STACK_FRAMES 32768 /* frames of all a thread's stacks together */
#define NO_STACK 0xFFFFFFFFu

/* Durations by magnitude, 8 buckets per power of two (each 1/8 of its octave
 * wide) from 0 to ~1 s: a median that a walk preempted on a busy machine
 * cannot move, as it moves the mean. */
#define TIME_BUCKETS 224

static inline unsigned time_bucket(uint64_t ns) {
    if (ns < 16) return (unsigned)ns / 2;
    unsigned msb = 63u - (unsigned)__builtin_clzll(ns), b = (msb - 3) * 8 + (unsigned)((ns >> (msb - 3)) & 7);
    return b < TIME_BUCKETS ? b : TIME_BUCKETS - 1;
}

static uint64_t bucket_start_ns(unsigned b) {
    return b < 8 ? 2ULL * b : (uint64_t)(8 + b % 8) << (b / 8);
}

struct bin {
    /* 0 = free; else stack id (32 bits) | func << 32 | state << 48 | 1 << 62. */
    _Atomic uint64_t key;
    _Atomic uint64_t count;
};

/* A stack as the handler interned it: frames[off .. off+len) of the thread's
 * pool, outermost last; frames[off] is the MPI call's return address. */
struct stack {
    uint64_t hash;
    uint32_t off;
    uint16_t len;
    uint8_t truncated; /* the walk stopped at MPI_SONDE_DEPTH */
};

struct thr {
    /* Written by the owning thread, read by its own signal handler. */
    volatile uint64_t call; /* outermost MPI calls entered so far: this call's number */
    volatile uint64_t site;
    volatile uintptr_t wrap_fp; /* the outermost wrapper's frame address */
    volatile int func;
    volatile int state;
    int depth;
    /* The handler's own: the stack of the call it walked last. The program's
     * frames above a wrapper cannot change while the call runs, so later ticks
     * of the same call take this id instead of walking again. */
    uint64_t walked_call;
    uint32_t walked_id;
    uint64_t walks, reused; /* for MPI_SONDE_VERBOSE */
    uint64_t walk_ns;                   /* with MPI_SONDE_VERBOSE only: each walk timed */
    uint32_t walk_times[TIME_BUCKETS]; /* the same walks by duration, for a median */
    timer_t timer;
    _Atomic int live; /* 1 while the timer exists */
    uintptr_t stack_lo, stack_hi; /* the thread's stack, for the frame-pointer walk */
    struct bin bins[NBINS];
    /* Interned stacks: only this thread's handler appends; `nstacks` publishes
     * them (release) to the flusher, which sends those after `sent_stacks`. */
    struct stack stacks[NSTACKS];
    uint32_t index[2 * NSTACKS]; /* open addressing by hash: stack id + 1, 0 = free */
    uint64_t frames[STACK_FRAMES];
    uint32_t nframes;
    _Atomic uint32_t nstacks;
    uint32_t sent_stacks; /* flusher only */
};

static struct thr threads[MAX_THREADS];
static _Atomic int nthreads;

/* initial-exec: the library is loaded at startup (LD_PRELOAD), so its TLS is
 * in the static block and reading it from a signal handler never allocates. */
static __thread struct thr *my __attribute__((tls_model("initial-exec")));
static __thread int my_registered __attribute__((tls_model("initial-exec")));

/* ------------------------------------------------------------------------ */
/* Configuration (environment, read once in MPI_Init).                        */

static struct {
    int enabled;       /* this rank is profiled */
    int hz;
    long flush_ms;
    double start_s, stop_s; /* window after MPI_Init; stop_s < 0 = none */
    int coll_sync;
    int verbose;
    int sig;
    int depth;         /* frames per stack, from the MPI call outward */
    int unwind;        /* UNWIND_* */
    char host[64];
    int port;
    char job[128];
    char token[256];
} cfg;

enum { UNWIND_AUTO, UNWIND_FP, UNWIND_LIBUNWIND };
static const char *const unwind_names[] = {"auto", "frame pointers", "libunwind"};

static int world_rank = -1, world_size = 0;
static _Atomic int sampling;     /* the handler counts only while set (MPI_Pcontrol, MPI_Finalize) */
static _Atomic int pcontrol_on = 1;
static _Atomic uint64_t dropped_ticks;   /* bin table full */
static _Atomic uint64_t unstacked_ticks; /* stack table full: counted without a stack */
static _Atomic uint64_t dropped_posts, dropped_rows, sent_rows, sent_posts;
static pthread_t flusher;
static _Atomic int flusher_stop;
static int flusher_started;
static pthread_key_t thr_key;

static uint64_t mono_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t); /* async-signal-safe (POSIX), a vDSO call on Linux */
    return (uint64_t)t.tv_sec * 1000000000ULL + (uint64_t)t.tv_nsec;
}

/* The time-selective window on the monotonic clock; 0 / UINT64_MAX when open-ended. */
static uint64_t window_start_ns, window_stop_ns = UINT64_MAX;
static uint64_t tick_ns; /* the timer's period */

static const char *env(const char *k) {
    const char *v = getenv(k);
    return v && *v ? v : NULL;
}

/* "all", or a list like "0,3,8-11". */
static int rank_selected(const char *spec, int rank) {
    if (!spec || !strcmp(spec, "all")) return 1;
    const char *p = spec;
    while (*p) {
        char *end;
        long a = strtol(p, &end, 10), b = a;
        if (end == p) return 0;
        p = end;
        if (*p == '-') {
            b = strtol(p + 1, &end, 10);
            p = end;
        }
        if (rank >= a && rank <= b) return 1;
        while (*p == ',' || *p == ' ') p++;
    }
    return 0;
}

static void read_config(void) {
    const char *v;
    cfg.hz = (v = env("MPI_SONDE_HZ")) ? atoi(v) : 100;
    if (cfg.hz < 1) cfg.hz = 1;
    if (cfg.hz > 10000) cfg.hz = 10000;
    tick_ns = 1000000000ULL / (uint64_t)cfg.hz;
    cfg.flush_ms = (v = env("MPI_SONDE_FLUSH_MS")) ? atol(v) : 500;
    if (cfg.flush_ms < 10) cfg.flush_ms = 10;
    cfg.start_s = (v = env("MPI_SONDE_START_S")) ? atof(v) : 0;
    cfg.stop_s = (v = env("MPI_SONDE_STOP_S")) ? atof(v) : -1;
    cfg.coll_sync = (v = env("MPI_SONDE_COLLECTIVE_SYNC")) ? atoi(v) : 0;
    cfg.verbose = (v = env("MPI_SONDE_VERBOSE")) ? atoi(v) : 0;
    cfg.sig = SIGRTMIN + ((v = env("MPI_SONDE_SIGNAL_OFFSET")) ? atoi(v) : 5);
    cfg.depth = (v = env("MPI_SONDE_DEPTH")) ? atoi(v) : 32;
    if (cfg.depth < 1) cfg.depth = 1;
    if (cfg.depth > MAX_DEPTH) cfg.depth = MAX_DEPTH;
    v = env("MPI_SONDE_UNWIND");
    cfg.unwind = !v || !strcmp(v, "auto") ? UNWIND_AUTO : !strcmp(v, "fp") ? UNWIND_FP : UNWIND_LIBUNWIND;
    snprintf(cfg.host, sizeof cfg.host, "127.0.0.1");
    cfg.port = 7878;
    if ((v = env("MPI_SONDE_ENDPOINT"))) {
        /* host:port, with or without http:// */
        if (!strncmp(v, "http://", 7)) v += 7;
        const char *colon = strrchr(v, ':');
        if (colon) {
            size_t n = (size_t)(colon - v);
            if (n >= sizeof cfg.host) n = sizeof cfg.host - 1;
            memcpy(cfg.host, v, n);
            cfg.host[n] = 0;
            cfg.port = atoi(colon + 1);
        }
    }
    if ((v = env("MPI_SONDE_JOB"))) {
        snprintf(cfg.job, sizeof cfg.job, "%s", v);
    } else {
        /* the program plus Open MPI's job id: one name per mpirun */
        const char *jid = env("OMPI_MCA_ess_base_jobid");
        snprintf(cfg.job, sizeof cfg.job, "%s%s%s", program_invocation_short_name, jid ? "-" : "",
                 jid ? jid : "");
    }
    if ((v = env("MPI_SONDE_TOKEN"))) snprintf(cfg.token, sizeof cfg.token, "%s", v);
}

/* ------------------------------------------------------------------------ */
/* The tick.                                                                  */

static inline uint64_t bin_key(int state, int func, uint32_t stack) {
    return (uint64_t)stack | ((uint64_t)func << 32) | ((uint64_t)state << 48) | (1ULL << 62);
}

static int use_fp; /* decided at MPI_Init (UNWIND_AUTO) or by MPI_SONDE_UNWIND */

/* The stack of the MPI call the thread is in: its return address, then the
 * program's frames outward, at most cfg.depth in all. A depth of 1 is the
 * call site alone: no walk (the whole cost of the probe before call stacks). */
static int walk(const struct thr *t, uint64_t *out, int *truncated) {
    out[0] = t->site;
    if (cfg.depth == 1) {
        *truncated = 1;
        return 1;
    }
    int n = use_fp ? stackwalk_fp(t->wrap_fp, t->stack_lo, t->stack_hi, out + 1, cfg.depth - 1, truncated)
                   : stackwalk_libunwind(t->wrap_fp, t->site, out + 1, cfg.depth - 1, truncated);
    if (n <= 0) {
        /* Only the call site is known: its function has a caller, which the
         * walk could not find (no frame record, no unwind info). */
        *truncated = 1;
        n = 0;
    }
    return n + 1;
}

/* The id of this stack in the thread's table, adding it if new; NO_STACK when full. */
static uint32_t intern(struct thr *t, const uint64_t *f, int n, int truncated) {
    uint64_t h = 0xcbf29ce484222325ULL ^ (uint64_t)truncated;
    for (int i = 0; i < n; i++) h = (h ^ f[i]) * 0x100000001b3ULL;
    unsigned mask = 2 * NSTACKS - 1, i = (unsigned)(h >> 40) & mask;
    for (int probe = 0; probe < PROBE_LIMIT; probe++, i = (i + 1) & mask) {
        uint32_t e = t->index[i];
        if (!e) break;
        const struct stack *s = &t->stacks[e - 1];
        if (s->hash == h && s->len == n && s->truncated == truncated &&
            !memcmp(&t->frames[s->off], f, (size_t)n * sizeof *f))
            return e - 1;
    }
    uint32_t id = atomic_load_explicit(&t->nstacks, memory_order_relaxed);
    if (id >= NSTACKS || t->nframes + (uint32_t)n > STACK_FRAMES || t->index[i]) return NO_STACK;
    memcpy(&t->frames[t->nframes], f, (size_t)n * sizeof *f);
    t->stacks[id] = (struct stack){h, t->nframes, (uint16_t)n, (uint8_t)truncated};
    t->nframes += (uint32_t)n;
    t->index[i] = id + 1;
    atomic_store_explicit(&t->nstacks, id + 1, memory_order_release);
    return id;
}

/* Of the n ticks this delivery stands for, at now, now - p, ..., now - (n-1)p,
 * how many fall in [window_start_ns, window_stop_ns). A delivery delayed past
 * an edge of the window (a busy machine) still counts only the ticks inside. */
static uint64_t ticks_in_window(uint64_t now, uint64_t n) {
    if (now < window_start_ns) return 0;
    uint64_t kmax = (now - window_start_ns) / tick_ns;
    if (kmax > n - 1) kmax = n - 1;
    uint64_t kmin = now < window_stop_ns ? 0 : (now - window_stop_ns) / tick_ns + 1;
    return kmax >= kmin ? kmax - kmin + 1 : 0;
}

static void on_tick(int sig, siginfo_t *si, void *uc) {
    (void)sig, (void)uc;
    int saved = errno;
    struct thr *t = my;
    if (t && atomic_load_explicit(&sampling, memory_order_relaxed)) {
        /* Ticks the kernel merged while the signal was pending count too
         * (si_overrun: what timer_getoverrun() answers, without its syscall). */
        int over = si->si_code == SI_TIMER ? si->si_overrun : 0;
        uint64_t n = 1 + (over > 0 ? (uint64_t)over : 0);
        if (window_start_ns || window_stop_ns != UINT64_MAX) n = ticks_in_window(mono_ns(), n);
        if (!n) {
            errno = saved;
            return;
        }
        int state = t->state;
        atomic_signal_fence(memory_order_acquire);
        uint64_t key;
        if (state == ST_OUT) {
            key = bin_key(ST_OUT, 0, NO_STACK);
        } else {
            uint32_t id;
            uint64_t call = t->call;
            if (call == t->walked_call) {
                id = t->walked_id; /* a later tick of the same call */
                t->reused++;
            } else {
                uint64_t frames[MAX_DEPTH], t0 = cfg.verbose ? mono_ns() : 0;
                int truncated, depth = walk(t, frames, &truncated);
                id = intern(t, frames, depth, truncated);
                if (cfg.verbose) {
                    uint64_t took = mono_ns() - t0;
                    t->walk_ns += took;
                    t->walk_times[time_bucket(took)]++;
                }
                t->walks++;
                t->walked_call = call;
                t->walked_id = id;
            }
            if (id == NO_STACK) atomic_fetch_add_explicit(&unstacked_ticks, n, memory_order_relaxed);
            key = bin_key(state, t->func, id);
        }
        uint64_t h = key * 0x9E3779B97F4A7C15ULL;
        unsigned i = (unsigned)(h >> 54) & (NBINS - 1);
        int done = 0;
        for (int probe = 0; probe < PROBE_LIMIT; probe++, i = (i + 1) & (NBINS - 1)) {
            struct bin *b = &t->bins[i];
            uint64_t k = atomic_load_explicit(&b->key, memory_order_relaxed);
            if (k == 0) {
                /* Only this thread's handler writes keys of this table. */
                atomic_store_explicit(&b->key, key, memory_order_release);
                k = key;
            }
            if (k == key) {
                atomic_fetch_add_explicit(&b->count, n, memory_order_relaxed);
                done = 1;
                break;
            }
        }
        if (!done) atomic_fetch_add_explicit(&dropped_ticks, n, memory_order_relaxed);
    }
    errno = saved;
}

static void thr_exit(void *p) {
    struct thr *t = p;
    if (t && atomic_exchange(&t->live, 0)) timer_delete(t->timer);
}

/* Gives the calling thread a slot and its own wall-clock timer. */
static void register_thread(void) {
    my_registered = 1;
    int slot = atomic_fetch_add(&nthreads, 1);
    if (slot >= MAX_THREADS) {
        atomic_fetch_sub(&nthreads, 1);
        return;
    }
    struct thr *t = &threads[slot];
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
        void *lo;
        size_t size;
        if (pthread_attr_getstack(&attr, &lo, &size) == 0) {
            t->stack_lo = (uintptr_t)lo;
            t->stack_hi = (uintptr_t)lo + size;
        }
        pthread_attr_destroy(&attr);
    }
    struct sigevent sev;
    memset(&sev, 0, sizeof sev);
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = cfg.sig;
    sev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
    if (!use_fp) stackwalk_thread_start();
    if (timer_create(CLOCK_MONOTONIC, &sev, &t->timer) != 0) {
        if (cfg.verbose) perror("sonde mpi probe: timer_create");
        return;
    }
    atomic_store(&t->live, 1);
    long ns = (long)tick_ns;
    struct itimerspec its = {{ns / 1000000000L, ns % 1000000000L}, {ns / 1000000000L, ns % 1000000000L}};
    timer_settime(t->timer, 0, &its, NULL);
    pthread_setspecific(thr_key, t);
    my = t;
}

/* ------------------------------------------------------------------------ */
/* Entering and leaving MPI. Nested calls keep the outermost state.          */

#define CALL_SITE() STACKWALK_CALL_SITE()
/* The wrapper's own frame record (the probe is built with frame pointers):
 * where a walk into the program starts. */
#define WRAP_FP() STACKWALK_FRAME()

static inline int enter(int func, uint64_t site, uintptr_t fp, int state) {
    if (__builtin_expect(!my_registered, 0) && cfg.enabled) register_thread();
    struct thr *t = my;
    if (!t) return 0;
    if (t->depth++ > 0) return 0;
    t->call++;
    t->func = func;
    t->site = site;
    t->wrap_fp = fp;
    atomic_signal_fence(memory_order_release);
    t->state = state;
    return 1;
}

static inline void set_state(int state) {
    struct thr *t = my;
    if (t && t->depth == 1) t->state = state;
}

static inline void leave(void) {
    struct thr *t = my;
    if (!t) return;
    if (--t->depth == 0) t->state = ST_OUT;
}

/* ------------------------------------------------------------------------ */
/* Streaming to sonde (the flusher thread).                                  */

struct buf {
    char *p;
    size_t n, cap;
};

static void put(struct buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 65536;
        while (cap < b->n + n + 1) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) return;
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void putf(struct buf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0) put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

static void put_json_str(struct buf *b, const char *s) {
    put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            put(b, e, 2);
        } else if (c < 0x20) {
            putf(b, "\\u%04x", c);
        } else {
            put(b, (const char *)&c, 1);
        }
    }
    put(b, "\"", 1);
}

/* Call sites resolved so far (flusher only). */
struct site_name {
    uint64_t site;
    char name[200];
};
static struct site_name *sites;
static size_t nsites, capsites;

/* "symbol+0xOFF (module)" or "module+0xOFF" when the symbol is not exported;
 * offsets are what addr2line wants for the module. Never a ';' (folded stacks). */
static const char *site_name(uint64_t site) {
    if (!site) return "";
    for (size_t i = 0; i < nsites; i++)
        if (sites[i].site == site) return sites[i].name;
    if (nsites == capsites) {
        size_t cap = capsites ? capsites * 2 : 64;
        struct site_name *q = realloc(sites, cap * sizeof *q);
        if (!q) return "?";
        sites = q;
        capsites = cap;
    }
    struct site_name *s = &sites[nsites++];
    s->site = site;
    Dl_info info;
    /* The return address points after the call: step back into the call instruction. */
    void *pc = (void *)(uintptr_t)(site - 1);
    if (dladdr(pc, &info) && info.dli_fname) {
        const char *mod = strrchr(info.dli_fname, '/');
        mod = mod ? mod + 1 : info.dli_fname;
        if (!*mod) mod = program_invocation_short_name;
        if (info.dli_sname && info.dli_saddr)
            snprintf(s->name, sizeof s->name, "%s+0x%lx (%s)", info.dli_sname,
                     (unsigned long)(site - (uintptr_t)info.dli_saddr), mod);
        else
            snprintf(s->name, sizeof s->name, "%s+0x%lx", mod, (unsigned long)(site - (uintptr_t)info.dli_fbase));
    } else {
        snprintf(s->name, sizeof s->name, "0x%lx", (unsigned long)site);
    }
    for (char *c = s->name; *c; c++)
        if (*c == ';' || *c == '"') *c = '_';
    return s->name;
}

/* One POST, one connection; waits at most ~1 s per step. Returns the HTTP status or -1. */
static int http_post(const char *body, size_t len) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)cfg.port);
    int status = -1;
    if (inet_pton(AF_INET, cfg.host, &a.sin_addr) != 1) goto out;
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        if (errno != EINPROGRESS) goto out;
        struct pollfd p = {fd, POLLOUT, 0};
        int err = 0;
        socklen_t el = sizeof err;
        if (poll(&p, 1, 1000) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err != 0) goto out;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    struct timeval tv = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char head[512];
    int hn = snprintf(head, sizeof head,
                      "POST /api/ingest HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\nConnection: close\r\n%s%s%s\r\n",
                      cfg.host, cfg.port, len, cfg.token[0] ? "Authorization: Bearer " : "", cfg.token,
                      cfg.token[0] ? "\r\n" : "");
    const char *parts[2] = {head, body};
    size_t lens[2] = {(size_t)hn, len};
    for (int k = 0; k < 2; k++) {
        size_t off = 0;
        while (off < lens[k]) {
            ssize_t w = send(fd, parts[k] + off, lens[k] - off, MSG_NOSIGNAL);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) goto out;
            off += (size_t)w;
        }
    }
    char resp[128];
    size_t got = 0;
    while (got < sizeof resp - 1) {
        ssize_t r = recv(fd, resp + got, sizeof resp - 1 - got, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
        if (memchr(resp, '\n', got)) break;
    }
    resp[got] = 0;
    if (!strncmp(resp, "HTTP/1.", 7) && got > 12) status = atoi(resp + 9);
out:
    close(fd);
    return status;
}

static struct buf body;

/* The module map: every loaded object's path, GNU build-id, load bias and
 * code segments, so that sonde can turn addresses into names. Sent with the
 * first batch, again whenever the set of modules changed (dlopen), and again
 * after a batch that did not arrive. */
static int modules_sent; /* modules in the last map that sonde took; flusher only */
static int modules_now;

static void put_build_id(struct buf *b, const struct dl_phdr_info *info) {
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_NOTE) continue;
        const unsigned char *p = (const unsigned char *)(info->dlpi_addr + ph->p_vaddr), *end = p + ph->p_memsz;
        while (p + sizeof(ElfW(Nhdr)) <= end) {
            const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)p;
            const unsigned char *name = p + sizeof *nh, *desc = name + ((nh->n_namesz + 3) & ~3u);
            if (desc + nh->n_descsz > end) break;
            if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && !memcmp(name, "GNU", 4)) {
                for (unsigned k = 0; k < nh->n_descsz; k++) putf(b, "%02x", desc[k]);
                return;
            }
            p = desc + ((nh->n_descsz + 3) & ~3u);
        }
    }
}

static int put_module(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    struct buf *b = arg;
    char exe[4096];
    const char *path = info->dlpi_name;
    if (!path || !*path) { /* the program itself */
        ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
        exe[k > 0 ? k : 0] = 0;
        path = exe;
    }
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) continue;
        if (modules_now++) put(b, ",", 1);
        put(b, "{\"path\":", 8);
        put_json_str(b, path);
        put(b, ",\"build_id\":\"", 13);
        put_build_id(b, info);
        putf(b, "\",\"base\":%llu,\"start\":%llu,\"end\":%llu}", (unsigned long long)info->dlpi_addr,
             (unsigned long long)(info->dlpi_addr + ph->p_vaddr),
             (unsigned long long)(info->dlpi_addr + ph->p_vaddr + ph->p_memsz));
    }
    return 0;
}

static int count_modules(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)info, (void)size;
    ++*(int *)arg;
    return 0;
}

/* Takes every bin's count and sends it as one batch (one POST), with the
 * stacks interned since the last batch that arrived. */
static void flush_once(void) {
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    uint64_t now_ns = (uint64_t)wall.tv_sec * 1000000000ULL + (uint64_t)wall.tv_nsec;
    uint64_t period_ns = tick_ns;
    body.n = 0;
    char node[128] = "";
    gethostname(node, sizeof node - 1);
    const char *lr = env("OMPI_COMM_WORLD_LOCAL_RANK");
    put(&body, "{\"origin\":{\"job\":", 17);
    put_json_str(&body, cfg.job);
    put(&body, ",\"node\":", 8);
    put_json_str(&body, node);
    putf(&body,
         ",\"role\":\"rank\",\"rank\":%d,\"local_rank\":%d,\"attributes\":{\"mpi.world_size\":\"%d\","
         "\"process.pid\":\"%d\",\"mpi.sample_hz\":\"%d\"}},\"mpi_samples\":[",
         world_rank, lr ? atoi(lr) : -1, world_size, (int)getpid(), cfg.hz);
    size_t rows = 0;
    int n = atomic_load(&nthreads);
    if (n > MAX_THREADS) n = MAX_THREADS;
    uint32_t published[MAX_THREADS];
    for (int ti = 0; ti < n; ti++) {
        struct thr *t = &threads[ti];
        /* Read before the bins: every stack id a bin below holds is published. */
        published[ti] = atomic_load_explicit(&t->nstacks, memory_order_acquire);
        for (int i = 0; i < NBINS; i++) {
            uint64_t key = atomic_load_explicit(&t->bins[i].key, memory_order_acquire);
            if (!key) continue;
            uint64_t c = atomic_exchange_explicit(&t->bins[i].count, 0, memory_order_relaxed);
            if (!c) continue;
            int state = (int)((key >> 48) & 3), func = (int)((key >> 32) & 1023);
            uint32_t stack = (uint32_t)key;
            if (stack != NO_STACK && stack >= published[ti])
                published[ti] = atomic_load_explicit(&t->nstacks, memory_order_acquire);
            if (rows++) put(&body, ",", 1);
            putf(&body, "{\"thread\":%d,\"time_ns\":%llu,\"state\":%d,\"count\":%llu,\"period_ns\":%llu,\"function\":",
                 ti, (unsigned long long)now_ns, state, (unsigned long long)(c > UINT32_MAX ? UINT32_MAX : c),
                 (unsigned long long)period_ns);
            put_json_str(&body, func < F_COUNT ? func_names[func] : "?");
            if (state != ST_OUT && stack != NO_STACK) {
                /* The call site by the dynamic symbols, for a sonde that lost the stack table. */
                put(&body, ",\"callsite\":", 12);
                put_json_str(&body, site_name(t->frames[t->stacks[stack].off]));
                putf(&body, ",\"stack\":%u", stack);
            }
            put(&body, "}", 1);
        }
    }
    put(&body, "],\"stacks\":[", 12);
    size_t nst = 0;
    for (int ti = 0; ti < n; ti++) {
        struct thr *t = &threads[ti];
        for (uint32_t id = t->sent_stacks; id < published[ti]; id++) {
            const struct stack *st = &t->stacks[id];
            putf(&body, "%s{\"thread\":%d,\"id\":%u,\"truncated\":%s,\"frames\":[", nst++ ? "," : "", ti, id,
                 st->truncated ? "true" : "false");
            for (int k = 0; k < st->len; k++)
                putf(&body, "%s%llu", k ? "," : "", (unsigned long long)t->frames[st->off + k]);
            put(&body, "]}", 2);
        }
    }
    put(&body, "]", 1);
    int loaded = 0;
    dl_iterate_phdr(count_modules, &loaded);
    int send_modules = loaded != modules_sent;
    if (send_modules) {
        put(&body, ",\"modules\":[", 12);
        modules_now = 0;
        dl_iterate_phdr(put_module, &body);
        put(&body, "]", 1);
    }
    put(&body, "}", 1);
    if (!rows && !nst) return;
    int st = http_post(body.p, body.n);
    if (st == 202) {
        atomic_fetch_add(&sent_posts, 1);
        atomic_fetch_add(&sent_rows, rows);
        for (int ti = 0; ti < n; ti++) threads[ti].sent_stacks = published[ti];
        if (send_modules) modules_sent = loaded;
    } else {
        /* sonde down, slow or refusing: this batch is dropped and counted, the
         * program goes on; its new stacks and the module map go with the next. */
        if (atomic_fetch_add(&dropped_posts, 1) == 0 || cfg.verbose)
            fprintf(stderr, "sonde mpi probe (rank %d): POST http://%s:%d/api/ingest %s %d; samples are dropped and counted\n",
                    world_rank, cfg.host, cfg.port, st < 0 ? "failed" : "answered", st);
        atomic_fetch_add(&dropped_rows, rows);
    }
}

static void *flusher_main(void *arg) {
    (void)arg;
    /* Ticks are aimed at MPI threads; this one never takes the signal. */
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, cfg.sig);
    pthread_sigmask(SIG_BLOCK, &s, NULL);
    while (!atomic_load(&flusher_stop)) {
        /* sleep in short steps so MPI_Finalize does not wait a whole interval */
        for (long waited = 0; waited < cfg.flush_ms && !atomic_load(&flusher_stop); waited += 20) {
            struct timespec step = {0, 20000000L};
            nanosleep(&step, NULL);
        }
        flush_once();
    }
    return NULL;
}

/* MPI_SONDE_UNWIND=auto: frame pointers if the program's call of MPI_Init
 * unwinds the same way with them as with libunwind (which reads .eh_frame and
 * is right whether or not the program keeps frame pointers): the return
 * address of the function that called MPI_Init must be the same both ways.
 * (Without frame pointers that function's frame register holds something
 * else, or 0 from _start, and the walk fails or lands elsewhere.) Else libunwind. */
static void choose_unwinder(uint64_t site, uintptr_t fp) {
    if (cfg.unwind != UNWIND_AUTO) {
        use_fp = cfg.unwind == UNWIND_FP;
        return;
    }
    uint64_t a[1] = {0}, b[1] = {0};
    int ta, tb;
    struct thr *t = my;
    int na = t ? stackwalk_fp(fp, t->stack_lo, t->stack_hi, a, 1, &ta) : 0;
    int nb = stackwalk_libunwind(fp, site, b, 1, &tb);
    use_fp = na == 1 && nb == 1 && a[0] == b[0];
}

static void start_probe(uint64_t init_site, uintptr_t init_fp) {
    uint64_t t_init = mono_ns();
    read_config();
    if (cfg.start_s > 0) window_start_ns = t_init + (uint64_t)(cfg.start_s * 1e9);
    if (cfg.stop_s >= 0) window_stop_ns = t_init + (uint64_t)(cfg.stop_s * 1e9);
    PMPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &world_size);
    if (env("MPI_SONDE_DISABLE") || !rank_selected(env("MPI_SONDE_RANKS"), world_rank)) return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_tick;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(cfg.sig, &sa, NULL) != 0) return;
    pthread_key_create(&thr_key, thr_exit);
    stackwalk_init();
    cfg.enabled = 1;
    atomic_store(&sampling, atomic_load(&pcontrol_on));
    register_thread(); /* the thread that called MPI_Init, from now on */
    choose_unwinder(init_site, init_fp);
    if (pthread_create(&flusher, NULL, flusher_main, NULL) == 0) flusher_started = 1;
    if (cfg.verbose)
        fprintf(stderr, "sonde mpi probe: rank %d/%d job %s sampling at %d Hz to %s:%d, stacks of %d frames by %s\n",
                world_rank, world_size, cfg.job, cfg.hz, cfg.host, cfg.port, cfg.depth,
                unwind_names[use_fp ? UNWIND_FP : UNWIND_LIBUNWIND]);
}

static void stop_probe(void) {
    if (!cfg.enabled) return;
    atomic_store(&sampling, 0);
    int n = atomic_load(&nthreads);
    for (int i = 0; i < n && i < MAX_THREADS; i++)
        if (atomic_exchange(&threads[i].live, 0)) timer_delete(threads[i].timer);
    if (flusher_started) {
        atomic_store(&flusher_stop, 1);
        pthread_join(flusher, NULL);
        flusher_started = 0;
    }
    flush_once();
    cfg.enabled = 0;
    if (!cfg.verbose) return;
    uint64_t walks = 0, reused = 0, walk_ns = 0, by_time[TIME_BUCKETS] = {0}, below = 0;
    for (int i = 0; i < n && i < MAX_THREADS; i++) {
        walks += threads[i].walks;
        reused += threads[i].reused;
        walk_ns += threads[i].walk_ns;
        for (int b = 0; b < TIME_BUCKETS; b++) by_time[b] += threads[i].walk_times[b];
    }
    unsigned median = 0;
    while (median < TIME_BUCKETS - 1 && (below += by_time[median]) * 2 < walks) median++;
    /* One line per rank (rows, drops, stacks), as the README promises. A
     * depth of 1 walks nothing: its "walks" took the call site alone. */
    fprintf(stderr,
            "sonde mpi probe: rank %d sent %llu rows in %llu posts; dropped %llu rows (%llu posts), %llu ticks "
            "(bins full); %llu ticks without a stack (stack table full); stacks: %llu walks by %s, %.0f ns each "
            "on average, median %llu-%llu ns (with interning); %llu ticks took the stack of a walk earlier in "
            "the same MPI call\n",
            world_rank, (unsigned long long)sent_rows, (unsigned long long)sent_posts,
            (unsigned long long)dropped_rows, (unsigned long long)dropped_posts, (unsigned long long)dropped_ticks,
            (unsigned long long)unstacked_ticks, (unsigned long long)walks,
            cfg.depth == 1 ? "none (MPI_SONDE_DEPTH=1: the call site)" : unwind_names[use_fp ? UNWIND_FP : UNWIND_LIBUNWIND],
            walks ? (double)walk_ns / (double)walks : 0.0, (unsigned long long)bucket_start_ns(median),
            (unsigned long long)bucket_start_ns(median + 1), (unsigned long long)reused);
}

/* ------------------------------------------------------------------------ */
/* The wrappers.                                                              */

/* BEGIN enters (depth counts nested calls, e.g. an MPI library calling MPI_*
 * itself: the outermost call keeps its state); END leaves. t0 is NULL when this
 * thread is not sampled. */
#define BEGIN(name, state) struct thr *t0 = (enter(F_##name, CALL_SITE(), WRAP_FP(), state), my)
#define END() do { if (t0) leave(); } while (0)

int MPI_Init(int *argc, char ***argv) {
    int rc = PMPI_Init(argc, argv);
    if (rc == MPI_SUCCESS) start_probe(CALL_SITE(), WRAP_FP());
    return rc;
}

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided) {
    int rc = PMPI_Init_thread(argc, argv, required, provided);
    if (rc == MPI_SUCCESS) start_probe(CALL_SITE(), WRAP_FP());
    return rc;
}

int MPI_Finalize(void) {
    stop_probe();
    return PMPI_Finalize();
}

/* mpiP's convention: 0 pauses sampling, any other level resumes it. */
int MPI_Pcontrol(const int level, ...) {
    atomic_store(&pcontrol_on, level != 0);
    if (cfg.enabled) atomic_store(&sampling, level != 0);
    return PMPI_Pcontrol(level);
}

#define LOCAL(ret_name, params, args)                  \
    int MPI_##ret_name params {                        \
        BEGIN(MPI_##ret_name, ST_WORK);                \
        int rc = PMPI_##ret_name args;                 \
        END();                                         \
        return rc;                                     \
    }

LOCAL(Comm_rank, (MPI_Comm comm, int *rank), (comm, rank))
LOCAL(Comm_size, (MPI_Comm comm, int *size), (comm, size))
LOCAL(Comm_free, (MPI_Comm *comm), (comm))
LOCAL(Bsend, (const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm),
      (buf, count, dt, dest, tag, comm))
LOCAL(Rsend, (const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm),
      (buf, count, dt, dest, tag, comm))
LOCAL(Isend, (const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm, MPI_Request *req),
      (buf, count, dt, dest, tag, comm, req))
LOCAL(Issend, (const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm, MPI_Request *req),
      (buf, count, dt, dest, tag, comm, req))
LOCAL(Irecv, (void *buf, int count, MPI_Datatype dt, int src, int tag, MPI_Comm comm, MPI_Request *req),
      (buf, count, dt, src, tag, comm, req))
LOCAL(Iprobe, (int src, int tag, MPI_Comm comm, int *flag, MPI_Status *st), (src, tag, comm, flag, st))
LOCAL(Test, (MPI_Request *req, int *flag, MPI_Status *st), (req, flag, st))
LOCAL(Testall, (int n, MPI_Request reqs[], int *flag, MPI_Status sts[]), (n, reqs, flag, sts))
LOCAL(Testany, (int n, MPI_Request reqs[], int *idx, int *flag, MPI_Status *st), (n, reqs, idx, flag, st))
LOCAL(Testsome, (int n, MPI_Request reqs[], int *outc, int idx[], MPI_Status sts[]), (n, reqs, outc, idx, sts))
LOCAL(Ibarrier, (MPI_Comm comm, MPI_Request *req), (comm, req))
LOCAL(Ibcast, (void *buf, int count, MPI_Datatype dt, int root, MPI_Comm comm, MPI_Request *req),
      (buf, count, dt, root, comm, req))
LOCAL(Iallreduce,
      (const void *s, void *r, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm, MPI_Request *req),
      (s, r, count, dt, op, comm, req))

/*
 * Completion calls, "ask, then block": the non-blocking twin first asks
 * whether the call can complete now (MPI_Iprobe for a receive, MPI_Test* for
 * a wait). If it can, everything is Work. If not, the thread is about to wait
 * for another process: Stall until the blocking call returns.
 */
int MPI_Wait(MPI_Request *req, MPI_Status *st) {
    BEGIN(MPI_Wait, ST_WORK);
    int flag = 0;
    int rc = PMPI_Test(req, &flag, st);
    if (rc == MPI_SUCCESS && !flag) {
        set_state(ST_STALL);
        rc = PMPI_Wait(req, st);
    }
    END();
    return rc;
}

int MPI_Waitall(int n, MPI_Request reqs[], MPI_Status sts[]) {
    BEGIN(MPI_Waitall, ST_WORK);
    int flag = 0;
    /* Testall modifies no request unless all are complete. */
    int rc = PMPI_Testall(n, reqs, &flag, sts);
    if (rc == MPI_SUCCESS && !flag) {
        set_state(ST_STALL);
        rc = PMPI_Waitall(n, reqs, sts);
    }
    END();
    return rc;
}

int MPI_Waitany(int n, MPI_Request reqs[], int *idx, MPI_Status *st) {
    BEGIN(MPI_Waitany, ST_WORK);
    int flag = 0;
    int rc = PMPI_Testany(n, reqs, idx, &flag, st);
    if (rc == MPI_SUCCESS && !flag) {
        set_state(ST_STALL);
        rc = PMPI_Waitany(n, reqs, idx, st);
    }
    END();
    return rc;
}

int MPI_Waitsome(int n, MPI_Request reqs[], int *outc, int idx[], MPI_Status sts[]) {
    BEGIN(MPI_Waitsome, ST_WORK);
    int rc = PMPI_Testsome(n, reqs, outc, idx, sts);
    /* Waitsome returns as soon as one completes: a Testsome with some is a valid answer. */
    if (rc == MPI_SUCCESS && *outc == 0) {
        set_state(ST_STALL);
        rc = PMPI_Waitsome(n, reqs, outc, idx, sts);
    }
    END();
    return rc;
}

int MPI_Recv(void *buf, int count, MPI_Datatype dt, int src, int tag, MPI_Comm comm, MPI_Status *st) {
    BEGIN(MPI_Recv, ST_WORK);
    int flag = 1;
    if (src != MPI_PROC_NULL) PMPI_Iprobe(src, tag, comm, &flag, MPI_STATUS_IGNORE);
    if (!flag) set_state(ST_STALL);
    int rc = PMPI_Recv(buf, count, dt, src, tag, comm, st);
    END();
    return rc;
}

int MPI_Probe(int src, int tag, MPI_Comm comm, MPI_Status *st) {
    BEGIN(MPI_Probe, ST_WORK);
    int flag = 1;
    if (src != MPI_PROC_NULL) PMPI_Iprobe(src, tag, comm, &flag, MPI_STATUS_IGNORE);
    if (!flag) set_state(ST_STALL);
    int rc = PMPI_Probe(src, tag, comm, st);
    END();
    return rc;
}

/* A blocking send is its non-blocking start plus a wait (the standard's own
 * definition): Work while it starts, Stall if it then has to wait (a
 * rendezvous send waiting for its receiver, a synchronous send). */
static int send_as_isend(int func, int sync, uint64_t site, uintptr_t fp, const void *buf, int count,
                         MPI_Datatype dt, int dest, int tag, MPI_Comm comm) {
    struct thr *t0 = (enter(func, site, fp, ST_WORK), my);
    MPI_Request req;
    int rc = sync ? PMPI_Issend(buf, count, dt, dest, tag, comm, &req)
                  : PMPI_Isend(buf, count, dt, dest, tag, comm, &req);
    if (rc == MPI_SUCCESS) {
        int flag = 0;
        rc = PMPI_Test(&req, &flag, MPI_STATUS_IGNORE);
        if (rc == MPI_SUCCESS && !flag) {
            set_state(ST_STALL);
            rc = PMPI_Wait(&req, MPI_STATUS_IGNORE);
        }
    }
    END();
    return rc;
}

int MPI_Send(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm) {
    return send_as_isend(F_MPI_Send, 0, CALL_SITE(), WRAP_FP(), buf, count, dt, dest, tag, comm);
}

int MPI_Ssend(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm) {
    return send_as_isend(F_MPI_Ssend, 1, CALL_SITE(), WRAP_FP(), buf, count, dt, dest, tag, comm);
}

int MPI_Sendrecv(const void *sbuf, int scount, MPI_Datatype sdt, int dest, int stag, void *rbuf, int rcount,
                 MPI_Datatype rdt, int src, int rtag, MPI_Comm comm, MPI_Status *st) {
    BEGIN(MPI_Sendrecv, ST_WORK);
    int flag = 1;
    if (src != MPI_PROC_NULL) PMPI_Iprobe(src, rtag, comm, &flag, MPI_STATUS_IGNORE);
    if (!flag) set_state(ST_STALL);
    int rc = PMPI_Sendrecv(sbuf, scount, sdt, dest, stag, rbuf, rcount, rdt, src, rtag, comm, st);
    END();
    return rc;
}

int MPI_Sendrecv_replace(void *buf, int count, MPI_Datatype dt, int dest, int stag, int src, int rtag,
                         MPI_Comm comm, MPI_Status *st) {
    BEGIN(MPI_Sendrecv_replace, ST_WORK);
    int flag = 1;
    if (src != MPI_PROC_NULL) PMPI_Iprobe(src, rtag, comm, &flag, MPI_STATUS_IGNORE);
    if (!flag) set_state(ST_STALL);
    int rc = PMPI_Sendrecv_replace(buf, count, dt, dest, stag, src, rtag, comm, st);
    END();
    return rc;
}

/*
 * Blocking collectives. No public interface tells, from inside, whether the
 * other members have arrived. By default the whole call is Stall: on the
 * (common) small collective the time is dominated by waiting for the last
 * member. With MPI_SONDE_COLLECTIVE_SYNC=1 a barrier on the same communicator
 * runs first (the method of Cray PAT's PAT_RT_MPI_SYNC): the barrier is the
 * Stall (waiting for the late members), the collective itself is Work.
 * MPI_Barrier is synchronisation only: always Stall.
 */
static inline void coll_enter(struct thr *t0, MPI_Comm comm) {
    if (!t0 || t0->depth != 1) return;
    if (cfg.coll_sync) {
        set_state(ST_STALL);
        PMPI_Barrier(comm);
        set_state(ST_WORK);
    } else {
        set_state(ST_STALL);
    }
}

#define COLL(name, params, comm, args)        \
    int MPI_##name params {                   \
        BEGIN(MPI_##name, ST_WORK);           \
        coll_enter(t0, comm);                 \
        int rc = PMPI_##name args;            \
        END();                                \
        return rc;                            \
    }

int MPI_Barrier(MPI_Comm comm) {
    BEGIN(MPI_Barrier, ST_STALL);
    int rc = PMPI_Barrier(comm);
    END();
    return rc;
}

COLL(Bcast, (void *buf, int count, MPI_Datatype dt, int root, MPI_Comm comm), comm, (buf, count, dt, root, comm))
COLL(Reduce, (const void *s, void *r, int count, MPI_Datatype dt, MPI_Op op, int root, MPI_Comm comm), comm,
     (s, r, count, dt, op, root, comm))
COLL(Allreduce, (const void *s, void *r, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm), comm,
     (s, r, count, dt, op, comm))
COLL(Gather, (const void *s, int sc, MPI_Datatype sdt, void *r, int rc_, MPI_Datatype rdt, int root, MPI_Comm comm),
     comm, (s, sc, sdt, r, rc_, rdt, root, comm))
COLL(Gatherv,
     (const void *s, int sc, MPI_Datatype sdt, void *r, const int rcs[], const int displs[], MPI_Datatype rdt,
      int root, MPI_Comm comm),
     comm, (s, sc, sdt, r, rcs, displs, rdt, root, comm))
COLL(Scatter, (const void *s, int sc, MPI_Datatype sdt, void *r, int rc_, MPI_Datatype rdt, int root, MPI_Comm comm),
     comm, (s, sc, sdt, r, rc_, rdt, root, comm))
COLL(Scatterv,
     (const void *s, const int scs[], const int displs[], MPI_Datatype sdt, void *r, int rc_, MPI_Datatype rdt,
      int root, MPI_Comm comm),
     comm, (s, scs, displs, sdt, r, rc_, rdt, root, comm))
COLL(Allgather, (const void *s, int sc, MPI_Datatype sdt, void *r, int rc_, MPI_Datatype rdt, MPI_Comm comm), comm,
     (s, sc, sdt, r, rc_, rdt, comm))
COLL(Allgatherv,
     (const void *s, int sc, MPI_Datatype sdt, void *r, const int rcs[], const int displs[], MPI_Datatype rdt,
      MPI_Comm comm),
     comm, (s, sc, sdt, r, rcs, displs, rdt, comm))
COLL(Alltoall, (const void *s, int sc, MPI_Datatype sdt, void *r, int rc_, MPI_Datatype rdt, MPI_Comm comm), comm,
     (s, sc, sdt, r, rc_, rdt, comm))
COLL(Alltoallv,
     (const void *s, const int scs[], const int sd[], MPI_Datatype sdt, void *r, const int rcs[], const int rd[],
      MPI_Datatype rdt, MPI_Comm comm),
     comm, (s, scs, sd, sdt, r, rcs, rd, rdt, comm))
COLL(Reduce_scatter, (const void *s, void *r, const int rcs[], MPI_Datatype dt, MPI_Op op, MPI_Comm comm), comm,
     (s, r, rcs, dt, op, comm))
COLL(Scan, (const void *s, void *r, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm), comm,
     (s, r, count, dt, op, comm))
COLL(Exscan, (const void *s, void *r, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm), comm,
     (s, r, count, dt, op, comm))
COLL(Comm_dup, (MPI_Comm comm, MPI_Comm *out), comm, (comm, out))
COLL(Comm_split, (MPI_Comm comm, int color, int key, MPI_Comm *out), comm, (comm, color, key, out))
