/*
 * A fake libnvidia-ml.so.1 for machines without an NVIDIA GPU: the NVML C ABI
 * (the entry points sonde reaches through nvml-wrapper), answering from a
 * script that says what each GPU reads over time. sonde loads it exactly as it
 * loads the real library (dlopen + dlsym by nvml-wrapper), so every line of
 * sonde's NVML path runs. The script format is in README.md beside this file.
 *
 * Built with -DFAKE_NVML_MINIMAL it leaves out everything but the calls a
 * plain utilisation/memory reading needs: a driver library older than the one
 * sonde was written against (symbols missing at dlsym time).
 *
 * Time is milliseconds since nvmlInit_v2 (CLOCK_MONOTONIC). Values are step
 * functions of time: a key reads the last value set at or before now.
 * Counters (energy, NVLink bytes) are the integral of their rate over time,
 * and GPM metrics and buffered samples are averages over their window, so a
 * reader sees what it would see from a real driver, not a copy of the script.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <libgen.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- the NVML ABI (the subset sonde uses; values as in nvml.h) ---- */
typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_UNKNOWN = 999,
};
#define EXPORT __attribute__((visibility("default")))

struct fake_dev;
typedef struct fake_dev *nvmlDevice_t;
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;
typedef struct { unsigned int pid; unsigned long long usedGpuMemory; unsigned int gpuInstanceId, computeInstanceId; } nvmlProcessInfo_t;
typedef struct { unsigned int pid; unsigned long long timeStamp; unsigned int smUtil, memUtil, encUtil, decUtil; } nvmlProcessUtilizationSample_t;
typedef union { double dVal; unsigned int uiVal; unsigned long ulVal; unsigned long long ullVal; long long sllVal; } nvmlValue_t;
typedef struct { unsigned long long timeStamp; nvmlValue_t sampleValue; } nvmlSample_t;
typedef struct {
    unsigned int fieldId, scopeId;
    long long timestamp, latencyUsec;
    int valueType;
    nvmlReturn_t nvmlReturn;
    nvmlValue_t value;
} nvmlFieldValue_t;
typedef struct fake_event_set *nvmlEventSet_t;
typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType, eventData;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlEventData_t;
typedef struct fake_gpm_sample *nvmlGpmSample_t;
typedef struct { unsigned int version, isSupportedDevice; } nvmlGpmSupport_t;
typedef struct {
    unsigned int metricId;
    nvmlReturn_t nvmlReturn;
    double value;
    struct { char *shortName, *longName, *unit; } metricInfo;
} nvmlGpmMetric_t;
typedef struct {
    unsigned int version, numMetrics;
    nvmlGpmSample_t sample1, sample2;
    nvmlGpmMetric_t metrics[98];
} nvmlGpmMetricsGet_t;

#define NVML_VALUE_TYPE_DOUBLE 0
#define NVML_VALUE_TYPE_UNSIGNED_INT 1
#define NVML_VALUE_TYPE_UNSIGNED_LONG_LONG 3
#define NVML_GPU_UTILIZATION_SAMPLES 1
#define NVML_MEMORY_UTILIZATION_SAMPLES 2
#define NVML_FI_DEV_NVLINK_LINK_COUNT 91
#define NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX 138
#define NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX 139
#define NVML_EVENT_TYPE_XID 8ULL
#define NVML_CLOCK_SM 1
#define NVML_PCIE_UTIL_TX_BYTES 0
#define NVML_PCIE_UTIL_RX_BYTES 1

/* ---- the script ---- */
enum key {
    K_UTIL, K_MEM_UTIL, K_MEM_USED, K_MEM_TOTAL, K_SM_CLOCK, K_POWER, K_TEMP,
    K_PCIE_TX, K_PCIE_RX, K_NVLINK_TX, K_NVLINK_RX, K_THROTTLE, K_ECC_CORRECTED,
    K_ECC_UNCORRECTED, K_SM_ACTIVE, K_SM_OCCUPANCY, K_TENSOR_ACTIVE, K_DRAM_ACTIVE,
    K_COUNT
};
static const char *const key_names[K_COUNT] = {
    "util", "mem_util", "mem_used", "mem_total", "sm_clock", "power", "temp",
    "pcie_tx", "pcie_rx", "nvlink_tx", "nvlink_rx", "throttle", "ecc_corrected",
    "ecc_uncorrected", "sm_active", "sm_occupancy", "tensor_active", "dram_active",
};
/* What a GPU reads before the script sets anything (an idle 80 GB card). */
static const double key_defaults[K_COUNT] = {
    0, 0, 1ULL << 30, 80ULL << 30, 1980, 70000, 35,
    0, 0, 0, 0, 1 /* GpuIdle */, 0,
    0, 0, 0, 0, 0,
};

enum kind { E_SET, E_PROC, E_XID, E_LOST, E_FAIL };
struct entry {
    double t_ms;
    int gpu; /* -1: every GPU */
    enum kind kind;
    int key;                  /* E_SET */
    double value;             /* E_SET; E_XID code; E_FAIL code */
    unsigned int pid;         /* E_PROC */
    unsigned long long mem;   /* E_PROC */
    unsigned int sm;          /* E_PROC */
    char func[64];            /* E_FAIL: the NVML function that fails */
    int delivered;            /* E_XID: handed out by nvmlEventSetWait_v2 */
};

#define MAX_GPUS 64
#define MAX_MIG 7
#define MAX_ENTRIES 4096
#define MAX_PROCS 64

struct fake_dev {
    int gpu;  /* index of the physical GPU */
    int mig;  /* -1: the GPU itself; else the MIG instance */
};

static struct {
    pthread_mutex_t lock;
    int loaded, initialized;
    int init_error;
    unsigned int count;
    char name[MAX_GPUS][96], uuid[MAX_GPUS][96];
    int gpm[MAX_GPUS], mig[MAX_GPUS], nvlinks[MAX_GPUS];
    double sample_ms;
    struct entry *entries;
    int n_entries;
    struct timespec t0;
    struct fake_dev devs[MAX_GPUS], mig_devs[MAX_GPUS][MAX_MIG];
} S = { .lock = PTHREAD_MUTEX_INITIALIZER, .sample_ms = 1000.0 / 6 };

struct fake_event_set { unsigned long long types[MAX_GPUS]; };
struct fake_gpm_sample { int gpu; double t_ms; };

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - S.t0.tv_sec) * 1e3 + (double)(t.tv_nsec - S.t0.tv_nsec) / 1e6;
}

/* Microseconds of wall-clock time at script time t_ms (NVML's sample clock). */
__attribute__((unused)) static unsigned long long wall_us_at(double t_ms) {
    struct timespec w;
    clock_gettime(CLOCK_REALTIME, &w);
    double now_us = (double)w.tv_sec * 1e6 + (double)w.tv_nsec / 1e3;
    return (unsigned long long)(now_us - (now_ms() - t_ms) * 1e3);
}

static void die(int line, const char *what) {
    fprintf(stderr, "fake NVML: script line %d: %s\n", line, what);
    exit(2);
}

static int parse_key(const char *s) {
    for (int k = 0; k < K_COUNT; k++)
        if (strcmp(s, key_names[k]) == 0) return k;
    return -1;
}

static void add(struct entry e, int line) {
    if (S.n_entries == MAX_ENTRIES) die(line, "more than 4096 entries");
    S.entries[S.n_entries++] = e;
}

/* One `at MS gpu I|* ...` line: its key/value pairs after the GPU. */
static void parse_at(double t, int gpu, char **tok, int n, int line) {
    for (int i = 0; i < n;) {
        struct entry e = { .t_ms = t, .gpu = gpu };
        if (strcmp(tok[i], "proc") == 0) {
            if (i + 3 >= n) die(line, "proc needs PID MEM_BYTES SM_PERCENT");
            e.kind = E_PROC;
            e.pid = (unsigned)strtoul(tok[i + 1], NULL, 10);
            e.mem = strtoull(tok[i + 2], NULL, 10);
            e.sm = (unsigned)strtoul(tok[i + 3], NULL, 10);
            i += 4;
        } else if (strcmp(tok[i], "xid") == 0) {
            if (i + 1 >= n) die(line, "xid needs a code");
            e.kind = E_XID;
            e.value = strtod(tok[i + 1], NULL);
            i += 2;
        } else if (strcmp(tok[i], "lost") == 0) {
            e.kind = E_LOST;
            i += 1;
        } else if (strcmp(tok[i], "fail") == 0) {
            if (i + 2 >= n) die(line, "fail needs FUNCTION CODE");
            e.kind = E_FAIL;
            snprintf(e.func, sizeof e.func, "%s", tok[i + 1]);
            e.value = strtod(tok[i + 2], NULL);
            i += 3;
        } else {
            int k = parse_key(tok[i]);
            if (k < 0) die(line, "unknown key");
            if (i + 1 >= n) die(line, "a key needs a value");
            e.kind = E_SET;
            e.key = k;
            e.value = strtod(tok[i + 1], NULL);
            i += 2;
        }
        add(e, line);
    }
}

static void load_script(void) {
    S.count = 1;
    for (int g = 0; g < MAX_GPUS; g++) {
        snprintf(S.name[g], sizeof S.name[g], "Fake NVIDIA H100 80GB HBM3");
        snprintf(S.uuid[g], sizeof S.uuid[g], "GPU-fa6e0000-0000-4000-8000-%012d", g);
        S.gpm[g] = 1;
        S.devs[g] = (struct fake_dev){ g, -1 };
        for (int m = 0; m < MAX_MIG; m++) S.mig_devs[g][m] = (struct fake_dev){ g, m };
    }
    S.entries = calloc(MAX_ENTRIES, sizeof *S.entries);
    const char *path = getenv("FAKE_NVML_SCRIPT");
    char beside[4096];
    if (!path || !*path) {
        /* else `fake-nvml.script` beside this library file, if there is one:
         * a test copies the library into its own directory to get its own
         * state (one dlopen per file) and script */
        Dl_info info;
        if (!dladdr((void *)load_script, &info) || !info.dli_fname) return;
        char self[4096];
        snprintf(self, sizeof self, "%s", info.dli_fname);
        snprintf(beside, sizeof beside, "%s/fake-nvml.script", dirname(self));
        if (access(beside, R_OK) != 0) return;
        path = beside;
    }
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "fake NVML: cannot open FAKE_NVML_SCRIPT=%s\n", path);
        exit(2);
    }
    char buf[1024];
    for (int line = 1; fgets(buf, sizeof buf, f); line++) {
        char *hash = strchr(buf, '#');
        if (hash) *hash = 0;
        char *tok[64];
        int n = 0;
        for (char *p = strtok(buf, " \t\r\n"); p && n < 64; p = strtok(NULL, " \t\r\n")) tok[n++] = p;
        if (n == 0) continue;
        if (strcmp(tok[0], "gpus") == 0 && n == 2) {
            S.count = (unsigned)atoi(tok[1]);
            if (S.count > MAX_GPUS) die(line, "at most 64 GPUs");
        } else if (strcmp(tok[0], "init_error") == 0 && n == 2) {
            S.init_error = atoi(tok[1]);
        } else if (strcmp(tok[0], "sample_ms") == 0 && n == 2) {
            S.sample_ms = strtod(tok[1], NULL);
            if (S.sample_ms <= 0) die(line, "sample_ms must be > 0");
        } else if (strcmp(tok[0], "gpu") == 0 && n >= 4) {
            int g = atoi(tok[1]);
            if (g < 0 || g >= MAX_GPUS) die(line, "GPU index out of range");
            /* the rest of the line, for names with spaces */
            char rest[256] = "";
            for (int i = 3; i < n; i++) {
                if (i > 3) strncat(rest, " ", sizeof rest - strlen(rest) - 1);
                strncat(rest, tok[i], sizeof rest - strlen(rest) - 1);
            }
            if (strcmp(tok[2], "name") == 0) snprintf(S.name[g], sizeof S.name[g], "%s", rest);
            else if (strcmp(tok[2], "uuid") == 0) snprintf(S.uuid[g], sizeof S.uuid[g], "%s", rest);
            else if (strcmp(tok[2], "gpm") == 0) S.gpm[g] = atoi(rest);
            else if (strcmp(tok[2], "mig") == 0) S.mig[g] = atoi(rest) > MAX_MIG ? MAX_MIG : atoi(rest);
            else if (strcmp(tok[2], "nvlinks") == 0) S.nvlinks[g] = atoi(rest);
            else die(line, "gpu I name|uuid|gpm|mig|nvlinks VALUE");
        } else if (strcmp(tok[0], "at") == 0 && n >= 5 && strcmp(tok[2], "gpu") == 0) {
            int g = strcmp(tok[3], "*") == 0 ? -1 : atoi(tok[3]);
            parse_at(strtod(tok[1], NULL), g, tok + 4, n - 4, line);
        } else if (strcmp(tok[0], "at") == 0 && n >= 4) {
            /* `at MS fail FUNC CODE` and the like: every GPU */
            parse_at(strtod(tok[1], NULL), -1, tok + 2, n - 2, line);
        } else {
            die(line, "unknown line (see tests/fake-nvml/README.md)");
        }
    }
    fclose(f);
}

static int applies(const struct entry *e, int gpu) { return e->gpu < 0 || e->gpu == gpu; }

/* The value of key k on GPU g at script time t. */
static double value_at(int g, int k, double t) {
    double v = key_defaults[k];
    for (int i = 0; i < S.n_entries; i++) {
        const struct entry *e = &S.entries[i];
        if (e->kind == E_SET && e->key == k && e->t_ms <= t && applies(e, g)) v = e->value;
    }
    return v;
}

/* The integral of key k over [a, b] ms, in value-milliseconds. */
static double integral(int g, int k, double a, double b) {
    if (b <= a) return 0;
    double sum = 0, t = a;
    while (t < b) {
        double next = b;
        for (int i = 0; i < S.n_entries; i++) {
            const struct entry *e = &S.entries[i];
            if (e->kind == E_SET && e->key == k && applies(e, g) && e->t_ms > t && e->t_ms < next) next = e->t_ms;
        }
        sum += value_at(g, k, t) * (next - t);
        t = next;
    }
    return sum;
}

static double average(int g, int k, double a, double b) {
    return b > a ? integral(g, k, a, b) / (b - a) : value_at(g, k, b);
}

/* NVML_ERROR_GPU_IS_LOST once the script has lost GPU g. */
static int lost(int g, double t) {
    for (int i = 0; i < S.n_entries; i++)
        if (S.entries[i].kind == E_LOST && S.entries[i].t_ms <= t && applies(&S.entries[i], g)) return 1;
    return 0;
}

/* The error the script makes function `fn` return now on GPU g (0: none). */
static nvmlReturn_t scripted_failure(const char *fn, int g, double t) {
    nvmlReturn_t r = NVML_SUCCESS;
    for (int i = 0; i < S.n_entries; i++) {
        const struct entry *e = &S.entries[i];
        if (e->kind == E_FAIL && e->t_ms <= t && (g < 0 || applies(e, g)) && strcmp(e->func, fn) == 0)
            r = (nvmlReturn_t)e->value;
    }
    return r;
}

/* Running processes on GPU g at t: the last `proc` line per PID; MEM 0 ends it. */
__attribute__((unused)) static int procs_at(int g, double t, nvmlProcessInfo_t *out, unsigned int *sm) {
    int n = 0;
    for (int i = 0; i < S.n_entries; i++) {
        const struct entry *e = &S.entries[i];
        if (e->kind != E_PROC || e->t_ms > t || !applies(e, g)) continue;
        int j = 0;
        while (j < n && out[j].pid != e->pid) j++;
        if (j == n) {
            if (n == MAX_PROCS) continue;
            n++;
        }
        out[j] = (nvmlProcessInfo_t){ e->pid, e->mem, 0xFFFFFFFF, 0xFFFFFFFF };
        sm[j] = e->sm;
    }
    int kept = 0;
    for (int j = 0; j < n; j++)
        if (out[j].usedGpuMemory > 0) {
            sm[kept] = sm[j];
            out[kept++] = out[j];
        }
    return kept;
}

/* Every device entry point starts here: the lock, the init check, the device
 * check, lost GPUs and scripted failures. */
#define ENTER_DEV(fn, dev)                                              \
    pthread_mutex_lock(&S.lock);                                        \
    double t = now_ms();                                                \
    nvmlReturn_t r_ = check(fn, dev, t);                                \
    if (r_ != NVML_SUCCESS) {                                           \
        pthread_mutex_unlock(&S.lock);                                  \
        return r_;                                                      \
    }                                                                   \
    int g = (dev)->gpu;                                                 \
    (void)g
#define LEAVE(r)                                                        \
    do {                                                                \
        pthread_mutex_unlock(&S.lock);                                  \
        return (r);                                                     \
    } while (0)

static nvmlReturn_t check(const char *fn, nvmlDevice_t dev, double t) {
    if (!S.initialized) return NVML_ERROR_UNINITIALIZED;
    if (!dev || dev->gpu < 0 || (unsigned)dev->gpu >= S.count) return NVML_ERROR_INVALID_ARGUMENT;
    if (lost(dev->gpu, t)) return NVML_ERROR_GPU_IS_LOST;
    return scripted_failure(fn, dev->gpu, t);
}

static nvmlReturn_t copy_text(char *dst, unsigned int len, const char *src) {
    if (!dst) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

/* A MIG instance gets an equal share of its GPU's memory. */
static double mem_share(nvmlDevice_t d) { return d->mig >= 0 && S.mig[d->gpu] > 0 ? 1.0 / S.mig[d->gpu] : 1.0; }

/* ---- library ---- */
EXPORT nvmlReturn_t nvmlInit_v2(void) {
    pthread_mutex_lock(&S.lock);
    if (!S.loaded) {
        load_script();
        S.loaded = 1;
    }
    nvmlReturn_t r = scripted_failure("nvmlInit_v2", -1, 0);
    if (S.init_error) r = S.init_error;
    if (r == NVML_SUCCESS && !S.initialized) {
        clock_gettime(CLOCK_MONOTONIC, &S.t0);
        S.initialized = 1;
    }
    LEAVE(r);
}
EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    return nvmlInit_v2();
}
EXPORT nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&S.lock);
    S.initialized = 0;
    LEAVE(NVML_SUCCESS);
}
EXPORT const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error";
    }
}
EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *v, unsigned int len) {
    if (!S.initialized) return NVML_ERROR_UNINITIALIZED;
    return copy_text(v, len, "550.54.15-fake");
}
EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *v, unsigned int len) { return copy_text(v, len, "12.550.54.15-fake"); }
EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    pthread_mutex_lock(&S.lock);
    if (!S.initialized) LEAVE(NVML_ERROR_UNINITIALIZED);
    nvmlReturn_t r = scripted_failure("nvmlDeviceGetCount_v2", -1, now_ms());
    if (r == NVML_SUCCESS) *count = S.count;
    LEAVE(r);
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *dev) {
    pthread_mutex_lock(&S.lock);
    if (!S.initialized) LEAVE(NVML_ERROR_UNINITIALIZED);
    if (index >= S.count) LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    nvmlReturn_t r = check("nvmlDeviceGetHandleByIndex_v2", &S.devs[index], now_ms());
    if (r == NVML_SUCCESS) *dev = &S.devs[index];
    LEAVE(r);
}
EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int *index) {
    ENTER_DEV("nvmlDeviceGetIndex", d);
    *index = (unsigned)g;
    LEAVE(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int len) {
    ENTER_DEV("nvmlDeviceGetName", d);
    char buf[128];
    if (d->mig >= 0) snprintf(buf, sizeof buf, "%s MIG %dg", S.name[g], 1);
    LEAVE(copy_text(name, len, d->mig >= 0 ? buf : S.name[g]));
}
EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int len) {
    ENTER_DEV("nvmlDeviceGetUUID", d);
    char buf[128];
    if (d->mig >= 0) snprintf(buf, sizeof buf, "MIG-%s-%d", S.uuid[g] + 4, d->mig);
    LEAVE(copy_text(uuid, len, d->mig >= 0 ? buf : S.uuid[g]));
}
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
    ENTER_DEV("nvmlDeviceGetMemoryInfo", d);
    double share = mem_share(d);
    m->total = (unsigned long long)(value_at(g, K_MEM_TOTAL, t) * share);
    m->used = (unsigned long long)(value_at(g, K_MEM_USED, t) * share);
    m->free = m->total > m->used ? m->total - m->used : 0;
    LEAVE(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m) {
    ENTER_DEV("nvmlDeviceGetMemoryInfo_v2", d);
    if ((m->version >> 24) != 2) LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    double share = mem_share(d);
    m->total = (unsigned long long)(value_at(g, K_MEM_TOTAL, t) * share);
    m->used = (unsigned long long)(value_at(g, K_MEM_USED, t) * share);
    m->reserved = 0;
    m->free = m->total > m->used ? m->total - m->used : 0;
    LEAVE(NVML_SUCCESS);
}
/* Like the real driver: a MIG instance has no whole-GPU utilisation. */
EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u) {
    ENTER_DEV("nvmlDeviceGetUtilizationRates", d);
    if (d->mig >= 0) LEAVE(NVML_ERROR_NOT_SUPPORTED);
    /* the driver's own figure: the average over its last sample period */
    u->gpu = (unsigned)(average(g, K_UTIL, t - S.sample_ms, t) + 0.5);
    u->memory = (unsigned)(average(g, K_MEM_UTIL, t - S.sample_ms, t) + 0.5);
    LEAVE(NVML_SUCCESS);
}

#ifndef FAKE_NVML_MINIMAL
EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *mw) {
    ENTER_DEV("nvmlDeviceGetPowerUsage", d);
    if (d->mig >= 0) LEAVE(NVML_ERROR_NOT_SUPPORTED);
    *mw = (unsigned)value_at(g, K_POWER, t);
    LEAVE(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t d, unsigned long long *mj) {
    ENTER_DEV("nvmlDeviceGetTotalEnergyConsumption", d);
    if (d->mig >= 0) LEAVE(NVML_ERROR_NOT_SUPPORTED);
    /* mW x ms = µJ */
    *mj = (unsigned long long)(integral(g, K_POWER, 0, t) / 1000.0);
    LEAVE(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned int *c) {
    ENTER_DEV("nvmlDeviceGetTemperature", d);
    if (sensor != 0 || d->mig >= 0) LEAVE(NVML_ERROR_NOT_SUPPORTED);
    *c = (unsigned)value_at(g, K_TEMP, t);
    LEAVE(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, int type, unsigned int *mhz) {
    ENTER_DEV("nvmlDeviceGetClockInfo", d);
    if (type != NVML_CLOCK_SM || d->mig >= 0) LEAVE(NVML_ERROR_NOT_SUPPORTED);
    *mhz = (unsigned)value_at(g, K_SM_CLOCK, t);
    LEAVE(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t d, int counter, unsigned int *kbs) {
    ENTER_DEV("nvmlDeviceGetPcieThroughput", d);
    if (d->mig >= 0) LEAVE(NVML_ERROR_NOT_SUPPORTED);
    /* the driver measures over 20 ms */
    int k = counter == NVML_PCIE_UTIL_TX_BYTES ? K_PCIE_TX : counter == NVML_PCIE_UTIL_RX_BYTES ? K_PCIE_RX : -1;
    if (k < 0) LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    *kbs = (unsigned)average(g, k, t - 20, t);
    LEAVE(NVML_SUCCESS);
}
static nvmlReturn_t reasons(nvmlDevice_t d, unsigned long long *r, const char *fn) {
    ENTER_DEV(fn, d);
    if (d->mig >= 0) LEAVE(NVML_ERROR_NOT_SUPPORTED);
    *r = (unsigned long long)value_at(g, K_THROTTLE, t);
    LEAVE(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t d, unsigned long long *r) {
    return reasons(d, r, "nvmlDeviceGetCurrentClocksThrottleReasons");
}
EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t d, unsigned long long *r) {
    return reasons(d, r, "nvmlDeviceGetCurrentClocksEventReasons");
}
EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, int errorType, int counterType, unsigned long long *n) {
    ENTER_DEV("nvmlDeviceGetTotalEccErrors", d);
    (void)counterType;
    if (d->mig >= 0) LEAVE(NVML_ERROR_NOT_SUPPORTED);
    *n = (unsigned long long)value_at(g, errorType == 0 ? K_ECC_CORRECTED : K_ECC_UNCORRECTED, t);
    LEAVE(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t d, int n, nvmlFieldValue_t *values) {
    ENTER_DEV("nvmlDeviceGetFieldValues", d);
    for (int i = 0; i < n; i++) {
        nvmlFieldValue_t *v = &values[i];
        v->timestamp = (long long)wall_us_at(t);
        v->latencyUsec = 0;
        v->nvmlReturn = NVML_SUCCESS;
        switch (v->fieldId) {
        case NVML_FI_DEV_NVLINK_LINK_COUNT:
            v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
            v->value.uiVal = (unsigned)S.nvlinks[g];
            break;
        case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX:
        case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX:
            if (v->scopeId >= (unsigned)S.nvlinks[g] || d->mig >= 0) {
                v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
                break;
            }
            /* KiB since init: the per-link rate (KB/s) integrated over time */
            v->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
            v->value.ullVal = (unsigned long long)(integral(
                g, v->fieldId == NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX ? K_NVLINK_TX : K_NVLINK_RX, 0, t) / 1000.0);
            break;
        default:
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
    }
    LEAVE(NVML_SUCCESS);
}

/* Buffered samples: one every sample_ms since init, each the average over its
 * period, the newest 120 kept (as the driver's ring buffer). */
EXPORT nvmlReturn_t nvmlDeviceGetSamples(nvmlDevice_t d, int type, unsigned long long last_seen, int *value_type,
                                         unsigned int *count, nvmlSample_t *samples) {
    ENTER_DEV("nvmlDeviceGetSamples", d);
    if (d->mig >= 0) LEAVE(NVML_ERROR_NOT_SUPPORTED);
    int k = type == NVML_GPU_UTILIZATION_SAMPLES ? K_UTIL : type == NVML_MEMORY_UTILIZATION_SAMPLES ? K_MEM_UTIL : -1;
    if (k < 0) LEAVE(NVML_ERROR_NOT_SUPPORTED);
    long newest = (long)(t / S.sample_ms);
    long oldest = newest - 119 > 1 ? newest - 119 : 1;
    unsigned int n = 0, cap = samples ? *count : 0;
    for (long i = oldest; i <= newest; i++) {
        double at = (double)i * S.sample_ms;
        unsigned long long ts = wall_us_at(at);
        if (ts <= last_seen) continue;
        if (samples && n < cap) {
            samples[n].timeStamp = ts;
            samples[n].sampleValue.uiVal = (unsigned)(average(g, k, at - S.sample_ms, at) + 0.5);
        }
        n++;
    }
    *value_type = NVML_VALUE_TYPE_UNSIGNED_INT;
    if (n == 0) LEAVE(NVML_ERROR_NOT_FOUND);
    if (samples && n > cap) {
        *count = n;
        LEAVE(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    *count = n;
    LEAVE(NVML_SUCCESS);
}

static nvmlReturn_t processes(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_t *infos, const char *fn) {
    ENTER_DEV(fn, d);
    nvmlProcessInfo_t p[MAX_PROCS];
    unsigned int sm[MAX_PROCS];
    unsigned int n = (unsigned)procs_at(g, t, p, sm);
    if (d->mig >= 0) n = 0; /* processes are scripted on the whole GPU */
    if (!infos || *count < n) {
        *count = n;
        LEAVE(n == 0 ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE);
    }
    memcpy(infos, p, n * sizeof *p);
    *count = n;
    LEAVE(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_t *p) {
    return processes(d, count, p, "nvmlDeviceGetComputeRunningProcesses_v3");
}
EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_t *p) {
    (void)p;
    pthread_mutex_lock(&S.lock);
    *count = 0;
    LEAVE(d ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT);
}
EXPORT nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_t *p) {
    return nvmlDeviceGetGraphicsRunningProcesses_v3(d, count, p);
}
EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t d, nvmlProcessUtilizationSample_t *out,
                                                    unsigned int *count, unsigned long long last_seen) {
    ENTER_DEV("nvmlDeviceGetProcessUtilization", d);
    (void)last_seen;
    nvmlProcessInfo_t p[MAX_PROCS];
    unsigned int sm[MAX_PROCS];
    unsigned int n = (unsigned)procs_at(g, t, p, sm);
    if (n == 0 || d->mig >= 0) LEAVE(NVML_ERROR_NOT_FOUND);
    if (!out || *count < n) {
        *count = n;
        LEAVE(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    double mem_total = value_at(g, K_MEM_TOTAL, t);
    for (unsigned int i = 0; i < n; i++)
        out[i] = (nvmlProcessUtilizationSample_t){
            p[i].pid, wall_us_at(t), sm[i], (unsigned)(100.0 * (double)p[i].usedGpuMemory / mem_total), 0, 0,
        };
    *count = n;
    LEAVE(NVML_SUCCESS);
}

/* ---- events (XID) ---- */
EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    if (!S.initialized) return NVML_ERROR_UNINITIALIZED;
    *set = calloc(1, sizeof **set);
    return *set ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}
EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    free(set);
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t d, unsigned long long *types) {
    ENTER_DEV("nvmlDeviceGetSupportedEventTypes", d);
    *types = NVML_EVENT_TYPE_XID;
    LEAVE(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types, nvmlEventSet_t set) {
    ENTER_DEV("nvmlDeviceRegisterEvents", d);
    if (!set || (types & ~NVML_EVENT_TYPE_XID)) LEAVE(NVML_ERROR_NOT_SUPPORTED);
    set->types[g] |= types;
    LEAVE(NVML_SUCCESS);
}
/* The oldest XID due and not yet handed out; else wait up to timeout_ms. */
EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeout_ms) {
    for (;;) {
        pthread_mutex_lock(&S.lock);
        if (!S.initialized) LEAVE(NVML_ERROR_UNINITIALIZED);
        double t = now_ms();
        for (int i = 0; i < S.n_entries; i++) {
            struct entry *e = &S.entries[i];
            if (e->kind != E_XID || e->delivered || e->t_ms > t) continue;
            int g = e->gpu < 0 ? 0 : e->gpu;
            if (!(set->types[g] & NVML_EVENT_TYPE_XID)) continue;
            e->delivered = 1;
            *data = (nvmlEventData_t){ &S.devs[g], NVML_EVENT_TYPE_XID, (unsigned long long)e->value, 0xFFFFFFFF,
                                       0xFFFFFFFF };
            LEAVE(NVML_SUCCESS);
        }
        pthread_mutex_unlock(&S.lock);
        if (timeout_ms == 0) return NVML_ERROR_TIMEOUT;
        unsigned int step = timeout_ms < 10 ? timeout_ms : 10;
        usleep(step * 1000);
        timeout_ms -= step;
    }
}

/* ---- MIG ---- */
EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int *current, unsigned int *pending) {
    ENTER_DEV("nvmlDeviceGetMigMode", d);
    *current = *pending = S.mig[g] > 0;
    LEAVE(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t d, unsigned int *count) {
    ENTER_DEV("nvmlDeviceGetMaxMigDeviceCount", d);
    *count = MAX_MIG;
    LEAVE(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t d, unsigned int index, nvmlDevice_t *mig) {
    ENTER_DEV("nvmlDeviceGetMigDeviceHandleByIndex", d);
    if (d->mig >= 0 || index >= MAX_MIG) LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    if ((int)index >= S.mig[g]) LEAVE(NVML_ERROR_NOT_FOUND);
    *mig = &S.mig_devs[g][index];
    LEAVE(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t d, unsigned int *is_mig) {
    ENTER_DEV("nvmlDeviceIsMigDeviceHandle", d);
    *is_mig = d->mig >= 0;
    LEAVE(NVML_SUCCESS);
}

/* ---- GPM: two samples, metrics are averages between them ---- */
EXPORT nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t d, nvmlGpmSupport_t *s) {
    ENTER_DEV("nvmlGpmQueryDeviceSupport", d);
    s->isSupportedDevice = d->mig < 0 && S.gpm[g];
    LEAVE(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *s) {
    *s = calloc(1, sizeof **s);
    if (*s) (*s)->gpu = -1;
    return *s ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}
EXPORT nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t s) {
    free(s);
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t d, nvmlGpmSample_t s) {
    ENTER_DEV("nvmlGpmSampleGet", d);
    if (!S.gpm[g] || d->mig >= 0) LEAVE(NVML_ERROR_NOT_SUPPORTED);
    s->gpu = g;
    s->t_ms = t;
    LEAVE(NVML_SUCCESS);
}
static char *const gpm_units[] = { "%", "MiB/sec" };
EXPORT nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *m) {
    pthread_mutex_lock(&S.lock);
    if (!S.initialized) LEAVE(NVML_ERROR_UNINITIALIZED);
    if (m->version != 1 || m->numMetrics > 98 || !m->sample1 || !m->sample2 || m->sample1->gpu < 0 ||
        m->sample1->gpu != m->sample2->gpu)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    int g = m->sample1->gpu;
    double a = m->sample1->t_ms, b = m->sample2->t_ms;
    for (unsigned int i = 0; i < m->numMetrics; i++) {
        nvmlGpmMetric_t *x = &m->metrics[i];
        int k = -1, mib = 0;
        switch (x->metricId) {
        case 1: k = K_UTIL; break;          /* GRAPHICS_UTIL */
        case 2: k = K_SM_ACTIVE; break;     /* SM_UTIL */
        case 3: k = K_SM_OCCUPANCY; break;  /* SM_OCCUPANCY */
        case 5: k = K_TENSOR_ACTIVE; break; /* ANY_TENSOR_UTIL */
        case 10: k = K_DRAM_ACTIVE; break;  /* DRAM_BW_UTIL */
        case 20: k = K_PCIE_TX; mib = 1; break;
        case 21: k = K_PCIE_RX; mib = 1; break;
        case 60: k = K_NVLINK_RX; mib = 2; break; /* all links */
        case 61: k = K_NVLINK_TX; mib = 2; break;
        }
        x->metricInfo.shortName = x->metricInfo.longName = (char *)"fake";
        x->metricInfo.unit = gpm_units[mib ? 1 : 0];
        if (k < 0) {
            x->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
            continue;
        }
        double v = average(g, k, a, b);
        if (mib) v = v * 1000.0 / (1024.0 * 1024.0) * (mib == 2 ? S.nvlinks[g] : 1); /* KB/s -> MiB/s */
        x->value = v;
        x->nvmlReturn = NVML_SUCCESS;
    }
    LEAVE(NVML_SUCCESS);
}
#endif /* FAKE_NVML_MINIMAL */
